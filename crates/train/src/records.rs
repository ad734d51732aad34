//! Tidy records, read and summarised one way for every reader: `posenc report` renders the
//! book's tables and values from them, and the explorer (`posenc serve`) draws them.
//!
//! A records file is a `.csv` (a row a record), a JSON list of records (a study script's,
//! RULER's), or a JSON object holding its list as `records` (an experiment's
//! `results.json`, with other lists beside it, such as `runs`, read by name). Every
//! reader takes numbers by one rule ([`cell`]): a whole number is an integer, other
//! numbers are floats, `True`/`False` (pandas' way, or in lower case) are booleans, an
//! empty CSV field is null. [`aggregate`] summarises a file's records as every figure
//! and table does: the mean and sample standard deviation of a column, by group and x.

use std::path::Path;

use posenc_error::{bail, ensure, Context};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;
use crate::results::{mean_sd, RESULTS_JSON};

/// One record: its fields by column name.
pub type Record = Map<String, Value>;

/// The records of `path` in its list `list` (`records` for the usual one): `path` is a
/// `.csv` (one list, `records`), a `.json` file, or a study directory whose
/// `results.json` is read. In JSON, a file that is one object is one record, a list of
/// plain values is records of one field, `value`, and `*.inner` reads a list of items
/// each holding a list `inner`: every inner record, with its item's scalar fields beside
/// its own.
///
/// # Errors
/// A file that cannot be read or parsed, or holds no such list, named.
pub fn read(path: &Path, list: &str) -> Result<Vec<Record>> {
    if path.extension().is_some_and(|e| e == "csv") {
        ensure!(
            list == "records",
            "{} is a CSV file, one list of records, not `{list}`",
            path.display()
        );
        return read_csv(path);
    }
    let file = match path.extension().is_some_and(|e| e == "json") {
        true => path.to_path_buf(),
        false => path.join(RESULTS_JSON),
    };
    let raw: Value = crate::rundir::read_json(&file)?;
    Ok(in_list(&raw, list).with_context(|| format!("reading {}", file.display()))?)
}

/// The records of `raw` (a file's JSON) in its list `list`, as [`read`] reads them.
///
/// # Errors
/// No such list, or one that holds something other than records.
pub fn in_list(raw: &Value, list: &str) -> Result<Vec<Record>> {
    if let Some(inner) = list.strip_prefix("*.") {
        return nested(raw, inner);
    }
    let found = match (raw.get(list), list) {
        (Some(found), _) => found,
        (None, "records") => raw,
        (None, _) => bail!("it has no list `{list}`"),
    };
    match found {
        // A list of plain values (a recorder's samples): each a record of one field.
        Value::Array(values) if values.iter().all(|v| !v.is_object()) => Ok(values
            .iter()
            .map(|v| Record::from_iter([("value".to_string(), v.clone())]))
            .collect()),
        Value::Array(records) => records
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Object(record) => Ok(record.clone()),
                other => bail!("record {i} is not an object: {other}"),
            })
            .collect(),
        // One record on its own (a recorder's summary).
        Value::Object(record) if list == "records" => Ok(vec![record.clone()]),
        _ => bail!(
            "it holds no list of records{}",
            match list {
                "records" => String::new(),
                _ => format!(" as `{list}`"),
            }
        ),
    }
}

/// Every record of each item's list `inner`, with the item's scalar fields beside its own
/// (an example's variants, each with its lengths).
fn nested(raw: &Value, inner: &str) -> Result<Vec<Record>> {
    let items = raw
        .as_array()
        .context("the file is not a list of items, as `*.` reads")?;
    let mut records = Vec::new();
    for item in items {
        let list = item
            .get(inner)
            .and_then(Value::as_array)
            .with_context(|| format!("an item has no list `{inner}`"))?;
        let outer: Record = item
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| !v.is_array() && !v.is_object())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for record in list {
            let mut record = record
                .as_object()
                .with_context(|| format!("`{inner}` holds something that is not a record"))?
                .clone();
            for (k, v) in &outer {
                record.entry(k.clone()).or_insert_with(|| v.clone());
            }
            records.push(record);
        }
    }
    Ok(records)
}

