//! Claims about an experiment, checked against its tidy records by one rule: a difference
//! between two entries is a finding only when it exceeds both spreads added (the standard
//! deviations over seeds), with the same sign in every seed, over at least three seeds.
//! Anything less is printed "not held", with the numbers that decided it.
//!
//! A study keeps its claims in `claims.json` beside its `results.json`:
//!
//! ```json
//! {"claims": [
//!   {"claim": "FIRE answers more sums past the trained lengths than RoPE",
//!    "metric": "accuracy", "better": "fire", "than": "rope",
//!    "where": {"trained": false}, "scale": 100}
//! ]}
//! ```
//!
//! ```
//! use posenc_train::claims::{check, Claim};
//! use serde_json::json;
//!
//! // Three seeds each; `a` is ahead in every seed, by far more than the spreads.
//! let records: Vec<_> = [(1, 0.9, 0.1), (2, 0.8, 0.2), (3, 0.85, 0.15)]
//!     .iter()
//!     .flat_map(|&(seed, a, b)| {
//!         [json!({"label": "a", "seed": seed, "accuracy": a}),
//!          json!({"label": "b", "seed": seed, "accuracy": b})]
//!     })
//!     .collect();
//! let claim: Claim = serde_json::from_value(json!(
//!     {"claim": "a beats b", "metric": "accuracy", "better": "a", "than": "b"}
//! )).unwrap();
//! assert!(check(&records, &claim).unwrap().held);
//! ```

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;
use crate::results::mean_sd;
use Missing::{Bad, NoRecord};

/// The fewest seeds a claim can hold over: one seed is an anecdote, two a coincidence.
pub const MIN_SEEDS: usize = 3;

/// One claim: entry `better` is ahead of entry `than` on `metric`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// What is claimed, in words.
    pub claim: String,
    /// The record field compared (`accuracy`, `loss`, `test_exact`, …).
    pub metric: String,
    /// The label claimed ahead.
    pub better: String,
    /// The label it is claimed ahead of.
    pub than: String,
    /// The record field whose values `better` and `than` are (default `label`: the
    /// encoding; `task` or `scaling` in records that compare those; a number or null
    /// written as JSON writes it, `"4"` or `"null"`).
    #[serde(default = "label_field")]
    pub by: String,
    /// Whether a lower value is better (a loss) rather than a higher one (an accuracy).
    #[serde(default)]
    pub lower_is_better: bool,
    /// Only the records whose fields match these ([`matches()`]: `{"length": 512}`,
    /// `{"trained": false}`, `{"length": [20, 30, 40]}`, `{"position": {"from": 0, "to":
    /// 31}}`); each seed's value is the mean over its records that match.
    #[serde(default, rename = "where")]
    pub filter: Map<String, Value>,
    /// What the values are multiplied by when printed (100 for percent).
    #[serde(default = "one")]
    pub scale: f64,
    /// Compare each side over every seed it has, paired or not. By default both sides are
    /// taken over the seeds they share, so that a side pooled from more runs than the other
    /// is not compared over seeds the other never ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpaired: bool,
}

impl Claim {
    /// A side's label as a page writes it: a number or null with its field (`sinks = 4`),
    /// a string as it is.
    pub fn name(&self, label: &str) -> String {
        match serde_json::from_str::<Value>(label) {
            Ok(Value::String(_)) | Err(_) => label.to_string(),
            Ok(_) => format!("{} = {label}", self.by),
        }
    }
}

fn one() -> f64 {
    1.0
}

fn label_field() -> String {
    "label".into()
}

/// `claims.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// Other studies of the same setting (other encodings, or more seeds), as directories
    /// relative to this one, whose records join this study's for the claims.
    #[serde(default)]
    pub with: Vec<String>,
    /// The claims, in the order a page lists them.
    pub claims: Vec<Claim>,
    /// The batches this study's own records were run in, where they were more than one
    /// (other machines, other builds): each a name and the records it holds, by a filter
    /// ([`matches()`]); a record none names is of the study's batch. A study `with` others
    /// is a batch of its own for each of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<Batch>,
    /// What the study asks (Markdown), the first part of its page. This and the parts
    /// below are written, not rendered from the records: they say what was asked and how
    /// to read the answer, and every number stays in the records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The shell commands that reproduce it, shown after the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// How the claims stand against the paper's own figures, after the claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper: Option<String>,
    /// What the runs cost (time, memory, machine), and where the records keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// What the study does not show, the page's last part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
}

impl Claims {
    /// Whether any part of the page around the tables and claims is written.
    pub fn has_page_text(&self) -> bool {
        [
            &self.question,
            &self.command,
            &self.paper,
            &self.cost,
            &self.limits,
        ]
        .iter()
        .any(|p| p.is_some())
    }
}

