//! What the rotary encoding does inside a real model: SmolLM2-135M-Instruct's perplexity on
//! Shakespeare's test plays with its trained RoPE, and with the rotation swapped through the
//! encoding seam ([`LanguageModel::with_encoding`]) and nothing retrained: positions
//! interpolated by 1/2 and 1/4 (Chen et al. 2023), the NTK-aware base for a 4× longer
//! context (bloc97 2023), RoFormer's base 10 000 instead of 100 000, and no rotation.
//!
//! ```sh
//! bash scripts/fetch_smollm2.sh && bash scripts/fetch_shakespeare.sh
//! cargo run --release --example smollm2_rope -- [OUT_DIR] [TOKENS_PER_LENGTH]
//! cargo run --release --example smollm2_rope -- --from-records [DIR]   # figures only
//! ```
//!
//! Writes `results.md`, `results.json`, `perplexity.png` (perplexity by window length) and
//! `by_position.png` (loss at each position of the longest window) into `OUT_DIR`
//! (default `docs/smollm2-rope`). The f32 weights are used, so the numbers are the model's
//! own, not the quantized kernel's. With `--from-records` it draws the two figures again
//! from `DIR/results.json` alone (default `docs/smollm2-rope`), evaluating nothing.
//!
//! [`LanguageModel::with_encoding`]: posenc_transformer::LanguageModel::with_encoding

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use posenc::rope::RopeConfig;
use posenc::EncodingConfig;
use posenc::PairLayout;
use posenc_io::write_atomic;
use posenc_llama::{Llama, Precision};
use posenc_lm::corpus::{self, Corpus};
use posenc_lm::task::{evaluate, LengthEval};
use posenc_plot::chart::SeedPoint;
use posenc_plot::extrapolation::{loss_by_position, perplexity_by_length};
use serde::{Deserialize, Serialize};

/// Window lengths, in tokens.
const LENGTHS: [usize; 3] = [128, 512, 1024];

#[derive(Serialize, Deserialize)]
struct Variant {
    name: String,
    encoding: EncodingConfig,
    results: Vec<LengthEval>,
    seconds: f64,
}

fn rope(base: f64, position_scale: f64) -> EncodingConfig {
    EncodingConfig::new(RopeConfig {
        base,
        layout: PairLayout::Interleaved,
        rotary_fraction: 1.0,
        position_scale,
        scaling: None,
    })
}

fn main() -> Result<()> {
    posenc_kernels::keep_freed_memory();
    posenc_kernels::on_worker_thread(run)
}

/// The example's work, on one of rayon's threads (`on_worker_thread`).
fn run() -> Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "--from-records") {
        let dir = PathBuf::from(args.nth(1).unwrap_or("docs/smollm2-rope".into()));
        let path = dir.join("results.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let results: Vec<Variant> = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!("{} is not this example's results: {e}", path.display())
        })?;
        // An empty file would draw empty figures over the drawn ones.
        anyhow::ensure!(
            !results.is_empty(),
            "{} holds no rotation's results: nothing to draw",
            path.display()
        );
        plot(&results, &dir)?;
        println!("drew {}", dir.display());
        return Ok(());
    }
    let out = PathBuf::from(args.next().unwrap_or("docs/smollm2-rope".into()));
    let budget: usize = args.next().map_or(Ok(4096), |s| s.parse())?;
    let path = posenc_llama::model::fetched_smollm2()?;
    let llama = Llama::from_gguf(&path, Precision::F32, PairLayout::Interleaved, &Device::Cpu)?;
    let corpus = Corpus::load(&corpus::default_dir())?;
    let text = Corpus::stream(&corpus.test);
    let stream = llama.encode(&text)?;
    let theta = llama.config.rope_theta;
    let head_dim = llama.config.head_dim() as f64;
    let ntk = theta * 4f64.powf(head_dim / (head_dim - 2.0));
    let variants = [
        (format!("trained RoPE (θ = {theta})"), rope(theta, 1.0)),
        (
            "positions ÷ 2 (interpolation)".to_string(),
            rope(theta, 2.0),
        ),
        (
            "positions ÷ 4 (interpolation)".to_string(),
            rope(theta, 4.0),
        ),
        (
            format!("NTK-aware θ = {ntk:.0} (4× context)"),
            rope(ntk, 1.0),
        ),
        ("θ = 10000 (RoFormer's)".to_string(), rope(10_000.0, 1.0)),
        (
            "no rotation".to_string(),
            EncodingConfig::from_kind("none")?,
        ),
    ];
    println!(
        "{} test tokens ({} characters of {}); {budget} tokens per window length",
        stream.len(),
        text.len(),
        corpus
            .test
            .iter()
            .map(|w| w.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut results = Vec::new();
    let mut model = llama.model;
    for (name, encoding) in variants {
        model = model.with_encoding(&encoding)?;
        let start = Instant::now();
        let mut evals = Vec::new();
        for len in LENGTHS {
            let e = evaluate(&model, &stream, len, (budget / len).max(1), usize::MAX)?;
            println!(
                "{name:<40} {len:>5} tokens: perplexity {:8.2} ({} windows)",
                e.perplexity(),
                e.windows
            );
            evals.push(e);
        }
        results.push(Variant {
            name,
            encoding,
            results: evals,
            seconds: start.elapsed().as_secs_f64(),
        });
    }
    std::fs::create_dir_all(&out)?;
    write_atomic(
        &out.join("results.json"),
        &serde_json::to_vec_pretty(&results)?,
    )?;
    write_atomic(
        &out.join("results.md"),
        table(&results, stream.len()).as_bytes(),
    )?;
    plot(&results, &out)?;
    println!("wrote {}", out.display());
    Ok(())
}

fn table(results: &[Variant], tokens: usize) -> String {
    // Every variant scores the same windows: the first says how many.
    let scored: Vec<String> = results.first().map_or(Vec::new(), |v| {
        v.results
            .iter()
            .map(|e| format!("{} of {}", e.windows, e.len))
            .collect()
    });
    let mut md = format!(
        "SmolLM2-135M-Instruct (f32), perplexity on Shakespeare's test plays (of their {tokens} \
         tokens, non-overlapping windows spread evenly over them: {}), nothing retrained.\n\n\
         | rotation |",
        scored.join(", ")
    );
    for len in LENGTHS {
        md += &format!(" ppl @ {len} |");
    }
    md += "\n|---|";
    md += &"---:|".repeat(LENGTHS.len());
    md += "\n";
    for v in results {
        md += &format!("| {} |", v.name);
        for e in &v.results {
            md += &format!(" {:.2} |", e.perplexity());
        }
        md += "\n";
    }
    md
}

fn plot(results: &[Variant], out: &std::path::Path) -> Result<()> {
    // One pretrained model: no seeds.
    let by_length: Vec<(String, Vec<SeedPoint>)> = results
        .iter()
        .map(|v| {
            let points = v
                .results
                .iter()
                .map(|e| (e.len as f64, vec![e.perplexity()]));
            (v.name.clone(), points.collect())
        })
        .collect();
    let title = "SmolLM2-135M on Shakespeare: RoPE swapped, nothing retrained";
    perplexity_by_length(&out.join("perplexity.png"), title, &by_length)?;
    let by_position: Vec<(String, &[f64])> = results
        .iter()
        .filter_map(|v| Some((v.name.clone(), v.results.last()?.by_position.as_slice())))
        .collect();
    let title = format!(
        "loss at each position of a {}-token window",
        LENGTHS[LENGTHS.len() - 1]
    );
    Ok(loss_by_position(
        &out.join("by_position.png"),
        &title,
        &by_position,
        32,
    )?)
}