/// The rows of a tidy CSV file as records, each field by [`cell`].
fn read_csv(path: &Path) -> Result<Vec<Record>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(from_csv(&text).with_context(|| format!("reading {}", path.display()))?)
}

/// The rows of tidy CSV text as records, each field by [`cell`].
///
/// # Errors
/// A row that is not CSV, or has another number of fields than the header, by its line.
pub fn from_csv(text: &str) -> Result<Vec<Record>> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().context("the header")?.clone();
    let mut records = Vec::new();
    for (i, row) in reader.records().enumerate() {
        let row = row.with_context(|| format!("row {}", i + 2))?;
        records.push(
            header
                .iter()
                .zip(row.iter())
                .map(|(k, v)| (k.to_string(), cell(v)))
                .collect(),
        );
    }
    Ok(records)
}

/// A CSV field as a value: a whole number an integer, another number a float, `True` or
/// `False` (or in lower case) a boolean, an empty field null, anything else a string.
pub fn cell(field: &str) -> Value {
    if field.is_empty() {
        return Value::Null;
    }
    match field {
        "True" | "true" => return true.into(),
        "False" | "false" => return false.into(),
        _ => {}
    }
    if let Ok(n) = field.parse::<i64>() {
        return n.into();
    }
    match field
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
    {
        Some(x) => Value::Number(x),
        None => field.into(),
    }
}

/// A value to average: a number, or a boolean as 0 or 1.
pub fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

/// A column of a records file and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Whether every value is a number or a boolean (a value to average).
    pub numeric: bool,
    /// Its distinct values when there are at most 50 (to group or filter by).
    pub values: Option<Vec<Value>>,
}

/// The columns of `records`, in the order they first appear.
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

/// What to summarise: which column, against what, in which groups, of which records.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
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
    pub filter: std::collections::BTreeMap<String, Value>,
}

/// One series: a group's mean and spread at each x.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// The group's value.
    pub name: String,
    /// Its points, in x order (numbers ascending; categories in file order).
    pub points: Vec<Point>,
}

/// The records of one group at one x.
#[derive(Debug, Clone, PartialEq, Serialize)]
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

