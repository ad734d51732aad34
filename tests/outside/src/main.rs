//! Attention of our own, in plain candle, with each layer's positions read from a model's
//! `config.json` by posenc: SmolLM3-3B's by default (`config.json` beside this crate, its
//! published fields), whose every fourth layer has no rotation.
//!
//! ```sh
//! cargo run --manifest-path tests/outside/Cargo.toml [-- path/to/config.json]
//! ```
//!
//! For each layer it prints the layer's encoding, and how far one head's causal attention
//! moves when the whole sequence is shifted by 1 000 positions: a rotation's scores read
//! only the offset between a query and a key, so the output stays where it was.

use std::io::Write;

use anyhow::ensure;
use candle_core::{Device, Tensor, D};
use candle_nn::ops::softmax_last_dim;
use posenc::hf::HfPositions;
use posenc::{PositionalEncoding, Positions, RotateContext};

/// One head's causal attention over `q, k, v (1, 1, n, head_dim)` placed at `at..at + n`.
fn attend(
    enc: &dyn PositionalEncoding,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    at: usize,
) -> anyhow::Result<Tensor> {
    let (n, head_dim) = (q.dim(2)?, q.dim(3)?);
    let q = enc.rotate(q, &RotateContext::query(Positions::From(at)))?;
    let k = enc.rotate(k, &RotateContext::key(Positions::From(at)))?;
    let scores = (q.matmul(&k.t()?)? / (head_dim as f64).sqrt())?;
    let later: Vec<u8> = (0..n)
        .flat_map(|i| (0..n).map(move |j| u8::from(j > i)))
        .collect();
    let later = Tensor::from_vec(later, (n, n), q.device())?.broadcast_as(scores.shape())?;
    let masked = later.where_cond(
        &Tensor::full(f32::MIN, scores.shape(), q.device())?,
        &scores,
    )?;
    Ok(softmax_last_dim(&masked)?.matmul(v)?)
}

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/config.json").into());
    let text =
        std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("reading {path}: {e}"))?;
    let config: serde_json::Value = serde_json::from_str(&text)?;
    let positions = HfPositions::from_config(&config)?;
    let (dev, n, hd) = (Device::Cpu, 16, positions.head_dim);
    let x = |seed: f64| {
        Tensor::arange(0f32, (n * hd) as f32, &dev)?
            .affine(0.37, seed)?
            .sin()?
            .reshape((1, 1, n, hd))
    };
    let (q, k, v) = (x(0.1)?, x(1.2)?, x(2.3)?);
    let mut out = std::io::stdout().lock();
    for (i, layer) in positions.layers.iter().enumerate() {
        // One head: the model width is the head width.
        let enc = layer.build_untrained(hd, 1, &dev)?;
        let turned = enc.rotate(&q, &RotateContext::query(Positions::From(5)))?;
        let rotates = (turned - &q)?.abs()?.max_all()?.to_scalar::<f32>()? > 0.0;
        let here = attend(enc.as_ref(), &q, &k, &v, 0)?;
        let there = attend(enc.as_ref(), &q, &k, &v, 1000)?;
        let moved = (here - there)?
            .abs()?
            .flatten_all()?
            .max(D::Minus1)?
            .to_scalar::<f32>()?;
        // Past a rotation's rounding in f32, the shift would move it.
        ensure!(
            moved < 1e-4,
            "layer {i}: shifting the sequence moved its output by {moved}"
        );
        let line = format!(
            "layer {i}: {} rotates={rotates} shifted-by-1000={moved:.2e}",
            serde_json::to_string(layer)?
        );
        // A closed pipe (`| head`) ends the listing, not the program with a panic.
        match writeln!(out, "{line}") {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other?,
        }
    }
    Ok(())
}
