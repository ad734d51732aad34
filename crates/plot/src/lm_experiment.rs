//! The figures of `posenc lm experiment`: test perplexity against evaluation length (the
//! ALiBi paper's Figure 1), and the loss at each position of the longest window.

use std::path::{Path, PathBuf};

use anyhow::Result;
use posenc_train::lm_experiment::LmExperiment;

use crate::chart::{colour, curves, save_png, Axes, Mark, Series};

/// `extrapolation.png`.
pub const EXTRAPOLATION: &str = "extrapolation.png";
/// `by_position.png`.
pub const BY_POSITION: &str = "by_position.png";
/// Positions averaged into one point of `by_position.png`, so the curve shows the trend
/// rather than each character's noise.
const BUCKET: usize = 8;

/// Writes `extrapolation.png` and `by_position.png` into `out`; returns their paths.
///
/// # Errors
/// A file that cannot be written.
pub fn lm_experiment(exp: &LmExperiment, out: &Path) -> Result<Vec<PathBuf>> {
    let context = exp.config.base.model.context;
    let trained = match exp.config.base.randomized_positions {
        Some(range) => format!("trained on L = {context} at random positions below {range}"),
        None => format!("trained on L = {context}"),
    };
    let by_length: Vec<Series> = exp
        .results
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            name: r.kind.clone(),
            points: r
                .lengths
                .iter()
                .filter_map(|row| Some((row.len as f64, row.eval.as_ref().ok()?.perplexity())))
                .collect(),
            mark: Mark::LineDots,
            colour: colour(i),
        })
        .collect();
    let extrapolation = out.join(EXTRAPOLATION);
    save_png(&extrapolation, (900, 560), "", |root| {
        curves(
            root,
            &Axes {
                title: format!("test perplexity by window length ({trained})"),
                x_desc: "tokens in the window",
                y_desc: "perplexity (lower is better)",
                square: false,
                y_range: None,
            },
            &by_length,
        )
    })?;
    let by_position: Vec<Series> = exp
        .results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let e = r.longest()?;
            Some(Series {
                name: r.kind.clone(),
                points: e
                    .by_position
                    .chunks(BUCKET)
                    .enumerate()
                    .map(|(b, c)| ((b * BUCKET) as f64, c.iter().sum::<f64>() / c.len() as f64))
                    .collect(),
                mark: Mark::Line,
                colour: colour(i),
            })
        })
        .collect();
    let positions = out.join(BY_POSITION);
    save_png(&positions, (900, 560), "", |root| {
        curves(
            root,
            &Axes {
                title: format!(
                    "test loss by position in the longest window ({trained}; each point the mean of positions x..x+{BUCKET})"
                ),
                x_desc: "position in the window",
                y_desc: "next-token loss (nats)",
                square: false,
                y_range: None,
            },
            &by_position,
        )
    })?;
    Ok(vec![extrapolation, positions])
}
