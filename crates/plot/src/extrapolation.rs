//! Curves of length extrapolation, from plain series: perplexity against window length
//! (the ALiBi paper's Figure 1), and the loss at each position of a window.

use std::path::Path;

use crate::chart::{label_styles, save_curves, with_seeds, Axes, Mark, SeedPoint, Series};
use crate::error::Result;

/// Perplexity against window length, one curve per series `(label, points)` of each
/// length and its seeds' perplexities: the mean as a line, the seeds' spread around it
/// ([`Series::spread`]), the legend naming the seeds.
///
/// # Errors
/// A file that cannot be written.
pub fn perplexity_by_length(
    path: &Path,
    title: &str,
    series: &[(String, Vec<SeedPoint>)],
) -> Result<()> {
    let styles = label_styles(&series.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>());
    let values = || {
        series
            .iter()
            .flat_map(|(_, p)| p.iter().flat_map(|(_, ys)| ys))
    };
    let span = values().fold(f64::NEG_INFINITY, |a, &b| a.max(b))
        - values().fold(f64::INFINITY, |a, &b| a.min(b));
    let curves_: Vec<Series> = series
        .iter()
        .zip(styles)
        .flat_map(|((label, points), style)| {
            let seeds = points.iter().map(|(_, ys)| ys.len()).max().unwrap_or(0);
            Series::spread(with_seeds(label, seeds), style, points, span)
        })
        .collect();
    save_curves(
        path,
        (900, 560),
        &Axes {
            title: title.to_string(),
            x_desc: "tokens in the window",
            y_desc: "perplexity (lower is better)",
            square: false,
            y_range: None,
        },
        &curves_,
    )
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
    let styles = label_styles(&series.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>());
    let curves_: Vec<Series> = series
        .iter()
        .zip(styles)
        .map(|((name, losses), style)| Series {
            name: name.clone(),
            points: losses
                .chunks(bucket)
                .enumerate()
                .map(|(b, c)| ((b * bucket) as f64, c.iter().sum::<f64>() / c.len() as f64))
                .collect(),
            mark: Mark::Line,
            colour: style.colour,
            dash: style.dash,
        })
        .collect();
    save_curves(
        path,
        (900, 560),
        &Axes {
            title: format!("{title}; each point the mean of positions x..x+{bucket}"),
            x_desc: "position in the window",
            y_desc: "next-token loss (nats)",
            square: false,
            y_range: None,
        },
        &curves_,
    )
}
