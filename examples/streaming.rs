//! Generation past any window in constant memory: a model generates `--tokens` tokens
//! with a rolling key/value cache (`--window` positions, the first `--sinks` kept:
//! StreamingLLM), and, as the baseline, with the ordinary cache that grows with every token
//! (up to `--grow` tokens). Every `--every` tokens it records the decode speed over the last
//! block, the process's resident memory and the positions the cache holds.
//!
//! ```sh
//! cargo run --release --example streaming -- --model smollm2 --tokens 65536 --window 1024 \
//!   --sinks 4 --grow 8192 --out docs/long-context/streaming/generate.json
//! ```
//!
//! The record is a JSON list of tidy rows ([`posenc_lm::streaming::GenerateRow`],
//! `pandas.DataFrame(json.load(f))`), written atomically once both readings have run.

use std::time::Instant;

use anyhow::{bail, Context};
use posenc_lm::causal::CausalLm;
use posenc_lm::sample::{generate_observed, Sampling, Window};
use posenc_lm::streaming::GenerateRow as Row;
use posenc_transformer::Streaming;

fn status_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok());
    kb.unwrap_or(f64::NAN) / 1024.0
}

struct Settings {
    model: String,
    tokens: usize,
    window: usize,
    sinks: usize,
    grow: usize,
    every: usize,
    out: Option<std::path::PathBuf>,
}

fn run(
    lm: &CausalLm,
    s: &Settings,
    window: Option<Window>,
    tokens: usize,
) -> anyhow::Result<Vec<Row>> {
    let (cache, roll) = match window {
        Some(Window::Roll(r)) => ("rolling", Some(r)),
        _ => ("growing", None),
    };
    let prompt = lm.encode_prompt("Once upon a time")?;
    let sampling = Sampling {
        temperature: 0.8,
        seed: 0,
        ..Sampling::default()
    };
    let mut rows = Vec::new();
    let (mut count, mut block) = (0usize, Instant::now());
    generate_observed(
        &lm.model,
        &prompt,
        tokens,
        sampling,
        window,
        |_| {},
        |_| {
            count += 1;
            if count.is_multiple_of(s.every) {
                let seconds = block.elapsed().as_secs_f64();
                rows.push(Row {
                    model: s.model.clone(),
                    cache: cache.into(),
                    window: roll.map(|r| r.window()),
                    sinks: roll.map(|r| r.sinks()),
                    position: count,
                    tokens_per_s: s.every as f64 / seconds,
                    rss_mb: status_mb("VmRSS:"),
                    peak_rss_mb: status_mb("VmHWM:"),
                });
                eprintln!(
                    "{cache}: {count} tokens, {:.1} tokens/s, {:.0} MB",
                    s.every as f64 / seconds,
                    status_mb("VmRSS:")
                );
                block = Instant::now();
            }
            Ok(true)
        },
    )?;
    Ok(rows)
}

fn main() -> anyhow::Result<()> {
    let mut s = Settings {
        model: "smollm2".into(),
        tokens: 65_536,
        window: 1024,
        sinks: 4,
        grow: 8192,
        every: 1024,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--model" => s.model = value()?,
            "--tokens" => s.tokens = value()?.parse()?,
            "--window" => s.window = value()?.parse()?,
            "--sinks" => s.sinks = value()?.parse()?,
            "--grow" => s.grow = value()?.parse()?,
            "--every" => s.every = value()?.parse()?,
            "--out" => s.out = Some(value()?.into()),
            other => bail!(
                "unknown argument {other} (--model M --tokens N --window W --sinks S --grow N --every N --out FILE)"
            ),
        }
    }
    if s.every == 0 {
        bail!("--every must be at least 1");
    }
    let streaming = Streaming::new(s.sinks, s.window)?;
    let lm = CausalLm::load(
        &s.model,
        posenc_llama::Precision::Quantized,
        &candle_core::Device::Cpu,
    )?;
    let mut rows = run(&lm, &s, Some(Window::Roll(streaming)), s.tokens)?;
    if s.grow > 0 {
        rows.extend(run(&lm, &s, None, s.grow)?);
    }
    let json = serde_json::to_string_pretty(&rows)?;
    match &s.out {
        Some(path) => posenc_io::write_atomic(path, json.as_bytes())?,
        None => println!("{json}"),
    }
    Ok(())
}
