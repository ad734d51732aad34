//! The figure of `posenc lengthgen experiment`, drawn by `posenc-plot` from this task's
//! records: exact-match accuracy against instance length, one line
//! per encoding (the mean over seeds) in a band from the lowest seed to the highest, or
//! with each seed's point where they lie more than half the axis apart.

use std::path::{Path, PathBuf};

use posenc_plot::chart::{label_styles, save_curves, with_seeds, Axes, Series};
use posenc_train::Result;

use crate::experiment::LengthgenExperiment;

/// `accuracy_by_length.png`.
pub const ACCURACY_BY_LENGTH: &str = "accuracy_by_length.png";

/// Writes `accuracy_by_length.png` into `out`; returns its path.
///
/// # Errors
/// Results without a record (nothing to draw); `out` or a file in it that cannot be
/// written.
pub fn lengthgen(exp: &LengthgenExperiment, out: &Path) -> Result<Vec<PathBuf>> {
    drawn(posenc_plot::chart::begin_figures(
        out,
        exp.records.len(),
        "test records",
    ))?;
    let summaries = exp.summaries();
    let mut series = Vec::new();
    let labels: Vec<&str> = summaries.iter().map(|(l, _)| l.as_str()).collect();
    for ((label, rows), style) in summaries.iter().zip(label_styles(&labels)) {
        let points: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.length as f64,
                    r.values.iter().map(|v| 100.0 * v).collect(),
                )
            })
            .collect();
        let seeds = rows.iter().map(|r| r.values.len()).max().unwrap_or(0);
        let name = with_seeds(label, seeds);
        series.extend(Series::spread(name, style, &points, 100.0));
    }
    let [lo, hi] = exp.train_lengths;
    // Pooled experiments may hold more seeds of some entries than of others.
    let counts = summaries
        .iter()
        .flat_map(|(_, rows)| rows)
        .map(|r| r.values.len());
    let seeds = match (counts.clone().min(), counts.max()) {
        (Some(lo), Some(hi)) if lo < hi => format!("{lo}–{hi}"),
        _ => exp.config.seeds.to_string(),
    };
    let path = out.join(ACCURACY_BY_LENGTH);
    drawn(save_curves(
        &path,
        (900, 560),
        &Axes {
            title: format!(
                "{}: exact match by length (trained on {lo}–{hi}; {})",
                exp.task,
                posenc_plot::chart::seeds_note(&seeds)
            ),
            x_desc: "instance length",
            y_desc: "exact-match accuracy (%)",
            square: false,
            y_range: Some((0.0, 100.0)),
        },
        &series,
    ))?;
    Ok(vec![path])
}

/// A figure's error as this task's ([`posenc_train::Error::task`]).
fn drawn<T>(r: posenc_plot::Result<T>) -> Result<T> {
    r.map_err(posenc_train::Error::task)
}
