//! How far RoPE tables built in BF16 or F16 drift from exact ones at 2k–128k positions, and
//! what that does to one attention row of SmolLM2-135M (candle#3698: Phi-3, Qwen2 and
//! Gemma ports that build their tables in the model's dtype degrade past about 2k tokens).
//!
//! ```sh
//! bash scripts/fetch_smollm2.sh && bash scripts/fetch_shakespeare.sh
//! cargo run --release --example rope_precision -- [OUT_DIR]   # default docs/precision
//! ```
//!
//! Three ways to build the `(cos, sin)` rows of positions `P − 512 … P − 1`, each against
//! the exact table (angles and their cosines in f64):
//!
//! - `cast after`: posenc's rule, the table computed in f32 (angles in f64) and cast to the
//!   dtype after (`Rope::cos_sin`, then `to_dtype`);
//! - `built in dtype`: the positions and inverse frequencies cast to the dtype first, their
//!   product and its cosine taken there, as a candle model that calls
//!   `Tensor::arange(..).to_dtype(dtype)` and `matmul(inv_freq)` does;
//! - with dtype `f32`, both: posenc's table, and the product taken in f32.
//!
//! Then the attention row of the 512th token of a Shakespeare play over the 512 before it, in
//! SmolLM2-135M's first layer (its f32 weights, its 9 query heads over 3 key/value heads,
//! its interleaved pairs and θ = 100 000), placed at positions `P − 512 … P − 1`: queries and
//! keys rotated by each table and dotted in f64, so that only the table differs. Exact
//! rotations give the same row at every `P` (the score depends on the offset alone), which
//! the example checks.
//!
//! Writes `tables.csv` (a row per dtype, way and `P`) and `attention.csv` (a row per dtype,
//! way, `P` and head: the largest logit error, the top-8 keys shared with the exact row, the
//! same largest key, the largest attention-weight error), tidy records that pandas reads;
//! `posenc report --tables docs/precision/README.md` renders the book's chapter from them.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor};
use posenc::rope::Rope;
use posenc::{PairLayout, Positions};
use posenc_io::write_atomic;
use posenc_llama::gguf::GgufFile;
use posenc_lm::corpus::{self, Corpus};

/// The positions each window ends at: `P` in `P − 512 … P − 1`. 512 is the window at the
/// start, inside every model's context.
const ENDS: [usize; 8] = [512, 2048, 4096, 8192, 16384, 32768, 65536, 131072];
/// Tokens in a window: the query is the last, the keys all of them.
const WINDOW: usize = 512;
/// The keys compared at the top of a row.
const TOP: usize = 8;

/// How a table was built.
#[derive(Clone, Copy)]
enum Way {
    /// Computed in f32 (posenc's angles in f64), cast to the dtype after.
    CastAfter,
    /// Positions, frequencies, their product and its cosine all in the dtype.
    BuiltInDtype,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::CastAfter => "cast after",
            Way::BuiltInDtype => "built in dtype",
        }
    }
}

fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        _ => "f32",
    }
}

/// Cosines and sines, `(WINDOW, half)` each, as f64.
struct Tables {
    cos: Vec<Vec<f64>>,
    sin: Vec<Vec<f64>>,
}

fn rows(t: &Tensor) -> Result<Vec<Vec<f64>>> {
    Ok(t.to_dtype(DType::F64)?.to_vec2::<f64>()?)
}

/// The exact table: angles and their cosines in f64.
fn exact(end: usize, inv_freq: &[f64]) -> Tables {
    let table = |f: fn(f64) -> f64| {
        (end - WINDOW..end)
            .map(|p| inv_freq.iter().map(|&w| f(p as f64 * w)).collect())
            .collect()
    };
    Tables {
        cos: table(f64::cos),
        sin: table(f64::sin),
    }
}

