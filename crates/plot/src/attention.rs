//! Attention maps of a trained model for one sentence: every layer and head of the
//! encoder's self-attention (source × source) and of the decoder's cross-attention
//! (target × source). The cross-attention is where the reordering shows: Kotoba puts the
//! place phrase first, so its first words attend to the end of the English sentence.

use std::path::Path;

use crate::error::Result;
use posenc_error::ensure;
use posenc_kotoba::inspect::AttentionMaps;

use crate::chart::{heatmap, save_png, Heatmap};

/// Draws `maps` into the PNG `path`: one row per layer (encoder layers, then decoder
/// cross-attention layers), one column per head.
pub fn attention(maps: &AttentionMaps, title: &str, path: &Path) -> Result<()> {
    ensure!(
        !maps.encoder.is_empty() && !maps.encoder[0].is_empty(),
        "the model has no encoder attention to draw"
    );
    let heads = maps.encoder[0].len();
    let rows = maps.encoder.len() + maps.cross.len();
    save_png(
        path,
        (360 * heads as u32, 340 * rows as u32 + 40),
        title,
        |root| {
            let panels = root.split_evenly((rows, heads));
            let layers = maps
                .encoder
                .iter()
                .enumerate()
                .map(|(l, w)| (format!("encoder {}", l + 1), w, &maps.source))
                .chain(
                    maps.cross
                        .iter()
                        .enumerate()
                        .map(|(l, w)| (format!("cross {}", l + 1), w, &maps.target)),
                );
            for (row, (name, weights, queries)) in layers.enumerate() {
                for (h, w) in weights.iter().enumerate() {
                    heatmap(
                        &panels[row * heads + h],
                        &Heatmap {
                            values: w,
                            title: format!("{name}, head {h}"),
                            x_desc: "",
                            y_desc: "",
                            x_ticks: Some(&maps.source),
                            y_ticks: Some(queries),
                            diverging: false,
                            range: None,
                        },
                    )?;
                }
            }
            Ok(())
        },
    )?;
    Ok(())
}
