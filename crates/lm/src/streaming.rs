//! The records of a model read and run past its window through a rolling key/value cache
//! (StreamingLLM, Xiao et al. 2024), and their tables: perplexity over long windows read
//! whole and rolled, and decode speed and memory block by block through a long generation,
//! rolling and growing. `scripts/streaming_study.sh` writes them as one `results.json`;
//! `posenc report` renders its page.

use std::path::Path;

use posenc_error::Context;
use serde::{Deserialize, Serialize};

use crate::Result;

/// One reading of `lm eval` (its JSON rows, whose other fields are not needed here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerplexityRow {
    /// The model.
    pub model: String,
    /// The window length.
    pub len: usize,
    /// Windows read.
    pub windows: usize,
    /// Mean loss over every position of every window, nats.
    pub loss: f64,
    /// `exp(loss)`.
    pub perplexity: f64,
    /// Each window's mean loss.
    pub window_losses: Vec<f64>,
    /// The rolling cache's positions (none: read whole).
    #[serde(default)]
    pub window: Option<usize>,
    /// The rolling cache's sinks (none: read whole).
    #[serde(default)]
    pub sinks: Option<usize>,
    /// The loss at each position, over the windows, nats (none where not kept).
    #[serde(default)]
    pub by_position: Vec<f64>,
    /// The reading process's peak resident memory, MB, where it was measured.
    #[serde(default)]
    pub peak_rss_mb: Option<f64>,
}

impl PerplexityRow {
    /// The mean loss over the first and the last eighth of the positions, if kept.
    pub fn first_and_last_eighth(&self) -> Option<(f64, f64)> {
        let n = self.by_position.len() / 8;
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
        (n > 0).then(|| {
            let last = &self.by_position[self.by_position.len() - n..];
            (mean(&self.by_position[..n]), mean(last))
        })
    }
}

/// One block of a long generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRow {
    /// The model.
    pub model: String,
    /// `rolling` or `growing`.
    pub cache: String,
    /// The rolling cache's positions (none for the growing cache).
    pub window: Option<usize>,
    /// The rolling cache's sinks.
    pub sinks: Option<usize>,
    /// Tokens generated when the block ended.
    pub position: usize,
    /// Decode speed over the block.
    pub tokens_per_s: f64,
    /// Resident memory when the block ended, MB.
    pub rss_mb: f64,
    /// Peak resident memory so far, MB.
    pub peak_rss_mb: f64,
}

/// `results.json` of a streaming study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamingStudy {
    /// What the machine was doing meanwhile, and anything else a reader must know.
    pub note: String,
    /// Long windows read whole and rolled.
    pub perplexity: Vec<PerplexityRow>,
    /// Long generations, block by block.
    pub generate: Vec<GenerateRow>,
}

/// How a row was read: `whole`, or `rolling W, S sinks`.
fn reading(window: Option<usize>, sinks: Option<usize>) -> String {
    match (window, sinks) {
        (Some(w), Some(s)) => format!("rolling cache of {w}, {s} sinks"),
        _ => "whole".into(),
    }
}

impl StreamingStudy {
    /// Reads a study's `results.json`.
    ///
    /// # Errors
    /// A missing file, or one that is not a streaming study's.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(serde_json::from_str(&text)
            .with_context(|| format!("{} is not a streaming study's results", path.display()))?)
    }

    /// The page: both tables.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# Past the window: a rolling cache with attention sinks\n\n{}\n\n\
             ## Perplexity over long windows\n\n\
             The loss by eighth is over the positions of each eighth of the window, the \
             windows' mean; peak memory is the reading process's, where it was measured.\n\n\
             | model | reading | window length | windows | perplexity | loss ± sd over windows \
             | loss, first eighth → last | peak memory (MB) |\n\
             |---|---|---:|---:|---:|---:|---:|---:|\n",
            self.note
        );
        for r in &self.perplexity {
            let eighths = r
                .first_and_last_eighth()
                .map_or("–".into(), |(a, b)| format!("{a:.3} → {b:.3}"));
            let peak = r.peak_rss_mb.map_or("–".into(), |m| format!("{m:.0}"));
            s += &format!(
                "| {} | {} | {} | {} | {:.2} | {} | {eighths} | {peak} |\n",
                r.model,
                reading(r.window, r.sinks),
                r.len,
                r.windows,
                r.perplexity,
                posenc_train::results::spread(&r.window_losses, 3)
            );
        }
        s += "\n## Decode speed and memory through a long generation\n\n\
              Speed over each block of generated tokens; resident memory at its end.\n\n\
              | model | cache | tokens | blocks | tokens/s, first block | tokens/s, last block | \
              tokens/s, min–max after the first block | memory, first block (MB) | \
              memory, last block (MB) | \
              peak memory (MB) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        let mut caches: Vec<(&str, Option<usize>, Option<usize>)> = Vec::new();
        for r in &self.generate {
            let key = (r.cache.as_str(), r.window, r.sinks);
            if !caches.contains(&key) {
                caches.push(key);
            }
        }
        for (cache, window, sinks) in caches {
            let rows: Vec<&GenerateRow> = self
                .generate
                .iter()
                .filter(|r| (r.cache.as_str(), r.window, r.sinks) == (cache, window, sinks))
                .collect();
            let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
                continue;
            };
            // After the first block: a rolling cache's first fills its window.
            let speeds = rows.iter().skip(1).map(|r| r.tokens_per_s);
            let min = speeds.clone().fold(f64::INFINITY, f64::min);
            let max = speeds.fold(f64::NEG_INFINITY, f64::max);
            let range = match rows.len() {
                0 | 1 => "n/a".to_string(),
                _ => format!("{min:.1}–{max:.1}"),
            };
            let what = match cache {
                "rolling" => reading(window, sinks),
                other => format!("{other} (every position kept)"),
            };
            s += &format!(
                "| {} | {what} | {} | {} | {:.1} | {:.1} | {range} | {:.0} | {:.0} | {:.0} |\n",
                first.model,
                last.position,
                rows.len(),
                first.tokens_per_s,
                last.tokens_per_s,
                first.rss_mb,
                last.rss_mb,
                rows.iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max),
            );
        }
        s
    }
}
