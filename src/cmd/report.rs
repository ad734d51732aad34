//! `posenc report DIR…`: a study's `results.md` rendered from its records alone: the
//! experiment's tables from `results.json`, then its claims (`claims.json`) checked by one
//! rule ([`posenc_train::claims`]). `--check` writes nothing and fails where a committed
//! page has drifted from its records.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use posenc_lengthgen::experiment::LengthgenExperiment;
use posenc_train::claims::{self, Claims};
use posenc_train::results::{load_results, RESULTS_JSON, RESULTS_MD};

/// The file of a study's claims, beside its `results.json`.
pub const CLAIMS_JSON: &str = "claims.json";

/// `posenc report`
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Study directories, each holding an experiment's results.json (and, if it makes
    /// claims, claims.json).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Write nothing; fail, naming each results.md that is not what its records give.
    #[arg(long)]
    check: bool,
}

impl ReportArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        // Every page is rendered before any is written: a bad record writes nothing.
        let pages: Vec<(PathBuf, String)> = self
            .dirs
            .iter()
            .map(|dir| Ok((dir.join(RESULTS_MD), render(dir)?)))
            .collect::<Result<_>>()?;
        let mut stale = Vec::new();
        for (path, page) in pages {
            if self.check {
                if std::fs::read_to_string(&path).ok().as_deref() != Some(page.as_str()) {
                    stale.push(path.display().to_string());
                }
            } else {
                posenc_io::write_atomic(&path, page.as_bytes())?;
                writeln!(out, "{}", path.display())?;
            }
        }
        ensure!(
            stale.is_empty(),
            "not what their records give (run `posenc report` on their directories): {}",
            stale.join(", ")
        );
        Ok(())
    }
}

/// The `results.md` of the experiment in `dir`: its tables, then its claims checked.
///
/// # Errors
/// A `results.json` that is no experiment's; a `claims.json` that does not parse or names
/// a label or metric the records lack.
pub fn render(dir: &Path) -> Result<String> {
    let path = dir.join(RESULTS_JSON);
    ensure!(path.is_file(), "{} holds no {RESULTS_JSON}", dir.display());
    let (mut page, records) = if let Ok(e) = LengthgenExperiment::load(&path) {
        (e.markdown(), serde_json::to_value(&e.records)?)
    } else if let Ok(e) = posenc_lm::lm_experiment::LmExperiment::load(&path) {
        (e.markdown(), serde_json::to_value(&e.records)?)
    } else if let Ok(e) = posenc_kotoba::experiment::Experiment::load(&path) {
        (e.markdown(), serde_json::to_value(&e.records)?)
    } else {
        bail!(
            "{} is not the results of an experiment (posenc kotoba, lm or lengthgen experiment)",
            path.display()
        );
    };
    let claims_path = dir.join(CLAIMS_JSON);
    if claims_path.exists() {
        let claims: Claims = load_results(&claims_path)?;
        let records = match claims.with.is_empty() {
            true => records.as_array().cloned().unwrap_or_default(),
            false => pooled(dir, &claims.with)
                .with_context(|| format!("pooling the records of {}", claims_path.display()))?,
        };
        let verdicts = claims
            .claims
            .iter()
            .map(|c| claims::check(&records, c))
            .collect::<posenc_train::Result<Vec<_>>>()
            .with_context(|| format!("checking {}", claims_path.display()))?;
        let section = claims::markdown(&verdicts, &claims.with);
        page = format!("{}\n\n{section}", page.trim_end());
    }
    Ok(page)
}

/// The records of the lengthgen study in `dir` pooled with those of the studies `with`
/// (directories relative to it), which must be of the same setting
/// ([`LengthgenExperiment::merge`]).
fn pooled(dir: &Path, with: &[String]) -> Result<Vec<serde_json::Value>> {
    let load = |d: &Path| {
        LengthgenExperiment::load(&d.join(RESULTS_JSON))
            .with_context(|| format!("only lengthgen studies pool their records: {}", d.display()))
    };
    let mut parts = vec![load(dir)?];
    for w in with {
        parts.push(load(&dir.join(w))?);
    }
    let merged = LengthgenExperiment::merge(parts)?;
    Ok(serde_json::to_value(&merged.records)?
        .as_array()
        .cloned()
        .unwrap_or_default())
}
