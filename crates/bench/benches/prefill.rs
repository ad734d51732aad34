//! Reading a prompt (prefill) of SmolLM2-135M-Instruct (Q4_1 GGUF): ours, quantized, against
//! llama.cpp's `llama-bench` on the same file and thread count, at 512 and 4 096 tokens.
//! The two alternate round by round, so machine noise hits both; the report is the median
//! tokens/s of each and their ratio, with our peak resident memory.
//!
//! ```sh
//! bash scripts/fetch_smollm2.sh && bash scripts/build_llama_cpp.sh
//! cargo bench -p posenc-bench --bench prefill            # 3 rounds
//! cargo bench -p posenc-bench --bench prefill -- 5       # more rounds
//! ```
//!
//! Without `.cache/llama.cpp/llama-bench` it says how to build it and reports ours alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use candle_core::{Device, Tensor};
use posenc_llama::model::fetched_smollm2;
use posenc_llama::{Llama, Precision};
use posenc_transformer::StackCache;

const LENGTHS: [usize; 2] = [512, 4096];

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// `llama-bench -p n -n 0`: its mean prompt tokens/s over one repetition.
fn llama_cpp(bench: &Path, model: &Path, n: usize, threads: usize) -> Result<f64> {
    let out = Command::new(bench)
        .args(["-m"])
        .arg(model)
        .args(["-p", &n.to_string(), "-n", "0", "-r", "1", "-o", "json"])
        .args(["-t", &threads.to_string()])
        .output()
        .with_context(|| format!("running {}", bench.display()))?;
    ensure!(
        out.status.success(),
        "llama-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    runs[0]["avg_ts"]
        .as_f64()
        .context("llama-bench printed no avg_ts")
}

/// Our prefill of `ids` (read in the model's chunks), in tokens/s.
fn ours(llama: &Llama, ids: &[u32]) -> Result<f64> {
    let x = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
    let mut cache = StackCache::with_capacity(ids.len());
    let t = Instant::now();
    llama.model.step(&x, &mut cache)?;
    Ok(ids.len() as f64 / t.elapsed().as_secs_f64())
}

fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

fn main() -> Result<()> {
    posenc_transformer::keep_freed_memory();
    let rounds = posenc_bench::rounds(3);
    let threads = candle_core::utils::get_num_threads();
    let path = fetched_smollm2()?;
    let llama = Llama::from_gguf(
        &path,
        Precision::Quantized,
        posenc::PairLayout::Interleaved,
        &Device::Cpu,
    )?;
    let bench = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.cache/llama.cpp/llama-bench"
    ));
    let bench = bench.is_file().then_some(bench);
    if bench.is_none() {
        println!("llama.cpp is not built: run scripts/build_llama_cpp.sh to compare against it");
    }
    // llama-bench's prompt is random tokens; ours is text, which costs the same per token.
    let sentence = "The positional encoding tells each attention head where a token stands. ";
    let ids = llama.encode(&sentence.repeat(400))?;
    println!("SmolLM2-135M-Instruct Q4_1, {threads} threads, {rounds} rounds, medians");
    println!("| prompt | ours tokens/s | llama.cpp tokens/s | ours ÷ llama.cpp |");
    println!("|---:|---:|---:|---:|");
    for n in LENGTHS {
        ensure!(ids.len() >= n, "the text has only {} tokens", ids.len());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            a.push(ours(&llama, &ids[..n])?);
            if let Some(bench) = &bench {
                b.push(llama_cpp(bench, &path, n, threads)?);
            }
        }
        let (a, b) = (median(a), (!b.is_empty()).then(|| median(b)));
        println!(
            "| {n} | {a:.0} | {} | {} |",
            b.map_or("–".into(), |b| format!("{b:.0}")),
            b.map_or("–".into(), |b| format!("{:.2}×", a / b))
        );
    }
    println!(
        "our peak resident memory: {} MB",
        peak_rss_mb().map_or("?".into(), |m| format!("{m:.0}"))
    );
    Ok(())
}
