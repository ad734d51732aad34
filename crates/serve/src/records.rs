//! The Results and Long-context views: the tidy records the experiments write (a
//! `results.json`'s `records`, a list of records as `lm passkey --format json` prints, a
//! CSV), found under the directories the server was given, read only from inside them, and
//! summarised over seeds as the static figures summarise them.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The largest records file read (a results.json with every run's history is a few MB).
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// The most files a listing walks before it stops (a `--runs` over a whole disk).
pub const MAX_FILES: usize = 2_000;
/// How deep a listing walks below each directory.
pub const MAX_DEPTH: usize = 6;

/// One directory the server reads records from, under the name its files are listed by.
#[derive(Debug, Clone)]
pub struct Root {
    /// The first component of its files' names (`docs`, `runs`).
    pub name: String,
    /// The directory, canonical.
    pub dir: PathBuf,
}

/// The directories records are read from: each named by its last component, made unique.
///
/// # Errors
/// A directory that does not exist or cannot be read.
pub fn roots(dirs: &[PathBuf]) -> Result<Vec<Root>, String> {
    let mut roots: Vec<Root> = Vec::new();
    for dir in dirs {
        let canonical = dir
            .canonicalize()
            .map_err(|e| format!("the directory {}: {e}", dir.display()))?;
        if !canonical.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        let base = canonical
            .file_name()
            .map_or("root".to_string(), |n| n.to_string_lossy().into_owned());
        let mut name = base.clone();
        let mut n = 2;
        while roots.iter().any(|r| r.name == name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        roots.push(Root {
            name,
            dir: canonical,
        });
    }
    Ok(roots)
}

/// A records file: its name (`docs/lm-experiment/results.json`) and size.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// Its name, the root's name first.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Every records file under `roots`: each `results.json`, each `.csv`, and each other
/// `.json` that holds a list, walked in name order, at most [`MAX_FILES`].
pub fn list(roots: &[Root]) -> Vec<Listed> {
    let mut out = Vec::new();
    for root in roots {
        walk(&root.dir, &root.name, 0, &mut out);
    }
    out
}

fn walk(dir: &Path, name: &str, depth: usize, out: &mut Vec<Listed>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if out.len() >= MAX_FILES {
            return;
        }
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.starts_with('.') || file_name == "node_modules" {
            continue;
        }
        let path = entry.path();
        // Symbolic links are not followed: a listing never leaves its directory.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let named = format!("{name}/{file_name}");
        if kind.is_dir() && depth < MAX_DEPTH {
            walk(&path, &named, depth + 1, out);
        } else if kind.is_file() && is_records(&path, &file_name) {
            let bytes = entry.metadata().map_or(0, |m| m.len());
            out.push(Listed { path: named, bytes });
        }
    }
}

fn is_records(path: &Path, file_name: &str) -> bool {
    if file_name == "results.json" || file_name.ends_with(".csv") {
        return true;
    }
    if !file_name.ends_with(".json") {
        return false;
    }
    // A list of records starts with `[`: read the first bytes only.
    use std::io::Read;
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head[..n]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'[')
}

