//! A model's positions, from its `config.json`, in attention written by hand in candle:
//! no posenc-transformer, a key/value cache of our own. `posenc::hf` reads each layer's
//! encoding (gpt-oss-20b's by default: YaRN RoPE on every layer, a window of 128 on every
//! other); each layer's attention asks it to turn the queries and keys and to bias the
//! scores (the window), then attends over the cache.
//!
//! ```sh
//! cargo run --release --example candle_model                     # gpt-oss-20b's positions
//! cargo run --release --example candle_model -- path/to/config.json
//! ```
//!
//! The widths here are small (2 heads of the config's head width); the positions are the
//! model's. Decoding a token at a time through the cache gives what one pass over the whole
//! sequence gives, layer by layer; and the same attention over a rolling cache (the first
//! tokens as sinks and the most recent ones, each key at its slot, as StreamingLLM places
//! them) gives what one pass over the tokens it kept gives (the tests below).

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::ops::softmax_last_dim;
use posenc::hf::HfPositions;
use posenc::{BiasContext, PositionalEncoding, Positions, RotateContext};

/// gpt-oss-20b's position fields, as its `config.json` gives them.
const GPT_OSS_20B: &str = r#"{
  "model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "head_dim": 64,
  "num_hidden_layers": 24, "max_position_embeddings": 131072, "rope_theta": 150000,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                   "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
  "sliding_window": 128,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention"]
}"#;

/// Heads of this small model (the config's own head width).
const HEADS: usize = 2;

/// One layer's attention: its projections, its encoding, and its cache of turned keys and
/// values `(1, heads, seen, head_dim)`.
struct Layer {
    w: [Tensor; 3],
    encoding: Arc<dyn PositionalEncoding>,
    keys: Option<Tensor>,
    values: Option<Tensor>,
}

impl Layer {
    /// Causal attention of `x (1, n, d)` at positions `at..at + n` over the cache and
    /// itself: `softmax(QKᵀ/√d_k + B + M) V`, the new keys and values kept for the next call.
    fn forward(&mut self, x: &Tensor, at: usize) -> anyhow::Result<Tensor> {
        let (_, n, d) = x.dims3()?;
        let head_dim = d / HEADS;
        let heads = |t: Tensor| t.reshape((1, n, HEADS, head_dim))?.transpose(1, 2);
        let [q, k, v] = [0, 1, 2].map(|i| x.broadcast_matmul(&self.w[i]).and_then(heads));
        let q = self
            .encoding
            .rotate(&q?.contiguous()?, &RotateContext::query(at))?;
        let k = self
            .encoding
            .rotate(&k?.contiguous()?, &RotateContext::key(at))?;
        let join = |old: &Option<Tensor>, new: Tensor| match old {
            Some(old) => Tensor::cat(&[old, &new], 2),
            None => Ok(new),
        };
        let keys = join(&self.keys, k)?;
        let values = join(&self.values, v?.contiguous()?)?;
        let seen = keys.dim(2)?;
        let mut logits = (q.contiguous()?.matmul(&keys.t()?)? / (head_dim as f64).sqrt())?;
        // The window (or any bias the layer's encoding has), queries at `at..` against keys at `0..`.
        if let Some(bias) = self.encoding.bias(&BiasContext::new(
            n,
            seen,
            Positions::From(at),
            Positions::From(0),
        ))? {
            logits = logits.broadcast_add(&bias)?;
        }
        // Causal: query `at + i` sees keys `0 ..= at + i`; later ones at the most negative f32.
        let later: Vec<u8> = (0..n)
            .flat_map(|i| (0..seen).map(move |j| u8::from(j > at + i)))
            .collect();
        let later = Tensor::from_vec(later, (n, seen), x.device())?.broadcast_as(logits.shape())?;
        let min = Tensor::full(f32::MIN, logits.shape(), x.device())?;
        let weights = softmax_last_dim(&later.where_cond(&min, &logits)?)?;
        let out = weights
            .matmul(&values)?
            .transpose(1, 2)?
            .reshape((1, n, d))?;
        (self.keys, self.values) = (Some(keys), Some(values));
        Ok(out)
    }
}

