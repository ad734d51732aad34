//! The figures of `posenc lm experiment` (test perplexity against evaluation length, the
//! ALiBi paper's Figure 1, and the loss at each position of the longest window) and of
//! `posenc lm passkey`, drawn by `posenc-plot` from this task's records.

use std::path::{Path, PathBuf};

use posenc_plot::chart::SeedPoint;
use posenc_plot::extrapolation::{loss_by_position, perplexity_by_length};
use posenc_train::Result;

use crate::experiment::LmExperiment;
use crate::passkey::PasskeyConfig;

/// `extrapolation.png`.
pub const EXTRAPOLATION: &str = "extrapolation.png";
/// `by_position.png`.
pub const BY_POSITION: &str = "by_position.png";
/// `streaming.png`: perplexity by window length through a rolling cache, for an
/// experiment that reads its windows through one.
pub const STREAMING: &str = "streaming.png";
/// Positions averaged into one point of `by_position.png`, so the curve shows the trend
/// rather than each character's noise.
const BUCKET: usize = 8;

/// Writes `extrapolation.png`, `streaming.png` (if the windows were also read through a
/// rolling cache) and `by_position.png` into `out`; returns their paths.
///
/// # Errors
/// Results without a record (nothing to draw); `out` or a file in it that cannot be
/// written.
pub fn lm_experiment(exp: &LmExperiment, out: &Path) -> Result<Vec<PathBuf>> {
    drawn(posenc_plot::chart::begin_figures(
        out,
        exp.records.len(),
        "evaluation records",
    ))?;
    let context = exp.config.base.model.context;
    let steps = exp.config.base.run.steps;
    let trained = match exp.config.base.randomized_positions {
        Some(range) => {
            format!("trained on L = {context} at random positions below {range}, {steps} steps")
        }
        None => format!("trained on L = {context}, {steps} steps"),
    };
    let seeds = exp.config.seeds;
    // Each label's seeds' perplexities at each length, read whole or with `sinks`.
    let by_length = |sinks: Option<usize>| -> Vec<(String, Vec<SeedPoint>)> {
        exp.labels()
            .into_iter()
            .map(|label| {
                let points = exp
                    .config
                    .factors
                    .iter()
                    .map(|f| {
                        let len = f * context;
                        let ppl: Vec<f64> = exp
                            .records
                            .iter()
                            .filter(|r| r.run.label == label && r.length == len)
                            .filter(|r| r.sinks == sinks)
                            .filter_map(|r| r.perplexity)
                            .collect();
                        (len as f64, ppl)
                    })
                    .collect();
                (label, points)
            })
            .collect()
    };
    let note = match seeds > 1 {
        true => format!("; {}", posenc_plot::chart::seeds_note(&seeds.to_string())),
        false => String::new(),
    };
    let extrapolation = out.join(EXTRAPOLATION);
    let title = format!("test perplexity by window length ({trained}{note})");
    drawn(perplexity_by_length(
        &extrapolation,
        &title,
        &by_length(None),
    ))?;
    let mut drawn_paths = vec![extrapolation];
    // Read through the rolling cache that keeps the most sinks.
    if let Some(streaming) = &exp.config.streaming {
        let most = streaming.sinks.iter().copied().max();
        let path = out.join(STREAMING);
        let title = format!(
            "test perplexity by window length, read through a rolling cache of {} positions with {} sinks ({trained}{note})",
            streaming.window,
            most.unwrap_or(0)
        );
        drawn(perplexity_by_length(&path, &title, &by_length(most)))?;
        drawn_paths.push(path);
    }
    // The first seed of each label.
    let by_position: Vec<(String, &[f64])> = exp
        .labels()
        .into_iter()
        .filter_map(|label| {
            let run = exp.results.iter().find(|r| r.label == label)?;
            Some((label, run.longest()?.by_position.as_slice()))
        })
        .collect();
    let positions = out.join(BY_POSITION);
    let title = if seeds > 1 {
        let seed = exp.config.base.run.seed;
        format!("test loss by position in the longest window ({trained}; seed {seed})")
    } else {
        format!("test loss by position in the longest window ({trained})")
    };
    drawn(loss_by_position(&positions, &title, &by_position, BUCKET))?;
    drawn_paths.push(positions);
    Ok(drawn_paths)
}

/// Draws `found[length][depth]` (keys found, trials) of the passkey sweep `cfg` into the
/// PNG `path`.
///
/// # Errors
/// A table whose shape is not `cfg`'s; a figure that cannot be written.
pub fn passkey(
    cfg: &PasskeyConfig,
    found: &[Vec<(usize, usize)>],
    title: &str,
    path: &Path,
) -> Result<()> {
    drawn(posenc_plot::passkey(
        &cfg.lengths,
        &cfg.depths,
        found,
        title,
        path,
    ))
}

/// A figure's error as this task's ([`posenc_train::Error::task`]).
fn drawn<T>(r: posenc_plot::Result<T>) -> Result<T> {
    r.map_err(posenc_train::Error::task)
}
