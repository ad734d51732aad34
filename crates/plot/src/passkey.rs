//! Passkey retrieval as a heatmap: accuracy by prompt length (rows, shortest at the top)
//! and by the depth of the key (columns), on a fixed 0–1 scale so figures compare, with
//! the keys found and the trials in each cell.

use std::path::Path;

use crate::error::Result;
use posenc_error::ensure;

use crate::chart::{heatmap, save_png, Heatmap};

/// Draws `found[length][depth]`, the keys found and the trials of prompts of `lengths`
/// tokens with the key at `depths`, into the PNG `path`: the share found as the colour,
/// `found/trials` as the text of each cell (a cell with no trial is grey).
///
/// # Errors
/// A table that is not `lengths` by `depths`; a figure that cannot be written.
pub fn passkey(
    lengths: &[usize],
    depths: &[f64],
    found: &[Vec<(usize, usize)>],
    title: &str,
    path: &Path,
) -> Result<()> {
    ensure!(
        found.len() == lengths.len() && found.iter().all(|row| row.len() == depths.len()),
        "the passkey table is not {} lengths by {} depths",
        lengths.len(),
        depths.len()
    );
    let values: Vec<Vec<f32>> = found
        .iter()
        .map(|row| {
            row.iter()
                .map(|&(right, trials)| match trials {
                    0 => f32::NAN,
                    n => right as f32 / n as f32,
                })
                .collect()
        })
        .collect();
    let text: Vec<Vec<String>> = found
        .iter()
        .map(|row| {
            row.iter()
                .map(|(right, trials)| format!("{right}/{trials}"))
                .collect()
        })
        .collect();
    let x_ticks: Vec<String> = depths.iter().map(|d| format!("{d}")).collect();
    let y_ticks: Vec<String> = lengths.iter().map(|l| l.to_string()).collect();
    scores(
        &Grid {
            what: "accuracy",
            values: &values,
            text: &text,
            x_desc: "depth of the key",
            x_ticks: &x_ticks,
            y_desc: "prompt tokens",
            y_ticks: &y_ticks,
        },
        title,
        path,
    )
}

/// A table of shares between 0 and 1 (accuracies, scores) with a text in each cell.
pub struct Grid<'a> {
    /// What the shares are (`accuracy`, `score`): the panel's title.
    pub what: &'a str,
    /// `values[row][column]`, NaN for a cell not measured.
    pub values: &'a [Vec<f32>],
    /// `text[row][column]`: what stands behind each share (`3/3`, `0.67 ± 0.10`).
    pub text: &'a [Vec<String>],
    /// What the columns are.
    pub x_desc: &'a str,
    /// The columns' labels.
    pub x_ticks: &'a [String],
    /// What the rows are.
    pub y_desc: &'a str,
    /// The rows' labels.
    pub y_ticks: &'a [String],
}

/// Draws `grid` into the PNG `path` on a fixed 0–1 scale, so figures compare: the passkey
/// grid, and RULER's scores by task and length.
///
/// # Errors
/// A figure that cannot be written.
pub fn scores(grid: &Grid, title: &str, path: &Path) -> Result<()> {
    let width = 200 + super::chart::BAR_WIDTH + 90 * grid.x_ticks.len() as u32;
    let height = 160 + 50 * grid.y_ticks.len() as u32;
    let width = width.max(480).max(11 * title.chars().count() as u32 + 40);
    save_png(path, (width, height), title, |root| {
        heatmap(
            root,
            &Heatmap {
                values: grid.values,
                title: grid.what.to_string(),
                x_desc: grid.x_desc,
                y_desc: grid.y_desc,
                x_ticks: Some(grid.x_ticks),
                y_ticks: Some(grid.y_ticks),
                diverging: false,
                range: Some((0.0, 1.0)),
                colour_bar: true,
                cell_text: Some(grid.text),
            },
        )
    })
}