/// The same attention over a rolling cache (StreamingLLM, Xiao et al. 2024): the first
/// `sinks` tokens and the most recent ones, `window` in all, each key placed at its slot in
/// the cache, so memory stays flat however long the sequence. The keys are kept unturned
/// and turned by their slots at every step.
struct Rolling {
    layer: Layer,
    sinks: usize,
    window: usize,
}

impl Rolling {
    /// The attention of one token `x (1, 1, d)`, the newest, over the cache and itself.
    fn step(&mut self, x: &Tensor) -> anyhow::Result<Tensor> {
        let d = x.dim(2)?;
        let head_dim = d / HEADS;
        let heads = |t: Tensor| t.reshape((1, 1, HEADS, head_dim))?.transpose(1, 2);
        let [q, k, v] = [0, 1, 2].map(|i| x.broadcast_matmul(&self.layer.w[i]).and_then(heads));
        let (sinks, window) = (self.sinks, self.window);
        // Appended, then, past the window, the oldest token after the sinks dropped.
        let keep = |old: &Option<Tensor>, new: Tensor| -> candle_core::Result<Tensor> {
            let all = match old {
                Some(old) => Tensor::cat(&[old, &new], 2)?,
                None => new,
            };
            let n = all.dim(2)?;
            match n > window {
                true => Tensor::cat(
                    &[
                        all.narrow(2, 0, sinks)?,
                        all.narrow(2, sinks + 1, n - sinks - 1)?,
                    ],
                    2,
                ),
                false => Ok(all),
            }
        };
        let raw = keep(&self.layer.keys, k?.contiguous()?)?;
        let values = keep(&self.layer.values, v?.contiguous()?)?;
        let seen = raw.dim(2)?;
        let encoding = &self.layer.encoding;
        let keys = encoding.rotate(&raw, &RotateContext::key(0))?;
        let q = encoding.rotate(&q?.contiguous()?, &RotateContext::query(seen - 1))?;
        let mut logits = (q.matmul(&keys.t()?)? / (head_dim as f64).sqrt())?;
        let at = BiasContext::new(1, seen, Positions::From(seen - 1), Positions::From(0));
        if let Some(bias) = encoding.bias(&at)? {
            logits = logits.broadcast_add(&bias)?;
        }
        // The newest token sees every slot: no causal mask to apply.
        let out = softmax_last_dim(&logits)?.matmul(&values)?;
        (self.layer.keys, self.layer.values) = (Some(raw), Some(values));
        Ok(out.transpose(1, 2)?.reshape((1, 1, d))?)
    }
}

/// A stack of rolling layers over `x (1, n, d)`, a token at a time, as [`run`] stacks them.
fn run_rolling(layers: &mut [Rolling], x: &Tensor) -> anyhow::Result<Tensor> {
    let ones = Tensor::ones(x.dim(2)?, x.dtype(), x.device())?;
    let mut outputs = Vec::new();
    for at in 0..x.dim(1)? {
        let mut h = x.narrow(1, at, 1)?;
        for layer in layers.iter_mut() {
            let normed = candle_nn::ops::rms_norm(&h, &ones, 1e-5)?;
            h = (&h + layer.step(&normed)?)?;
        }
        outputs.push(h);
    }
    Ok(Tensor::cat(&outputs, 1)?)
}

/// The layers of [`model`], each over a rolling cache of `window` slots, `sinks` of them
/// the first tokens'.
fn rolling(layers: Vec<Layer>, sinks: usize, window: usize) -> anyhow::Result<Vec<Rolling>> {
    anyhow::ensure!(
        sinks >= 1 && sinks < window,
        "the sinks ({sinks}) must be at least one and fewer than the window ({window})"
    );
    Ok(layers
        .into_iter()
        .map(|layer| Rolling {
            layer,
            sinks,
            window,
        })
        .collect())
}

