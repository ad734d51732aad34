//! What every experiment shares: its results files, the runs it finds in its output
//! directory, and how a row sums up its seeds.

use std::path::Path;

use posenc_error::{bail, ensure};
use posenc_io::write_atomic;
use serde::Serialize;

use crate::error::Result;
use crate::fit::{RunState, Settings, Validation};
use crate::rundir::{self, Contents};

/// `results.json`.
pub const RESULTS_JSON: &str = "results.json";
/// `results.md`.
pub const RESULTS_MD: &str = "results.md";

/// What an experiment finds where one of its runs goes.
pub enum Found<S> {
    /// The run, finished: reuse it.
    Finished(S),
    /// The run, short of its steps: resume it.
    Unfinished,
    /// No run: start it.
    Nothing,
}

/// Looks in `dir` for the run of `wanted` an experiment trains there. `differences(run)`
/// names the settings in which a run found there differs from `wanted` (none: it is this
/// run, perhaps short of its steps).
///
/// # Errors
/// A run with other settings or more steps, or files that are not a run.
pub fn find_run<C: Settings, R: Validation>(
    dir: &Path,
    wanted: &C,
    differences: impl FnOnce(&RunState<C, R>) -> Vec<String>,
) -> Result<Found<RunState<C, R>>> {
    match rundir::inspect(dir)? {
        Contents::Run => {
            let manifest = rundir::verify(dir)?;
            let previous: RunState<C, R> = rundir::last_state(dir, &manifest)?;
            let diff = differences(&previous);
            ensure!(
                diff.is_empty(),
                "{} holds a run with a different config (it differs in {}); choose another --out or remove it",
                dir.display(),
                diff.join(", ")
            );
            check_budget(dir, previous.step, wanted.steps())?;
            Ok(match previous.step == wanted.steps() {
                true => Found::Finished(previous),
                false => Found::Unfinished,
            })
        }
        Contents::Empty | Contents::Unfinished { weights: false } => Ok(Found::Nothing),
        Contents::Unfinished { weights: true } | Contents::Foreign(_) => bail!(
            "{} holds files that are not a run of this experiment; remove it or choose another --out",
            dir.display()
        ),
    }
}

/// The top-level fields (and one level below: `model.…`) in which two configs differ, with
/// the step budget ignored.
pub fn differences<C: Settings>(a: &C, b: &C) -> Vec<String> {
    let comparable = |c: &C| {
        let mut c = c.clone();
        c.set_steps(0);
        serde_json::to_value(c).unwrap_or_default()
    };
    value_differences(&comparable(a), &comparable(b))
}

/// The top-level fields (and one level below) in which two JSON objects differ, as
/// `field` or `field.inner`.
pub fn value_differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(a), Some(b)) = (a.as_object(), b.as_object()) {
        for (k, va) in a {
            let vb = &b[k];
            match (va.as_object(), vb.as_object()) {
                (Some(ia), Some(ib)) => out.extend(
                    ia.iter()
                        .filter(|(kk, v)| ib.get(*kk) != Some(*v))
                        .map(|(kk, _)| format!("{k}.{kk}")),
                ),
                _ if va != vb => out.push(k.clone()),
                _ => {}
            }
        }
        out.extend(b.keys().filter(|k| !a.contains_key(*k)).cloned());
    } else if a != b {
        out.push("the whole".to_string());
    }
    out
}

/// Checks that the run in `dir`, at step `done`, has not gone past the `steps` asked for.
pub fn check_budget(dir: &Path, done: usize, steps: usize) -> Result<()> {
    ensure!(
        done <= steps,
        "{} holds a run of {done} steps, more than the {steps} asked for; choose another --out",
        dir.display()
    );
    Ok(())
}

/// Reads an experiment's `results.json`.
pub fn load_results<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    rundir::read_json(path)
}

/// Checks, before anything is written, that `out` can hold an experiment of `kind` (its
/// task's) whose results are `T` (`what` names it): not a training run, and no
/// `results.json` of another kind of experiment (by the kind it names, or, written before
/// results carried one, by whether it reads as `T`).
pub fn check_out_dir<T: serde::de::DeserializeOwned>(
    out: &Path,
    kind: &str,
    what: &str,
) -> Result<()> {
    use crate::rundir::Contents;
    // A run's manifest makes it a run whatever lies beside it (the shipped models keep a
    // README with theirs).
    let manifest = out.join(crate::rundir::MANIFEST).is_file();
    let run = match crate::rundir::inspect(out)? {
        Contents::Run | Contents::Unfinished { .. } => true,
        Contents::Foreign(_) => manifest,
        Contents::Empty => false,
    };
    if run {
        bail!(
            "{} holds a training run, not an experiment: an experiment writes its runs into a \
             directory of its own; choose another --out",
            out.display()
        );
    }
    let results = out.join(RESULTS_JSON);
    let named = results
        .exists()
        .then(|| load_results::<serde_json::Value>(&results).ok())
        .flatten()
        .and_then(|raw| raw.get("kind").and_then(|k| k.as_str()).map(String::from));
    if let Some(other) = named.filter(|other| other != kind) {
        bail!(
            "{} holds the results of a `{other}` experiment, not of a `{kind}` one; choose \
             another --out",
            results.display()
        );
    }
    if results.exists() && load_results::<T>(&results).is_err() {
        bail!(
            "{} holds results that are not {what}'s (another kind of experiment?); choose \
             another --out",
            results.display()
        );
    }
    Ok(())
}

/// Writes an experiment's `results.json` and `results.md` into `out`, atomically.
pub fn save_results(out: &Path, results: &impl Serialize, markdown: &str) -> Result<()> {
    let json = serde_json::to_string_pretty(results)?;
    write_atomic(&out.join(RESULTS_JSON), json.as_bytes())?;
    write_atomic(&out.join(RESULTS_MD), markdown.as_bytes())?;
    Ok(())
}

/// Mean and sample standard deviation (0 for fewer than two values; NaN mean for none).
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = match xs.len() {
        0 | 1 => 0.0,
        _ => xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0),
    };
    (mean, var.sqrt())
}

/// `mean` with `decimals` decimals, `± sd` after it for several values, `n/a` for none.
pub fn spread(xs: &[f64], decimals: usize) -> String {
    let (mean, sd) = mean_sd(xs);
    match xs.len() {
        0 => "n/a".to_string(),
        1 => format!("{mean:.decimals$}"),
        _ => format!("{mean:.decimals$} ± {sd:.decimals$}"),
    }
}