/// The table of `way` in `dtype`.
fn built(
    rope: &Rope,
    end: usize,
    dtype: DType,
    way: Way,
    half: usize,
    base: f64,
) -> Result<Tables> {
    let (cos, sin) = match way {
        Way::CastAfter => {
            let (cos, sin) = rope.cos_sin(Positions::From(end - WINDOW), WINDOW)?;
            (cos.to_dtype(dtype)?, sin.to_dtype(dtype)?)
        }
        Way::BuiltInDtype => {
            // As candle's model files build them: `1 / base^(2i/d)` in f32, then the
            // positions and the product in the model's dtype.
            let inv: Vec<f32> = (0..half)
                .map(|i| 1f32 / (base as f32).powf((2 * i) as f32 / (2 * half) as f32))
                .collect();
            let inv = Tensor::from_vec(inv, (1, half), &Device::Cpu)?.to_dtype(dtype)?;
            let t = Tensor::arange((end - WINDOW) as u32, end as u32, &Device::Cpu)?
                .to_dtype(dtype)?
                .reshape((WINDOW, 1))?;
            let freqs = t.matmul(&inv)?;
            (freqs.cos()?, freqs.sin()?)
        }
    };
    Ok(Tables {
        cos: rows(&cos)?,
        sin: rows(&sin)?,
    })
}

/// Rotates `x` (one head, `2 · half` wide, llama.cpp's interleaved pairs) by row `p`.
fn rotate(x: &[f64], t: &Tables, p: usize) -> Vec<f64> {
    let mut out = x.to_vec();
    for i in 0..x.len() / 2 {
        let (c, s) = (t.cos[p][i], t.sin[p][i]);
        let (a, b) = (x[2 * i], x[2 * i + 1]);
        out[2 * i] = a * c - b * s;
        out[2 * i + 1] = b * c + a * s;
    }
    out
}

/// The last query's logits over every key, for one head.
fn logits(q: &[f64], keys: &[Vec<f64>], t: &Tables, head_dim: usize) -> Vec<f64> {
    let q = rotate(q, t, WINDOW - 1);
    let scale = 1.0 / (head_dim as f64).sqrt();
    keys.iter()
        .enumerate()
        .map(|(j, k)| {
            let k = rotate(k, t, j);
            q.iter().zip(&k).map(|(a, b)| a * b).sum::<f64>() * scale
        })
        .collect()
}

fn softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let z: f64 = e.iter().sum();
    e.iter().map(|v| v / z).collect()
}

fn top(x: &[f64], n: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[b].total_cmp(&x[a]));
    idx.truncate(n);
    idx
}

/// The largest absolute difference, or `None` where either side is not finite.
fn max_error(a: &[f64], b: &[f64]) -> Option<f64> {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x.is_finite() && y.is_finite()).then(|| (x - y).abs()))
        .try_fold(0f64, |m, d| d.map(|d| m.max(d)))
}

/// A CSV field: the number, or empty (null) where there is none.
fn field(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v:e}"))
}

/// Each head's vectors, one per token: `[head][token][dim]`.
type Heads = Vec<Vec<Vec<f64>>>;