/// The width of the small model for `config`: `HEADS` heads of the config's head width.
fn width(config: &serde_json::Value) -> anyhow::Result<usize> {
    Ok(HEADS * HfPositions::from_config(config)?.head_dim)
}

/// Random projections `[W^Q, W^K, W^V]` for `layers` layers of width `d`.
fn projections(layers: usize, d: usize, device: &Device) -> anyhow::Result<Vec<[Tensor; 3]>> {
    (0..layers)
        .map(|_| {
            let w = |_| Tensor::randn(0f32, 0.05, (d, d), device);
            Ok([w(0)?, w(1)?, w(2)?])
        })
        .collect()
}

/// The config's layers with projections `w`, their caches empty.
fn model(
    config: &serde_json::Value,
    w: &[[Tensor; 3]],
    device: &Device,
) -> anyhow::Result<Vec<Layer>> {
    let positions = HfPositions::from_config(config)?;
    let d = HEADS * positions.head_dim;
    let mut layers = Vec::new();
    for (i, (encoding, w)) in positions.layers.iter().zip(w).enumerate() {
        let built = encoding.build_untrained(d, HEADS, device)?;
        layers.push(Layer {
            w: w.clone(),
            encoding: posenc::for_layer(&built, i),
            keys: None,
            values: None,
        });
    }
    Ok(layers)
}

/// The stack's output for `x (1, n, d)`, each layer a residual around its attention: all at
/// once, or a token at a time through the cache.
fn run(layers: &mut [Layer], x: &Tensor, one_at_a_time: bool) -> anyhow::Result<Tensor> {
    let n = x.dim(1)?;
    let mut outputs = Vec::new();
    let steps: Vec<(usize, usize)> = match one_at_a_time {
        true => (0..n).map(|i| (i, 1)).collect(),
        false => vec![(0, n)],
    };
    let ones = Tensor::ones(x.dim(2)?, x.dtype(), x.device())?;
    for (at, len) in steps {
        let mut h = x.narrow(1, at, len)?;
        for layer in layers.iter_mut() {
            // Pre-norm, as the models do: each layer reads its input RMS-normalised.
            let normed = candle_nn::ops::rms_norm(&h, &ones, 1e-5)?;
            h = (&h + layer.forward(&normed, at)?)?;
        }
        outputs.push(h);
    }
    Ok(Tensor::cat(&outputs, 1)?)
}

fn main() -> anyhow::Result<()> {
    let text = match std::env::args().nth(1) {
        Some(path) => std::fs::read_to_string(&path)?,
        None => GPT_OSS_20B.to_string(),
    };
    let config: serde_json::Value = serde_json::from_str(&text)?;
    let device = Device::Cpu;
    for (i, layer) in HfPositions::from_config(&config)?.layers.iter().enumerate() {
        println!("layer {i:>2}: {}", layer.to_json());
    }
    let d = width(&config)?;
    let w = projections(HfPositions::from_config(&config)?.layers.len(), d, &device)?;
    let x = Tensor::randn(0f32, 1.0, (1, 160, d), &device)?;
    let whole = run(&mut model(&config, &w, &device)?, &x, false)?;
    let cached = run(&mut model(&config, &w, &device)?, &x, true)?;
    let scale = whole.abs()?.max_all()?.to_scalar::<f32>()?;
    let gap = (&whole - &cached)?.abs()?.max_all()?.to_scalar::<f32>()?;
    println!(
        "160 tokens in one pass, and a token at a time through the cache: {:.1e} apart, \
         relative to the outputs' largest",
        gap / scale
    );
    // A rolling cache of 64 slots, 4 of them sinks: memory for 64 tokens, however many come.
    let streamed = run_rolling(&mut rolling(model(&config, &w, &device)?, 4, 64)?, &x)?;
    let first = |t: &Tensor| t.narrow(1, 0, 64);
    let gap = (first(&whole)? - first(&streamed)?)?
        .abs()?
        .max_all()?
        .to_scalar::<f32>()?;
    println!(
        "the same through a rolling cache of 64 slots (4 sinks): the first 64 tokens {:.1e} apart",
        gap / scale
    );
    Ok(())
}

