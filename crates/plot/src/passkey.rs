//! Passkey retrieval as a heatmap: accuracy by prompt length (rows, shortest at the top)
//! and by the depth of the key (columns), on a fixed 0–1 scale so figures compare.

use std::path::Path;

use crate::error::Result;
use posenc_error::ensure;

use crate::chart::{heatmap, save_png, Heatmap};

/// Draws `accuracy[length][depth]`, prompts of `lengths` tokens with the key at `depths`,
/// into the PNG `path`.
///
/// # Errors
/// A table that is not `lengths` by `depths`; a figure that cannot be written.
pub fn passkey(
    lengths: &[usize],
    depths: &[f64],
    accuracy: &[Vec<f64>],
    title: &str,
    path: &Path,
) -> Result<()> {
    ensure!(
        accuracy.len() == lengths.len() && accuracy.iter().all(|row| row.len() == depths.len()),
        "the accuracy table is not {} lengths by {} depths",
        lengths.len(),
        depths.len()
    );
    let values: Vec<Vec<f32>> = accuracy
        .iter()
        .map(|row| row.iter().map(|&v| v as f32).collect())
        .collect();
    let x_ticks: Vec<String> = depths.iter().map(|d| format!("{d}")).collect();
    let y_ticks: Vec<String> = lengths.iter().map(|l| l.to_string()).collect();
    let width = 200 + 90 * depths.len() as u32;
    let height = 160 + 50 * lengths.len() as u32;
    let width = width.max(480).max(11 * title.chars().count() as u32 + 40);
    save_png(path, (width, height), title, |root| {
        heatmap(
            root,
            &Heatmap {
                values: &values,
                title: "accuracy".to_string(),
                x_desc: "depth of the key",
                y_desc: "prompt tokens",
                x_ticks: Some(&x_ticks),
                y_ticks: Some(&y_ticks),
                diverging: false,
                range: Some((0.0, 1.0)),
            },
        )
    })
}