/// The file `name` (`docs/lm-experiment/results.json`) names, if it lies inside its root.
///
/// # Errors
/// 403 for a name that is absolute, climbs with `..`, or leads (by a symbolic link) out of
/// its root; 404 for an unknown root or a file that does not exist.
pub fn resolve(roots: &[Root], name: &str) -> Result<PathBuf, ApiError> {
    let path = Path::new(name);
    let mut components = path.components();
    let root = match components.next() {
        Some(Component::Normal(first)) => first.to_string_lossy().into_owned(),
        _ => {
            return Err(ApiError::forbidden(format!(
                "`{name}`: give a path as listed, under one of the directories given \
                 (`docs/…`): absolute paths and `..` are refused"
            )))
        }
    };
    if components
        .clone()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(ApiError::forbidden(format!(
            "`{name}`: `..` and other special components are refused"
        )));
    }
    let Some(root) = roots.iter().find(|r| r.name == root) else {
        return Err(ApiError::not_found(format!(
            "`{name}`: no directory `{root}` (the server reads {})",
            roots
                .iter()
                .map(|r| format!("`{}`", r.name))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let joined = root.dir.join(components.as_path());
    let canonical = joined
        .canonicalize()
        .map_err(|e| ApiError::not_found(format!("`{name}`: {e}")))?;
    if !canonical.starts_with(&root.dir) {
        return Err(ApiError::forbidden(format!(
            "`{name}` leads outside `{}` (a symbolic link?)",
            root.name
        )));
    }
    if !canonical.is_file() {
        return Err(ApiError::not_found(format!("`{name}` is not a file")));
    }
    Ok(canonical)
}

/// One record: its fields by column name.
pub type Record = Map<String, Value>;

/// Reads the records of `path`: a `.csv` (numbers and `true`/`false` typed, empty cells
/// null), a JSON list of objects, or a JSON object with a `records` list.
///
/// # Errors
/// A file past [`MAX_FILE_BYTES`], malformed, or holding no records, named.
pub fn read(path: &Path, name: &str) -> Result<Vec<Record>, ApiError> {
    let bytes = std::fs::metadata(path)
        .map_err(|e| ApiError::not_found(format!("`{name}`: {e}")))?
        .len();
    if bytes > MAX_FILE_BYTES {
        return Err(ApiError::bad_request(format!(
            "`{name}` is {bytes} bytes, past the {MAX_FILE_BYTES} a records file may be"
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| ApiError::bad_request(format!("`{name}`: {e}")))?;
    if name.ends_with(".csv") {
        return read_csv(&text, name);
    }
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| ApiError::bad_request(format!("`{name}` is not valid JSON: {e}")))?;
    let list = match value {
        Value::Array(list) => list,
        Value::Object(mut fields) => match fields.remove("records") {
            Some(Value::Array(list)) => list,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "`{name}` has no `records` list"
                )))
            }
        },
        _ => {
            return Err(ApiError::bad_request(format!(
                "`{name}` holds neither a list of records nor an object with one"
            )))
        }
    };
    list.into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Object(record) => Ok(record),
            other => Err(ApiError::bad_request(format!(
                "`{name}`: record {i} is not an object: {other}"
            ))),
        })
        .collect()
}

fn read_csv(text: &str, name: &str) -> Result<Vec<Record>, ApiError> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| ApiError::bad_request(format!("`{name}`: {e}")))?
        .clone();
    reader
        .records()
        .map(|row| {
            let row = row.map_err(|e| ApiError::bad_request(format!("`{name}`: {e}")))?;
            Ok(headers
                .iter()
                .zip(row.iter())
                .map(|(h, cell)| (h.to_string(), cell_value(cell)))
                .collect())
        })
        .collect()
}

fn cell_value(cell: &str) -> Value {
    match cell {
        "" => Value::Null,
        "true" | "True" => Value::Bool(true),
        "false" | "False" => Value::Bool(false),
        _ => cell
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| Value::String(cell.to_string()), Value::Number),
    }
}

/// A column of a records file and what it holds.
#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Whether every value is a number or a boolean (a value to average).
    pub numeric: bool,
    /// Its distinct values when there are at most 50 (to group or filter by).
    pub values: Option<Vec<Value>>,
}

/// The columns of `records`, by name.
pub fn columns(records: &[Record]) -> Vec<Column> {
    let mut names: Vec<String> = Vec::new();
    for record in records {
        for key in record.keys() {
            if !names.contains(key) {
                names.push(key.clone());
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let present: Vec<&Value> = records
                .iter()
                .filter_map(|r| r.get(&name))
                .filter(|v| !v.is_null())
                .collect();
            let numeric = !present.is_empty() && present.iter().all(|v| number(v).is_some());
            let mut distinct: Vec<Value> = Vec::new();
            for v in &present {
                if !v.is_object() && !v.is_array() && !distinct.contains(v) {
                    distinct.push((*v).clone());
                    if distinct.len() > 50 {
                        break;
                    }
                }
            }
            Column {
                name,
                numeric,
                values: (distinct.len() <= 50).then_some(distinct),
            }
        })
        .collect()
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

/// `POST /api/aggregate`: which values of which file, against what, in which groups.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateRequest {
    /// The file, as listed.
    pub path: String,
    /// The column averaged (a number or a boolean: `correct` averages to the fraction found).
    pub y: String,
    /// The column along the x axis (`length`); none: one point per group.
    #[serde(default)]
    pub x: Option<String>,
    /// The column whose values are the series [default: `label`, else `encoding`].
    #[serde(default)]
    pub group: Option<String>,
    /// Only the records whose columns hold these values.
    #[serde(default)]
    pub filter: BTreeMap<String, Value>,
}

/// One series: a group's mean and spread at each x.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// The group's value.
    pub name: String,
    /// Its colour, `#rrggbb`: the static figures' own for the label.
    pub colour: String,
    /// Its points, in x order.
    pub points: Vec<Point>,
}