/// A batch of runs: those of one machine, build or invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// What it was, as a row names it (`H200, build 60366d9`).
    pub name: String,
    /// The records it holds.
    #[serde(rename = "where")]
    pub filter: Map<String, Value>,
}

/// The field of a record that names its batch, set by [`in_batches`].
pub const BATCH: &str = "batch";

/// `records` of one study, each given its batch (the [`BATCH`] field): the first of
/// `batches` whose filter it matches, or `study`.
pub fn in_batches(records: Vec<Value>, batches: &[Batch], study: &str) -> Vec<Value> {
    (records.into_iter())
        .map(|mut r| {
            let name = (batches.iter())
                .find(|b| matches(&r, &b.filter))
                .map_or(study, |b| b.name.as_str());
            if let Value::Object(fields) = &mut r {
                fields.insert(BATCH.into(), Value::String(name.into()));
            }
            r
        })
        .collect()
}

/// One entry's values over seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// Each seed's value.
    pub by_seed: BTreeMap<u64, f64>,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation.
    pub sd: f64,
}

impl Side {
    /// This side over `seeds` alone (the seeds both sides of a claim share).
    pub fn on(&self, seeds: &BTreeSet<u64>) -> Self {
        if self.by_seed.keys().all(|s| seeds.contains(s)) {
            return self.clone();
        }
        let by_seed: BTreeMap<u64, f64> = (self.by_seed.iter())
            .filter(|(seed, _)| seeds.contains(seed))
            .map(|(&seed, &x)| (seed, x))
            .collect();
        let values: Vec<f64> = by_seed.values().copied().collect();
        let (mean, sd) = mean_sd(&values);
        Self { by_seed, mean, sd }
    }

    /// Its seeds, written short: runs of consecutive seeds as `1–3`, the rest by commas.
    pub fn seeds(&self) -> String {
        let seeds: Vec<u64> = self.by_seed.keys().copied().collect();
        let mut parts = Vec::new();
        let mut i = 0;
        while i < seeds.len() {
            let mut j = i;
            while j + 1 < seeds.len() && seeds[j + 1] == seeds[j] + 1 {
                j += 1;
            }
            parts.push(match j - i {
                0 => seeds[i].to_string(),
                1 => format!("{}, {}", seeds[i], seeds[j]),
                _ => format!("{}–{}", seeds[i], seeds[j]),
            });
            i = j + 1;
        }
        parts.join(", ")
    }
}

/// A claim checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The claim.
    pub claim: Claim,
    /// The entry claimed ahead.
    pub better: Side,
    /// The other.
    pub than: Side,
    /// How far `better` is ahead, in the claim's direction (negative: behind).
    pub gap: f64,
    /// The two standard deviations added.
    pub spreads: f64,
    /// Seeds both entries ran with.
    pub seeds: usize,
    /// Those of them in which `better` is ahead.
    pub seeds_ahead: usize,
    /// Whether the rule holds: ahead by more than the spreads added, in every one of at
    /// least [`MIN_SEEDS`] seeds.
    pub held: bool,
    /// The batches the compared records were run in ([`BATCH`], set by [`in_batches`]),
    /// in order: more than one, and a batch's effect would look like the claim's.
    pub batches: Vec<String>,
}

impl Verdict {
    /// The verdict as a page's prose cites it: `held` or `not held`, then the gap, the
    /// spreads added and the seeds ahead (`held (+0.21 against spreads 0.10; 3 of 3
    /// seeds)`), in the claim's scale.
    pub fn brief(&self) -> String {
        let scale = self.claim.scale;
        format!(
            "{} ({:+.2} against spreads {:.2}; {} of {} seeds{})",
            if self.held { "held" } else { "not held" },
            scale * self.gap,
            scale * self.spreads,
            self.seeds_ahead,
            self.seeds,
            match self.batches.len() {
                0 | 1 => String::new(),
                n => format!("; from {n} batches"),
            }
        )
    }
}

