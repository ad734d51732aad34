//! Attention maps: every layer and head of a model's attention for one input, a heatmap
//! each (queries × keys), a row per layer and a column per head.

use std::path::Path;

use crate::error::Result;
use posenc_error::ensure;

use crate::chart::{heatmap, save_png, Heatmap};

/// One layer's attention: its heads' weights, `queries × keys` each, and the words at
/// either side.
#[derive(Debug, Clone)]
pub struct Layer<'a> {
    /// The layer's name in the figure ("encoder 1", "cross 2").
    pub name: String,
    /// Each head's weights, `queries × keys`.
    pub heads: &'a [Vec<Vec<f32>>],
    /// The query positions' words (rows).
    pub queries: &'a [String],
    /// The key positions' words (columns).
    pub keys: &'a [String],
}

/// Draws `layers` into the PNG `path`: one row per layer, one column per head.
///
/// # Errors
/// No layer or no head to draw; layers with different numbers of heads; a figure that
/// cannot be written.
pub fn attention(layers: &[Layer], title: &str, path: &Path) -> Result<()> {
    ensure!(
        !layers.is_empty() && !layers[0].heads.is_empty(),
        "the model has no attention to draw"
    );
    let heads = layers[0].heads.len();
    ensure!(
        layers.iter().all(|l| l.heads.len() == heads),
        "every layer must have {heads} heads to draw"
    );
    let rows = layers.len();
    save_png(
        path,
        (360 * heads as u32, 340 * rows as u32 + 40),
        title,
        |root| {
            let panels = root.split_evenly((rows, heads));
            for (row, layer) in layers.iter().enumerate() {
                for (h, w) in layer.heads.iter().enumerate() {
                    heatmap(
                        &panels[row * heads + h],
                        &Heatmap {
                            values: w,
                            title: format!("{}, head {h}", layer.name),
                            x_desc: "",
                            y_desc: "",
                            x_ticks: Some(layer.keys),
                            y_ticks: Some(layer.queries),
                            diverging: false,
                            range: None,
                            colour_bar: true,
                            cell_text: None,
                        },
                    )?;
                }
            }
            Ok(())
        },
    )?;
    Ok(())
}
