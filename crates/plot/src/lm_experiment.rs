//! The figures of `posenc lm experiment`: test perplexity against evaluation length (the
//! ALiBi paper's Figure 1), and the loss at each position of the longest window.

use std::path::{Path, PathBuf};

use crate::error::Result;
use posenc_lm::lm_experiment::LmExperiment;

use crate::chart::{colour, curves, mean_and_range, save_png, Axes, Mark, Series, SpreadPoint};

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
/// Results without a record (nothing to draw); `out` or a file in it that cannot be
/// written.
pub fn lm_experiment(exp: &LmExperiment, out: &Path) -> Result<Vec<PathBuf>> {
    crate::chart::begin_figures(out, exp.records.len(), "evaluation records")?;
    let context = exp.config.base.model.context;
    let trained = match exp.config.base.randomized_positions {
        Some(range) => format!("trained on L = {context} at random positions below {range}"),
        None => format!("trained on L = {context}"),
    };
    let seeds = exp.config.seeds;
    // Each label's mean perplexity over its seeds at each length, with their range.
    let by_length: Vec<(String, Vec<SpreadPoint>)> = exp
        .labels()
        .into_iter()
        .map(|label| {
            let mut points = Vec::new();
            for f in &exp.config.factors {
                let len = f * context;
                let ppl: Vec<f64> = exp
                    .records
                    .iter()
                    .filter(|r| r.run.label == label && r.length == len)
                    .filter_map(|r| r.perplexity)
                    .collect();
                points.extend(mean_and_range(len as f64, &ppl));
            }
            (label, points)
        })
        .collect();
    let extrapolation = out.join(EXTRAPOLATION);
    let title = if seeds > 1 {
        format!("test perplexity by window length ({trained}; mean and range over {seeds} seeds)")
    } else {
        format!("test perplexity by window length ({trained})")
    };
    perplexity_by_length(&extrapolation, &title, &by_length)?;
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
        let seed = exp.config.base.seed;
        format!("test loss by position in the longest window ({trained}; seed {seed})")
    } else {
        format!("test loss by position in the longest window ({trained})")
    };
    loss_by_position(&positions, &title, &by_position, BUCKET)?;
    Ok(vec![extrapolation, positions])
}

/// Perplexity against window length, one curve per named series of
/// `(length, mean, min, max)`: the mean as a line, the range as a band around it.
///
/// # Errors
/// A file that cannot be written.
pub fn perplexity_by_length(
    path: &Path,
    title: &str,
    series: &[(String, Vec<SpreadPoint>)],
) -> Result<()> {
    let curves_: Vec<Series> = series
        .iter()
        .enumerate()
        .flat_map(|(i, (name, points))| Series::spread(name.clone(), colour(i), points))
        .collect();
    save_png(path, (900, 560), "", |root| {
        curves(
            root,
            &Axes {
                title: title.to_string(),
                x_desc: "tokens in the window",
                y_desc: "perplexity (lower is better)",
                square: false,
                y_range: None,
            },
            &curves_,
        )
    })
}

/// The loss at each position of a window, one curve per named series, each point the
/// mean of `bucket` positions so the curve shows the trend rather than each token's noise.
///
/// # Errors
/// A file that cannot be written.
pub fn loss_by_position(
    path: &Path,
    title: &str,
    series: &[(String, &[f64])],
    bucket: usize,
) -> Result<()> {
    let bucket = bucket.max(1);
    let curves_: Vec<Series> = series
        .iter()
        .enumerate()
        .map(|(i, (name, losses))| Series {
            name: name.clone(),
            points: losses
                .chunks(bucket)
                .enumerate()
                .map(|(b, c)| ((b * bucket) as f64, c.iter().sum::<f64>() / c.len() as f64))
                .collect(),
            mark: Mark::Line,
            colour: colour(i),
        })
        .collect();
    save_png(path, (900, 560), "", |root| {
        curves(
            root,
            &Axes {
                title: format!("{title}; each point the mean of positions x..x+{bucket}"),
                x_desc: "position in the window",
                y_desc: "next-token loss (nats)",
                square: false,
                y_range: None,
            },
            &curves_,
        )
    })
}