/// The first layer's queries and keys of `tokens`, before rotation: `(heads, tokens, head_dim)`
/// and `(kv_heads, tokens, head_dim)`, as f64.
fn first_layer_qk(file: &GgufFile, tokens: &[u32]) -> Result<(Heads, Heads)> {
    let cfg = file.config()?;
    let (d, hd) = (cfg.hidden_size, cfg.head_dim());
    let (heads, kv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
    let cpu = &Device::Cpu;
    let load = |name: &str, shape: &[usize]| -> Result<Tensor> {
        Ok(file.tensor(name, shape, cpu)?.dequantize(cpu)?)
    };
    let embed = load("token_embd.weight", &[cfg.vocab_size, d])?;
    let norm = load("blk.0.attn_norm.weight", &[d])?;
    let wq = load("blk.0.attn_q.weight", &[heads * hd, d])?;
    let wk = load("blk.0.attn_k.weight", &[kv * hd, d])?;
    let ids = Tensor::new(tokens, cpu)?;
    let x = embed.index_select(&ids, 0)?;
    // RMSNorm, as the model's first sublayer applies it.
    let rms = (x.sqr()?.mean_keepdim(1)? + cfg.rms_norm_eps)?.sqrt()?;
    let h = x.broadcast_div(&rms)?.broadcast_mul(&norm)?;
    let split = |w: &Tensor, n: usize| -> Result<Heads> {
        let y = h.matmul(&w.t()?)?.to_dtype(DType::F64)?; // (tokens, n · hd)
        let y = y
            .reshape((tokens.len(), n, hd))?
            .transpose(0, 1)?
            .contiguous()?;
        Ok(y.to_vec3::<f64>()?)
    };
    Ok((split(&wq, heads)?, split(&wk, kv)?))
}

fn main() -> Result<()> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or("docs/precision".into()));
    let file = GgufFile::open(&posenc_llama::model::fetched_smollm2()?)?;
    let cfg = file.config()?;
    let (hd, base) = (cfg.head_dim(), cfg.rope_theta);
    let (heads, kv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
    let half = hd / 2;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| base.powf(-((2 * i) as f64) / hd as f64))
        .collect();
    let rope = Rope::new(hd, base, PairLayout::Interleaved, 1.0, &Device::Cpu)?;

    let tokenizer = posenc_llama::tokenizer::from_gguf(&file)?;
    let corpus = Corpus::load(&corpus::default_dir())?;
    let text: String = Corpus::stream(&corpus.test)
        .chars()
        .take(20 * WINDOW)
        .collect();
    let ids = tokenizer
        .encode(text, false)
        .map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?
        .get_ids()
        .to_vec();
    ensure!(
        ids.len() >= WINDOW,
        "the test plays gave only {} tokens",
        ids.len()
    );
    let (q, k) = first_layer_qk(&file, &ids[..WINDOW])?;

    let mut tables_csv = String::from("dtype,way,position,max_error,non_finite\n");
    let mut attn_csv = String::from(
        "dtype,way,position,head,logit_max_error,top8_shared,argmax_same,weight_max_error\n",
    );
    let mut first_exact: Option<Vec<Vec<f64>>> = None;
    for end in ENDS {
        let exact_t = exact(end, &inv_freq);
        let exact_rows: Vec<Vec<f64>> = (0..heads)
            .map(|h| logits(&q[h][WINDOW - 1], &k[h / (heads / kv)], &exact_t, hd))
            .collect();
        // Exact rotations see offsets only: the row is the same wherever the window sits.
        let first = first_exact.get_or_insert_with(|| exact_rows.clone());
        for (a, b) in first.iter().zip(&exact_rows) {
            let d = max_error(a, b).unwrap_or(f64::INFINITY);
            ensure!(d < 1e-9, "the exact rows at {end} and 512 differ by {d}");
        }
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for way in [Way::CastAfter, Way::BuiltInDtype] {
                let t = built(&rope, end, dtype, way, half, base)?;
                let flat = |t: &Tables| -> Vec<f64> {
                    t.cos.iter().chain(&t.sin).flatten().copied().collect()
                };
                let (got, want) = (flat(&t), flat(&exact_t));
                let non_finite = got.iter().filter(|v| !v.is_finite()).count();
                let finite_err = got
                    .iter()
                    .zip(&want)
                    .filter(|(g, _)| g.is_finite())
                    .map(|(g, w)| (g - w).abs())
                    .fold(0f64, f64::max);
                let err = (non_finite == 0).then_some(finite_err);
                let (dn, wn) = (dtype_name(dtype), way.name());
                writeln!(
                    tables_csv,
                    "{dn},{wn},{end},{},{}",
                    field(err),
                    non_finite as f64 / got.len() as f64
                )?;
                for (h, want) in exact_rows.iter().enumerate() {
                    let row = logits(&q[h][WINDOW - 1], &k[h / (heads / kv)], &t, hd);
                    let finite = row.iter().all(|v| v.is_finite());
                    let shared = finite.then(|| {
                        let a = top(want, TOP);
                        top(&row, TOP).iter().filter(|i| a.contains(i)).count() as f64 / TOP as f64
                    });
                    // pandas' spelling of a boolean; empty where the row is not finite.
                    let same = match finite {
                        true if top(want, 1) == top(&row, 1) => "True",
                        true => "False",
                        false => "",
                    };
                    let weights = finite
                        .then(|| max_error(&softmax(want), &softmax(&row)))
                        .flatten();
                    writeln!(
                        attn_csv,
                        "{dn},{wn},{end},{h},{},{},{},{}",
                        field(max_error(want, &row)),
                        field(shared),
                        same,
                        field(weights)
                    )?;
                }
            }
        }
        eprintln!("{end} positions done");
    }
    std::fs::create_dir_all(&out)?;
    write_atomic(&out.join("tables.csv"), tables_csv.as_bytes())?;
    write_atomic(&out.join("attention.csv"), attn_csv.as_bytes())?;
    println!("wrote {}/tables.csv and attention.csv", out.display());
    Ok(())
}