/// The records of one group at one x.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The x value (a number or a category).
    pub x: Value,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (0 for one record).
    pub sd: f64,
    /// Every value averaged, in file order (one per seed in an experiment's records).
    pub values: Vec<f64>,
}

/// The records of `request` summarised: one [`Series`] per group, mean and spread at each x.
///
/// # Errors
/// A column the records lack, or a `y` that is not a number.
pub fn aggregate(records: &[Record], request: &AggregateRequest) -> Result<Vec<Series>, ApiError> {
    let names = columns(records);
    let has = |c: &str| names.iter().any(|n| n.name == c);
    let known = || {
        names
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The series' column: the one asked for, else `label`, else `encoding`, else one
    // series of every record.
    let group = match &request.group {
        Some(g) => Some(g.clone()),
        None => ["label", "encoding"]
            .into_iter()
            .find(|c| has(c))
            .map(String::from),
    };
    for column in [Some(&request.y), request.x.as_ref(), request.group.as_ref()]
        .into_iter()
        .flatten()
        .chain(request.filter.keys())
    {
        if !has(column) {
            return Err(ApiError::bad_request(format!(
                "no column `{column}` (the columns are {})",
                known()
            )));
        }
    }
    if !names.iter().any(|c| c.name == request.y && c.numeric) {
        return Err(ApiError::bad_request(format!(
            "`{}` is not a column of numbers to average",
            request.y
        )));
    }
    // Each group's name and its points: an x and the values found there.
    type Points = Vec<(Value, Vec<f64>)>;
    let mut groups: Vec<(String, Points)> = Vec::new();
    for record in records {
        if request
            .filter
            .iter()
            .any(|(k, v)| record.get(k).unwrap_or(&Value::Null) != v)
        {
            continue;
        }
        let Some(y) = record.get(&request.y).and_then(number) else {
            continue;
        };
        let name = match group.as_ref().and_then(|g| record.get(g)) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => "all".into(),
            Some(other) => other.to_string(),
        };
        let x = match &request.x {
            Some(x) => record.get(x).cloned().unwrap_or(Value::Null),
            None => Value::Null,
        };
        let at = match groups.iter().position(|(n, _)| *n == name) {
            Some(i) => i,
            None => {
                groups.push((name, Vec::new()));
                groups.len() - 1
            }
        };
        let points = &mut groups[at].1;
        match points.iter_mut().find(|(px, _)| *px == x) {
            Some((_, values)) => values.push(y),
            None => points.push((x, vec![y])),
        }
    }
    let labels: Vec<&str> = groups.iter().map(|(n, _)| n.as_str()).collect();
    let colours = posenc_plot::chart::label_colours(&labels);
    Ok(groups
        .iter()
        .zip(colours)
        .map(|((name, points), colour)| {
            let mut points: Vec<Point> = points
                .iter()
                .map(|(x, values)| {
                    let (mean, sd) = posenc_train::results::mean_sd(values);
                    Point {
                        x: x.clone(),
                        mean,
                        sd,
                        values: values.clone(),
                    }
                })
                .collect();
            points.sort_by(|a, b| match (number(&a.x), number(&b.x)) {
                (Some(p), Some(q)) => p.total_cmp(&q),
                _ => std::cmp::Ordering::Equal,
            });
            Series {
                name: name.clone(),
                colour: format!("#{:02x}{:02x}{:02x}", colour.0, colour.1, colour.2),
                points,
            }
        })
        .collect())
}
