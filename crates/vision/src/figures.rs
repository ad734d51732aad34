//! The figure of `posenc vision experiment`, drawn by `posenc-plot` from this task's
//! records: accuracy on every question against the test grid's side, one line per encoding
//! (the mean over seeds) in a band from the lowest seed to the highest.

use std::path::{Path, PathBuf};

use posenc_plot::chart::{label_styles, save_curves, with_seeds, Axes, Series};
use posenc_train::Result;

use crate::experiment::{grid_name, VisionExperiment};

/// `accuracy_by_grid.png`.
pub const ACCURACY_BY_GRID: &str = "accuracy_by_grid.png";

/// Writes `accuracy_by_grid.png` into `out`; returns its path.
///
/// # Errors
/// Results without a record (nothing to draw); `out` or a file in it that cannot be
/// written.
pub fn vision(exp: &VisionExperiment, out: &Path) -> Result<Vec<PathBuf>> {
    drawn(posenc_plot::chart::begin_figures(
        out,
        exp.records.len(),
        "test records",
    ))?;
    let labels: Vec<&str> = exp
        .config
        .encodings
        .iter()
        .map(|e| e.label.as_str())
        .collect();
    let mut series = Vec::new();
    for (label, style) in labels.iter().zip(label_styles(&labels)) {
        let points: Vec<(f64, Vec<f64>)> = exp
            .config
            .test_grids
            .iter()
            .map(|&g| {
                let values = exp.values(label, g, "all");
                (g[0] as f64, values.iter().map(|v| 100.0 * v).collect())
            })
            .filter(|(_, v): &(f64, Vec<f64>)| !v.is_empty())
            .collect();
        let seeds = points.iter().map(|p| p.1.len()).max().unwrap_or(0);
        series.extend(Series::spread(
            with_seeds(label, seeds),
            style,
            &points,
            100.0,
        ));
    }
    let path = out.join(ACCURACY_BY_GRID);
    drawn(save_curves(
        &path,
        (900, 560),
        &Axes {
            title: format!(
                "vision: accuracy by test grid (trained on {}; {})",
                grid_name(exp.train_grid),
                posenc_plot::chart::seeds_note(&exp.config.seeds.to_string())
            ),
            x_desc: "patches a side",
            y_desc: "accuracy (%)",
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