/// `records` summarised as `summary` asks: one [`Series`] per group, in the order groups
/// first appear, with the mean and sample standard deviation ([`mean_sd`]) of `y` at each
/// x.
///
/// # Errors
/// A column the records lack, or a `y` that is not a number, named with the columns there
/// are.
pub fn aggregate(records: &[Record], summary: &Summary) -> Result<Vec<Series>> {
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
    let group = match &summary.group {
        Some(g) => Some(g.clone()),
        None => ["label", "encoding"]
            .into_iter()
            .find(|c| has(c))
            .map(String::from),
    };
    for column in [Some(&summary.y), summary.x.as_ref(), summary.group.as_ref()]
        .into_iter()
        .flatten()
        .chain(summary.filter.keys())
    {
        ensure!(
            has(column),
            "no column `{column}` (the columns are {})",
            known()
        );
    }
    ensure!(
        names.iter().any(|c| c.name == summary.y && c.numeric),
        "`{}` is not a column of numbers to average",
        summary.y
    );
    // Each group's name and its points: an x and the values found there.
    type Points = Vec<(Value, Vec<f64>)>;
    let mut groups: Vec<(String, Points)> = Vec::new();
    for record in records {
        if summary
            .filter
            .iter()
            .any(|(k, v)| record.get(k).unwrap_or(&Value::Null) != v)
        {
            continue;
        }
        let Some(y) = record.get(&summary.y).and_then(number) else {
            continue;
        };
        let name = match group.as_ref().and_then(|g| record.get(g)) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => "all".into(),
            Some(other) => other.to_string(),
        };
        let x = match &summary.x {
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
    Ok(groups
        .into_iter()
        .map(|(name, points)| {
            let mut points: Vec<Point> = points
                .into_iter()
                .map(|(x, values)| {
                    let (mean, sd) = mean_sd(&values);
                    Point {
                        x,
                        mean,
                        sd,
                        values,
                    }
                })
                .collect();
            points.sort_by(|a, b| match (number(&a.x), number(&b.x)) {
                (Some(p), Some(q)) => p.total_cmp(&q),
                _ => std::cmp::Ordering::Equal,
            });
            Series { name, points }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_fields_read_by_one_rule() {
        let records = from_csv("n,x,ok,note,empty\n3,2.5,True,a b,\n-4,1e3,false,7x,\n").unwrap();
        assert_eq!(records[0]["n"], json!(3));
        assert!(records[0]["n"].is_i64(), "a whole number is an integer");
        assert_eq!(records[0]["x"], json!(2.5));
        assert_eq!(records[0]["ok"], json!(true));
        assert_eq!(records[0]["note"], json!("a b"));
        assert_eq!(records[0]["empty"], Value::Null);
        assert_eq!(
            (records[1]["n"].clone(), records[1]["x"].clone()),
            (json!(-4), json!(1000.0))
        );
        assert_eq!(records[1]["ok"], json!(false));
        assert!(from_csv("a,b\n1\n").is_err(), "a short row");
    }

    #[test]
    fn json_lists_objects_and_values_are_records() {
        let experiment = json!({"records": [{"a": 1}], "runs": [{"b": 2}]});
        assert_eq!(in_list(&experiment, "records").unwrap()[0]["a"], json!(1));
        assert_eq!(in_list(&experiment, "runs").unwrap()[0]["b"], json!(2));
        let e = in_list(&experiment, "ruins").unwrap_err().to_string();
        assert!(e.contains("has no list `ruins`"), "{e}");
        assert_eq!(in_list(&json!({"m": 1}), "records").unwrap().len(), 1);
        assert_eq!(
            in_list(&json!([1, 2]), "records").unwrap()[1]["value"],
            json!(2)
        );
        let nested = json!([{"name": "v", "lengths": [{"n": 1}, {"n": 2}]}]);
        let rows = in_list(&nested, "*.lengths").unwrap();
        assert_eq!((rows.len(), rows[1]["name"].clone()), (2, json!("v")));
        assert!(in_list(&json!({"records": 3}), "records").is_err());
        assert!(in_list(&json!([{"a": 1}, 2]), "records").is_err());
    }

    #[test]
    fn aggregate_is_the_mean_and_sample_spread_by_group_and_x() {
        let records = in_list(
            &json!([
                {"label": "a", "n": 16, "y": 1.0}, {"label": "a", "n": 8, "y": 1.0},
                {"label": "a", "n": 8, "y": 0.5}, {"label": "b", "n": 8, "y": true}
            ]),
            "records",
        )
        .unwrap();
        let summary = Summary {
            y: "y".into(),
            x: Some("n".into()),
            ..Summary::default()
        };
        let series = aggregate(&records, &summary).unwrap();
        assert_eq!(
            series.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let at8 = &series[0].points[0];
        assert_eq!(
            (at8.x.clone(), at8.mean, at8.values.clone()),
            (json!(8), 0.75, vec![1.0, 0.5])
        );
        assert!(
            (at8.sd - 0.125f64.sqrt()).abs() < 1e-12,
            "the sample deviation"
        );
        assert_eq!(
            series[1].points[0].mean, 1.0,
            "a boolean averages as 0 or 1"
        );
        let bad = Summary {
            y: "label".into(),
            ..Summary::default()
        };
        assert!(aggregate(&records, &bad)
            .unwrap_err()
            .to_string()
            .contains("not a column of numbers"));
    }
}