/// Checks `claim` against `records` (tidy records, each with the claim's `by` field,
/// `seed` and the metric).
///
/// # Errors
/// A label with no record matching the claim's filter, or a metric that is not a number
/// in the records that match.
pub fn check(records: &[Value], claim: &Claim) -> Result<Verdict> {
    let mut better = side(records, claim, &claim.better)?;
    let mut than = side(records, claim, &claim.than)?;
    if !claim.unpaired {
        let shared: BTreeSet<u64> = (better.by_seed.keys())
            .filter(|seed| than.by_seed.contains_key(seed))
            .copied()
            .collect();
        (better, than) = (better.on(&shared), than.on(&shared));
    }
    let sign = if claim.lower_is_better { -1.0 } else { 1.0 };
    let gap = sign * (better.mean - than.mean);
    let spreads = better.sd + than.sd;
    let paired: Vec<f64> = better
        .by_seed
        .iter()
        .filter_map(|(seed, a)| Some(sign * (a - than.by_seed.get(seed)?)))
        .collect();
    let seeds_ahead = paired.iter().filter(|d| **d > 0.0).count();
    let held = paired.len() >= MIN_SEEDS && seeds_ahead == paired.len() && gap > spreads;
    // The batches of the records compared: each side's, over the seeds it was compared on.
    let mut batches: Vec<String> = Vec::new();
    for (label, side) in [(&claim.better, &better), (&claim.than, &than)] {
        for r in records {
            let compared = names(&r[claim.by.as_str()], label)
                && matches(r, &claim.filter)
                && r["seed"]
                    .as_u64()
                    .is_some_and(|s| side.by_seed.contains_key(&s));
            if let (true, Some(batch)) = (compared, r[BATCH].as_str()) {
                if !batches.iter().any(|b| b == batch) {
                    batches.push(batch.to_string());
                }
            }
        }
    }
    Ok(Verdict {
        claim: claim.clone(),
        better,
        than,
        gap,
        spreads,
        seeds: paired.len(),
        seeds_ahead,
        held,
        batches,
    })
}

/// Whether a record's value of the compared field is `label`: a string equal to it, or a
/// number or null written as it (`"by": "sinks"` compares `"4"` with `"null"`).
pub fn names(value: &Value, label: &str) -> bool {
    match value {
        Value::String(s) => s == label,
        Value::Number(_) | Value::Null | Value::Bool(_) => {
            serde_json::from_str::<Value>(label).is_ok_and(|v| v == *value)
        }
        _ => false,
    }
}

/// The values of `label`'s seeds under `claim`'s filter.
fn side(records: &[Value], claim: &Claim, label: &str) -> Result<Side> {
    let entry = Entry {
        by: &claim.by,
        label,
        metric: &claim.metric,
        filter: &claim.filter,
        over: "seed",
    };
    entry.side(records).map_err(|e| match e {
        NoRecord => posenc_error::invalid!(
            "no record of `{label}` has a `{}`{} (claim: {})",
            claim.metric,
            match claim.filter.is_empty() {
                true => String::new(),
                false => format!(" where {}", Value::Object(claim.filter.clone())),
            },
            claim.claim
        )
        .into(),
        Bad(e) => e,
    })
}

/// One entry of a study's records: those whose `by` field names `label` and whose fields
/// match `filter`'s, read at `metric`, one value per replicate (the records' `over` field:
/// `seed` for a claim).
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The field that names entries (`label`, `task`, …).
    pub by: &'a str,
    /// The entry.
    pub label: &'a str,
    /// The field read.
    pub metric: &'a str,
    /// Only the records whose fields match these ([`matches()`]).
    pub filter: &'a Map<String, Value>,
    /// The field whose values are the replicates (`seed`; `window` for the windows of one
    /// model), each a whole number.
    pub over: &'a str,
}

/// Whether `record` matches `filter`: each field equal to the filter's value, or, where
/// that is a list, to any of its values, or, where it is `{"from": A, "to": B}`, a number
/// from A to B inclusive.
///
/// ```
/// use posenc_train::claims::matches;
/// use serde_json::json;
///
/// let r = json!({"length": 13, "position": 64, "trained": false});
/// let filter = |f: serde_json::Value| f.as_object().unwrap().clone();
/// assert!(matches(&r, &filter(json!({"trained": false}))));
/// assert!(matches(&r, &filter(json!({"length": [13, 15], "position": {"from": 64, "to": 127}}))));
/// assert!(!matches(&r, &filter(json!({"position": {"from": 0, "to": 63}}))));
/// assert!(!matches(&r, &filter(json!({"length": 15}))));
/// ```
pub fn matches(record: &Value, filter: &Map<String, Value>) -> bool {
    filter.iter().all(|(k, v)| match v {
        Value::Array(any) => record.get(k).is_some_and(|x| any.contains(x)),
        Value::Object(range) => record.get(k).and_then(Value::as_f64).is_some_and(|x| {
            range
                .get("from")
                .and_then(Value::as_f64)
                .is_none_or(|a| x >= a)
                && range
                    .get("to")
                    .and_then(Value::as_f64)
                    .is_none_or(|b| x <= b)
        }),
        v => record.get(k) == Some(v),
    })
}

/// Why an [`Entry`] has no [`Side`].
#[derive(Debug)]
pub enum Missing {
    /// No record matches it.
    NoRecord,
    /// A record that matches is bad (no seed, a metric that is not a number).
    Bad(crate::Error),
}

