//! Labelled encodings: what an experiment compares. Two configurations of one kind are two
//! entries with two labels, each training into its own directory.
//!
//! On the command line an entry is a kind, a kind with settings, or a JSON object:
//!
//! ```text
//! rope                                       label "rope"
//! rope:base=500000                           label "rope:base=500000"
//! alibi:randomized=256                       ALiBi, trained at randomized positions below 256
//! rope:base=500000:label=rope-500k           label "rope-500k"
//! {"kind": "rope", "base": 500000, "label": "rope-500k", "randomized_positions": 256}
//! ```
//!
//! Setting values are read as JSON where they parse (`500000`, `true`, `{"rope_type": …}`)
//! and as strings otherwise (`layout=interleaved`). An entry without a label is named by
//! its kind and the settings it changes from the kind's defaults, in the first form.

use posenc::EncodingConfig;
use posenc_error::{bail, ensure, Context};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;

/// One encoding of an experiment, with its label. It also reads from a bare encoding
/// config (labelled by [`Labelled::default_label`]), as results written before labels
/// hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "LabelledFile")]
pub struct Labelled {
    /// What the results call it, and the name of its run directory.
    pub label: String,
    /// The encoding.
    pub encoding: EncodingConfig,
    /// Train at randomized positions below this (Ruoss et al. 2023); `None`: the
    /// experiment's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub randomized_positions: Option<usize>,
}

/// What a file may hold for a [`Labelled`].
#[derive(Deserialize)]
#[serde(untagged)]
enum LabelledFile {
    Full {
        label: String,
        encoding: EncodingConfig,
        #[serde(default)]
        randomized_positions: Option<usize>,
    },
    Bare(EncodingConfig),
}

impl From<LabelledFile> for Labelled {
    fn from(f: LabelledFile) -> Self {
        match f {
            LabelledFile::Full {
                label,
                encoding,
                randomized_positions,
            } => Self {
                label,
                encoding,
                randomized_positions,
            },
            LabelledFile::Bare(encoding) => Self {
                label: encoding.kind().to_string(),
                encoding,
                randomized_positions: None,
            },
        }
    }
}

/// The keys an entry takes beside the encoding's own settings.
const LABEL: &str = "label";
const RANDOMIZED: [&str; 2] = ["randomized_positions", "randomized"];

impl Labelled {
    /// `encoding` under the label its settings give ([`Self::default_label`]).
    pub fn new(encoding: EncodingConfig) -> Self {
        Self {
            label: Self::default_label(&encoding),
            encoding,
            randomized_positions: None,
        }
    }

    /// The kind, then `:key=value` for each setting that differs from the kind's default.
    pub fn default_label(encoding: &EncodingConfig) -> String {
        let defaults = EncodingConfig::from_kind(encoding.kind())
            .map(|d| d.to_json())
            .unwrap_or(Value::Null);
        let mut label = encoding.kind().to_string();
        if let Value::Object(fields) = encoding.to_json() {
            for (k, v) in fields.iter().filter(|(k, _)| k.as_str() != "kind") {
                if defaults.get(k) != Some(v) {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        // 500000, not the 500000.0 a float setting serialises as.
                        Value::Number(n) => match n.as_f64() {
                            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => {
                                format!("{}", f as i64)
                            }
                            _ => n.to_string(),
                        },
                        other => other.to_string(),
                    };
                    label += &format!(":{k}={v}");
                }
            }
        }
        label
    }

    /// The name of the entry's run directory: its label with every character but letters,
    /// digits and `.-_=+` made `_`; a label longer than [`Self::DIR_NAME`] characters (a
    /// composite's settings written out) is cut there and ends in a hash of the whole, so
    /// that distinct labels keep distinct directories that a file system takes.
    pub fn dir_name(&self) -> String {
        let name: String = (self.label.chars())
            .map(|c| match c.is_ascii_alphanumeric() || ".-_=+".contains(c) {
                true => c,
                false => '_',
            })
            .collect();
        if name.len() <= Self::DIR_NAME {
            return name;
        }
        // FNV-1a over the label: the same on every machine and run.
        let hash = (self.label.bytes()).fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{}-{hash:016x}", &name[..Self::DIR_NAME - 17])
    }

    /// The longest run directory name [`Self::dir_name`] gives.
    pub const DIR_NAME: usize = 120;

    /// Reads one JSON object: an encoding config, plus optionally `label` and
    /// `randomized_positions`.
    fn from_object(mut fields: Map<String, Value>) -> Result<Self> {
        let label = match fields.remove(LABEL) {
            Some(Value::String(s)) => Some(s),
            Some(other) => bail!("a label must be a string, got {other}"),
            None => None,
        };
        let mut randomized = None;
        for key in RANDOMIZED {
            if let Some(v) = fields.remove(key) {
                let range = v.as_u64().and_then(|r| usize::try_from(r).ok());
                ensure!(
                    range.is_some(),
                    "{key} must be a whole number of positions, got {v}"
                );
                randomized = range;
            }
        }
        // A preset is named by its name, not by the layers it expands to.
        let preset = (fields.get("kind").and_then(Value::as_str))
            .filter(|kind| EncodingConfig::presets().contains(kind))
            .map(str::to_string);
        let encoding: EncodingConfig = serde_json::from_value(Value::Object(fields))?;
        let mut entry = Self::new(encoding);
        if let Some(name) = preset {
            entry.label = name;
        }
        if let Some(label) = label {
            ensure!(!label.trim().is_empty(), "a label must not be empty");
            entry.label = label;
        } else if let Some(r) = randomized {
            entry.label += &format!(":randomized={r}");
        }
        entry.randomized_positions = randomized;
        Ok(entry)
    }
}