/// gpt-oss-20b's config, the CPU, the small model's width, and its 24 layers' projections.
#[cfg(test)]
fn setup() -> (serde_json::Value, Device, usize, Vec<[Tensor; 3]>) {
    let config: serde_json::Value = serde_json::from_str(GPT_OSS_20B).unwrap();
    let device = Device::Cpu;
    let d = width(&config).unwrap();
    let w = projections(24, d, &device).unwrap();
    (config, device, d, w)
}

/// The largest magnitude in `t`.
#[cfg(test)]
fn largest(t: Tensor) -> f32 {
    t.abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Decoding through the cache is one pass over the whole sequence, and the sliding layers'
/// window acts: past its 128 tokens the output moves when the window is taken away, and
/// within them it does not.
#[test]
fn a_token_at_a_time_through_the_cache_is_one_pass() {
    let (config, device, d, w) = setup();
    let x = Tensor::randn(0f32, 1.0, (1, 140, d), &device).unwrap();
    // How far apart, relative to the largest output.
    let apart = |a: &Tensor, b: &Tensor| largest((a - b).unwrap()) / largest(a.clone());
    let whole = run(&mut model(&config, &w, &device).unwrap(), &x, false).unwrap();
    let cached = run(&mut model(&config, &w, &device).unwrap(), &x, true).unwrap();
    assert!(apart(&whole, &cached) < 1e-5, "{}", apart(&whole, &cached));
    let mut unwindowed = config.clone();
    unwindowed.as_object_mut().unwrap().remove("layer_types");
    unwindowed["sliding_window"] = serde_json::Value::Null;
    let open = run(&mut model(&unwindowed, &w, &device).unwrap(), &x, false).unwrap();
    let within = |t: &Tensor| t.narrow(1, 0, 128).unwrap();
    assert!(apart(&within(&whole), &within(&open)) < 1e-4);
    assert!(
        apart(
            &whole.narrow(1, 128, 12).unwrap(),
            &open.narrow(1, 128, 12).unwrap()
        ) > 1e-3
    );
}

/// Through a rolling cache, each token's attention is one pass over the tokens the cache
/// holds (the sinks and the most recent), placed at `0, 1, …`; while the cache is not full,
/// it is the growing cache's.
#[test]
fn a_rolling_cache_attends_as_one_pass_over_what_it_kept() {
    let (config, device, d, w) = setup();
    let (sinks, window, n) = (3, 10, 30);
    let x = Tensor::randn(0f32, 1.0, (1, n, d), &device).unwrap();
    // One layer: step t against a fresh pass over the kept tokens.
    let mut one = rolling(model(&config, &w[..1], &device).unwrap(), sinks, window).unwrap();
    for t in 0..n {
        let xt = x.narrow(1, t, 1).unwrap();
        let got = one[0].step(&xt).unwrap();
        let kept: Vec<usize> = match t + 1 > window {
            true => (0..sinks).chain(t + 1 + sinks - window..=t).collect(),
            false => (0..=t).collect(),
        };
        let ids = Tensor::new(kept.iter().map(|&i| i as u32).collect::<Vec<_>>(), &device).unwrap();
        let tokens = x.index_select(&ids, 1).unwrap();
        let mut fresh = model(&config, &w[..1], &device).unwrap();
        let all = fresh[0].forward(&tokens, 0).unwrap();
        let want = all.narrow(1, kept.len() - 1, 1).unwrap();
        let gap = largest((&got - &want).unwrap()) / largest(want.clone());
        assert!(gap < 1e-5, "token {t}: {gap}");
    }
    // The whole stack, with room for every token, is the growing cache.
    let roomy = run_rolling(
        &mut rolling(model(&config, &w, &device).unwrap(), sinks, n).unwrap(),
        &x,
    );
    let cached = run(&mut model(&config, &w, &device).unwrap(), &x, true).unwrap();
    let gap = largest((&roomy.unwrap() - &cached).unwrap()) / largest(cached.clone());
    assert!(gap < 1e-5, "{gap}");
}