impl Entry<'_> {
    /// Its values over seeds: each seed's the mean over its matching records (a metric of
    /// null is left out), then their mean and sample standard deviation.
    ///
    /// # Errors
    /// [`Missing::NoRecord`] where nothing matches; [`Missing::Bad`] for a record without a
    /// replicate or with a metric that is not a number, or a range in the filter that is not
    /// one.
    pub fn side(&self, records: &[Value]) -> std::result::Result<Side, Missing> {
        let bad = |msg: String| Bad(posenc_error::invalid!("{msg}").into());
        for (k, v) in self.filter {
            if let Value::Object(range) = v {
                let numbers = range.values().all(Value::is_number);
                let known = range.keys().all(|k| k == "from" || k == "to");
                if range.is_empty() || !numbers || !known {
                    return Err(bad(format!(
                        "the filter of `{k}` is {v}: an object must be a range, \
                         {{\"from\": A, \"to\": B}} (numbers, either may be left out)"
                    )));
                }
            }
        }
        let (label, metric) = (self.label, self.metric);
        let mut by_seed: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in records {
            if !(names(&r[self.by], label) && matches(r, self.filter)) {
                continue;
            }
            let Some(seed) = r[self.over].as_u64() else {
                return Err(bad(format!(
                    "a record of `{label}` has no `{}` (a whole number): {r}",
                    self.over
                )));
            };
            match &r[metric] {
                Value::Null => {}
                v => match v.as_f64() {
                    Some(x) => by_seed.entry(seed).or_default().push(x),
                    None => {
                        return Err(bad(format!(
                            "`{metric}` is not a number in a record of `{label}`: {v}"
                        )))
                    }
                },
            }
        }
        if by_seed.is_empty() {
            return Err(NoRecord);
        }
        let by_seed: BTreeMap<u64, f64> = by_seed
            .into_iter()
            .map(|(seed, xs)| (seed, xs.iter().sum::<f64>() / xs.len() as f64))
            .collect();
        let values: Vec<f64> = by_seed.values().copied().collect();
        let (mean, sd) = mean_sd(&values);
        Ok(Side { by_seed, mean, sd })
    }
}

/// The claims as a Markdown section (their records pooled `with` other studies'): a row
/// each, numbered from 1 as a page cites it (`<!-- claim: STUDY#N -->`), with both sides'
/// mean ± sd over their seeds, the seeds compared, the gap, the spreads added, the seeds in
/// which the claimed order holds, and the verdict.
pub fn markdown(verdicts: &[Verdict], with: &[String]) -> String {
    let pooled = match with.is_empty() {
        true => String::new(),
        false => format!(
            ", pooled with those of {} (the same setting)",
            with.iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    };
    let mut s = format!(
        "## Claims\n\n\
         Each claim is checked against the records above{pooled}: it holds when the gap \
         exceeds both standard deviations added, with the same sign in every seed, over at \
         least {MIN_SEEDS} seeds, both sides over the seeds they share unless a claim says \
         otherwise (`posenc report`). A claim whose records were run in more than one batch \
         (another study, machine or build) names them: a batch's effect would look like \
         the claim's.\n\n\
         | # | claim | metric | ahead | behind | seeds | batches | gap | spreads added | seeds ahead | verdict |\n\
         |---:|---|---|---|---|---|---|---:|---:|---:|---|\n"
    );
    for (number, v) in (1..).zip(verdicts) {
        let c = &v.claim;
        let side = |label: &str, x: &Side| {
            format!(
                "{} {:.2} ± {:.2}",
                c.name(label),
                c.scale * x.mean,
                c.scale * x.sd
            )
        };
        let filter = match c.filter.is_empty() {
            true => String::new(),
            false => {
                let parts: Vec<String> =
                    c.filter.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!(" ({})", parts.join(", "))
            }
        };
        // The seeds compared: those both sides share, or (a claim of unpaired seeds) each
        // side's own.
        let seeds = match v.better.by_seed.keys().eq(v.than.by_seed.keys()) {
            true => v.better.seeds(),
            false => format!("{}; {}", v.better.seeds(), v.than.seeds()),
        };
        s += &format!(
            "| {number} | {} | {}{}{filter} | {} | {} | {seeds} | {} | {:+.2} | {:.2} | {} of {} | {} |\n",
            c.claim,
            c.metric,
            if c.lower_is_better {
                ", lower better"
            } else {
                ""
            },
            side(&c.better, &v.better),
            side(&c.than, &v.than),
            match v.batches.len() {
                0 | 1 => "one".to_string(),
                _ => v.batches.join("; "),
            },
            c.scale * v.gap,
            c.scale * v.spreads,
            v.seeds_ahead,
            v.seeds,
            if v.held { "held" } else { "**not held**" }
        );
    }
    s
}
