//! The Results and Long-context views: the tidy records the experiments write (a
//! `results.json`'s `records`, a list of records as `lm passkey --format json` prints, a
//! CSV), found under the directories the server was given and read only from inside them.
//! They are read and summarised over seeds by [`posenc_train::records`], as `posenc report`
//! reads them for the book, so the explorer and the book give the same numbers.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use posenc_train::records::{self as tidy, Summary};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// A records file: its name (`docs/lm-experiment/results.json`), its study and size.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// Its name, the root's name first.
    pub path: String,
    /// The study it records, as the page lists it: its directory (`docs/lm-experiment`),
    /// and the file's name after it unless it is the study's `results.json`.
    pub study: String,
    /// Its size in bytes.
    pub bytes: u64,
}

impl Listed {
    fn new(path: String, bytes: u64) -> Self {
        let study = match path.rsplit_once('/') {
            Some((dir, "results.json")) => dir.to_string(),
            Some((dir, file)) => format!("{dir} · {file}"),
            None => path.clone(),
        };
        Self { path, study, bytes }
    }
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
            out.push(Listed::new(named, bytes));
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

pub use posenc_train::records::{columns, Column, Point, Record};

/// The longest length the records' models were trained on, where they say: the one value
/// of their `context` (a language model's), or the largest `length` of the records marked
/// `trained` (a length-generalization task's). The page marks it on a chart by length.
pub fn trained_length(records: &[Record]) -> Option<f64> {
    let contexts: Vec<f64> = records
        .iter()
        .filter_map(|r| r.get("context").and_then(Value::as_f64))
        .collect();
    if let Some(&first) = contexts.first() {
        let one = contexts.len() == records.len() && contexts.iter().all(|&c| c == first);
        return one.then_some(first);
    }
    records
        .iter()
        .filter(|r| r.get("trained") == Some(&Value::Bool(true)))
        .filter_map(|r| r.get("length").and_then(Value::as_f64))
        .reduce(f64::max)
}

/// Reads the records of `path` (listed as `name`) as [`posenc_train::records::read`] reads
/// them: a `.csv`, a JSON list of records, or a JSON object with a `records` list (an
/// object without one is one record).
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
    // Read as `posenc report` reads it; errors name the file as listed, never where it lies.
    let records = match name.ends_with(".csv") {
        true => tidy::from_csv(&text),
        false => {
            let value: Value = serde_json::from_str(&text)
                .map_err(|e| ApiError::bad_request(format!("`{name}` is not valid JSON: {e}")))?;
            tidy::in_list(&value, "records")
        }
    };
    records.map_err(|e| ApiError::bad_request(format!("`{name}`: {e}")))
}

/// `POST /api/aggregate`: which values of which file, against what, in which groups: the
/// file, and the fields of a [`Summary`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateRequest {
    /// The file, as listed.
    pub path: String,
    /// [`Summary::y`].
    pub y: String,
    /// [`Summary::x`].
    #[serde(default)]
    pub x: Option<String>,
    /// [`Summary::group`].
    #[serde(default)]
    pub group: Option<String>,
    /// [`Summary::filter`].
    #[serde(default)]
    pub filter: BTreeMap<String, Value>,
}

/// One series: a group's mean and spread at each x, and its colour.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// The group's value.
    pub name: String,
    /// Its colour, `#rrggbb`: the static figures' own for the label.
    pub colour: String,
    /// Its line, as the static figures draw it: `solid`, `dashed` or `dotted`.
    pub dash: &'static str,
    /// Its points, in x order.
    pub points: Vec<Point>,
}

/// The records of `request` summarised ([`posenc_train::records::aggregate`]): one
/// [`Series`] per group, mean and spread at each x, each in its figures' colour.
///
/// # Errors
/// A column the records lack, or a `y` that is not a number.
pub fn aggregate(records: &[Record], request: &AggregateRequest) -> Result<Vec<Series>, ApiError> {
    let summary = Summary {
        y: request.y.clone(),
        x: request.x.clone(),
        group: request.group.clone(),
        filter: request.filter.clone(),
    };
    let series =
        tidy::aggregate(records, &summary).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let labels: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    let styles = posenc_plot::chart::label_styles(&labels);
    Ok(series
        .into_iter()
        .zip(styles)
        .map(|(s, style)| Series {
            name: s.name,
            colour: format!(
                "#{:02x}{:02x}{:02x}",
                style.colour.0, style.colour.1, style.colour.2
            ),
            dash: match style.dash {
                posenc_plot::chart::Dash::Solid => "solid",
                posenc_plot::chart::Dash::Dashed => "dashed",
                posenc_plot::chart::Dash::Dotted => "dotted",
            },
            points: s.points,
        })
        .collect())
}
