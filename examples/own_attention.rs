//! posenc's encodings inside your own candle attention, with no posenc-transformer: a
//! causal multi-head attention written here, in the paper's order, that asks an encoding
//! what it declares and calls its hooks. Any kind works unchanged: rotary, biases, a
//! decay read from the input, biases read from the scores, sinks, and stacks of them.
//!
//! ```sh
//! cargo run --release --example own_attention
//! ```

use std::sync::Arc;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::ops::softmax_last_dim;
use posenc::{
    BiasContext, EmbedContext, EncodingConfig, InputContext, PositionalEncoding, Positions,
    RotateContext, ScoreContext,
};

const D_MODEL: usize = 32;
const HEADS: usize = 4;

/// Causal self-attention of `x (batch, seq, d_model)` at positions `at`, with projections
/// `w = [W^Q, W^K, W^V]` and the encoding's hooks: `softmax(QKᵀ/√d_k + B + M) V`.
fn attention(
    x: &Tensor,
    w: &[Tensor; 3],
    encoding: &dyn PositionalEncoding,
    at: Positions,
) -> anyhow::Result<Tensor> {
    let caps = encoding.capabilities();
    let (b, n, _) = x.dims3()?;
    let heads = |t: Tensor| t.reshape((b, n, HEADS, D_MODEL / HEADS))?.transpose(1, 2);
    let [q, k, v] = [0, 1, 2].map(|i| x.broadcast_matmul(&w[i]).and_then(heads));
    let (q, k, v) = (q?.contiguous()?, k?.contiguous()?, v?.contiguous()?);
    let q = encoding
        .rotate(&q, &RotateContext::query(at))?
        .contiguous()?;
    let k = encoding.rotate(&k, &RotateContext::key(at))?.contiguous()?;
    let scale = 1.0 / ((D_MODEL / HEADS) as f64).sqrt();
    let mut logits = (q.matmul(&k.t()?)? * scale)?;
    if let Some(bias) = encoding.bias(&BiasContext::square(n, at))? {
        logits = logits.broadcast_add(&bias)?;
    }
    if let Some(decay) = encoding.read_input(&InputContext::new(x))?.decay {
        logits = (logits + decay.bias()?)?;
    }
    // The causal mask: keys after the query at the most negative f32 (never −∞: no NaN).
    let later =
        Tensor::triu2(n, DType::U8, x.device())?.sub(&Tensor::eye(n, DType::U8, x.device())?)?;
    let min = Tensor::full(f32::MIN, logits.shape(), x.device())?;
    logits = later
        .broadcast_as(logits.shape())?
        .where_cond(&min, &logits)?;
    if caps.reads_scores {
        if let Some(extra) = encoding.score_bias(&ScoreContext {
            q: &q,
            logits: &logits,
        })? {
            logits = (logits + extra)?;
        }
    }
    let weights =
        match caps.sink()? {
            None => softmax_last_dim(&logits)?,
            // A sink is a key of value zero every query sees: a column more, dropped after.
            Some(sink) => {
                let column = sink
                    .reshape((1, HEADS, 1, 1))?
                    .broadcast_as((b, HEADS, n, 1))?;
                softmax_last_dim(&Tensor::cat(&[&logits, &column.contiguous()?], D::Minus1)?)?
                    .narrow(D::Minus1, 0, n)?
            }
        };
    Ok(weights
        .matmul(&v)?
        .transpose(1, 2)?
        .reshape((b, n, D_MODEL))?)
}

/// Each encoding's attention over the same embeddings placed at `0..` and at `100..`.
/// Encodings that read only the distance between tokens give the same output both ways.
fn compare(kinds: &[&str]) -> anyhow::Result<Vec<(String, f32)>> {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (1, 12, D_MODEL), &dev)?;
    let w: [Tensor; 3] =
        [0, 1, 2].map(|_| Tensor::randn(0f32, 0.3, (D_MODEL, D_MODEL), &dev).unwrap());
    let mut out = Vec::new();
    for kind in kinds {
        let cfg: EncodingConfig = kind.parse()?;
        let built = cfg.build_untrained(D_MODEL, HEADS, &dev)?;
        let enc: Arc<dyn PositionalEncoding> = posenc::for_layer(&built, 0);
        let run = |offset: usize| -> anyhow::Result<Tensor> {
            let x = enc.embed(&x, &EmbedContext::at(offset))?;
            attention(&x, &w, &*enc, Positions::From(offset))
        };
        let shift = (run(0)? - run(100)?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        out.push((kind.to_string(), shift));
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let kinds = [
        "none",
        "sinusoidal",
        "rope",
        "alibi",
        "t5",
        "fox",
        "cope",
        "sink",
        "stack",
    ];
    println!("| encoding | largest change, placed at 100 instead of 0 |\n|---|---:|");
    for (kind, shift) in compare(&kinds)? {
        println!("| {kind} | {shift:.2e} |");
    }
    println!(
        "\nRelative encodings read the same at any offset; absolute ones (sinusoidal) do not."
    );
    Ok(())
}

#[test]
fn relative_encodings_read_the_same_at_any_offset() {
    let shifts: std::collections::HashMap<_, _> =
        compare(&["rope", "alibi", "t5", "sink", "stack", "sinusoidal"])
            .unwrap()
            .into_iter()
            .collect();
    for kind in ["rope", "alibi", "t5", "sink", "stack"] {
        assert!(shifts[kind] < 1e-4, "{kind}: {}", shifts[kind]);
    }
    assert!(
        shifts["sinusoidal"] > 1e-2,
        "sinusoidal moved {}",
        shifts["sinusoidal"]
    );
}