impl std::str::FromStr for Labelled {
    type Err = crate::Error;

    /// Reads `kind`, `kind:key=value:…` or a JSON object (see the module docs).
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.starts_with('{') {
            return match serde_json::from_str(s)? {
                Value::Object(fields) => Self::from_object(fields),
                other => bail!("expected a JSON object, got {other}"),
            };
        }
        ensure!(
            split_list(s).len() == 1,
            "`{s}` is a list: give one encoding here (`,` separates the encodings of an \
             experiment's --encodings)"
        );
        let mut parts = s.split(':');
        let kind = parts.next().unwrap_or_default();
        ensure!(
            !kind.is_empty(),
            "an empty encoding (a kind such as `rope`)"
        );
        let mut fields = Map::new();
        fields.insert("kind".into(), Value::String(kind.into()));
        for part in parts {
            let Some((key, value)) = part.split_once('=') else {
                bail!("`{part}` in `{s}` is not a setting: write key=value, e.g. rope:base=500000");
            };
            let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
            fields.insert(key.trim().into(), value);
        }
        Self::from_object(fields)
    }
}

/// What names one run in an experiment's tidy records: flattened into each record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunKey {
    /// The entry's label.
    pub label: String,
    /// The encoding's kind.
    pub encoding: String,
    /// The run's seed.
    pub seed: u64,
    /// Randomized positions' range, if the run trained with them.
    pub randomized_positions: Option<usize>,
}

impl RunKey {
    /// The key of the run of `encoding` labelled `label` with `seed`.
    pub fn new(
        label: &str,
        encoding: &EncodingConfig,
        seed: u64,
        randomized: Option<usize>,
    ) -> Self {
        Self {
            label: label.to_string(),
            encoding: encoding.kind().to_string(),
            seed,
            randomized_positions: randomized,
        }
    }
}

/// The distinct labels of `labels`, in the order they first come.
pub fn distinct<'a>(labels: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in labels {
        if !out.iter().any(|o| o == l) {
            out.push(l.to_string());
        }
    }
    out
}

/// Checks an experiment's seeds: `count` of them, from 1 to 100, run from `first` up to
/// `first + count − 1`, which must not pass `u64::MAX`.
///
/// # Errors
/// `count` out of range, or seeds past the largest.
pub fn check_seeds(first: u64, count: usize) -> Result<()> {
    ensure!(
        (1..=100).contains(&count),
        "seeds must be between 1 and 100, got {count}"
    );
    ensure!(
        first.checked_add(count as u64 - 1).is_some(),
        "{count} seeds from seed {first} would pass the largest seed, {}",
        u64::MAX
    );
    Ok(())
}

/// Checks that `entries` is not empty and that no two share a label or a run directory.
///
/// # Errors
/// The repeated label, named.
pub fn check_unique(entries: &[Labelled]) -> Result<()> {
    ensure!(!entries.is_empty(), "no encodings to compare");
    let mut seen = std::collections::BTreeMap::new();
    for e in entries {
        if let Some(other) = seen.insert(e.dir_name(), &e.label) {
            ensure!(
                *other != e.label,
                "the encoding `{other}` is listed twice: each entry trains into its own \
                 directory; give one a label of its own (e.g. {}:label=…)",
                e.encoding.kind()
            );
            bail!(
                "the encodings `{other}` and `{}` would share one run directory ({}): give one \
                 a label of its own (e.g. {}:label=…)",
                e.label,
                e.dir_name(),
                e.encoding.kind()
            );
        }
    }
    Ok(())
}

/// Joins the entries of the `part`-th experiment (from 1) pooled into the first: that
/// experiment must not differ from the first in its setting (`differ`, the fields in which
/// it does); a label not in `into` yet is appended, and a label already there must name
/// the same encoding.
///
/// # Errors
/// A setting that differs (its fields named), or a label that names two encodings.
pub fn join_entries(
    part: usize,
    differ: &[String],
    into: &mut Vec<Labelled>,
    more: Vec<Labelled>,
) -> Result<()> {
    ensure!(
        differ.is_empty(),
        "experiment {part} differs from the first in {}: only runs of one setting can be \
         pooled",
        differ.join(", ")
    );
    for entry in more {
        match into.iter().find(|e| e.label == entry.label) {
            Some(e) => ensure!(
                *e == entry,
                "the label `{}` names two different encodings",
                entry.label
            ),
            None => into.push(entry),
        }
    }
    Ok(())
}

/// The items of a comma-separated list, commas inside `{…}` or `[…]` not splitting it.
fn split_list(s: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
}

/// Reads a comma-separated list of entries; commas inside a JSON object or list do not
/// split it.
///
/// # Errors
/// An entry that does not parse, named.
pub fn parse_list(s: &str) -> Result<Vec<Labelled>> {
    split_list(s)
        .iter()
        .map(|item| {
            Ok(item
                .parse::<Labelled>()
                .with_context(|| format!("in the encoding {:?}", item.trim()))?)
        })
        .collect()
}
