//! `posenc bench …`: speed measurements, reported with their configuration.

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use posenc_train::bench::time_training_step;
use posenc_train::trainer::TrainConfig;
use posenc_transformer::Config;
use serde::Deserialize;

/// `posenc bench`
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// One training step (forward, backward, AdamW): the reference configuration
    /// (d_model 256, 8 heads, 3+3 layers, d_ff 1024, vocab 1000, batch 64, length 24),
    /// then the toy translation model. When a Python with PyTorch is found
    /// ($POSENC_PYTHON, else .venv/bin/python, else python3), the same reference step in
    /// PyTorch (scripts/bench_train_torch.py) runs in the same invocation and the ratio is
    /// printed.
    Train {
        /// Timed steps (after 2 untimed).
        #[arg(long, default_value_t = 10)]
        steps: usize,
        /// Do not run the PyTorch comparison.
        #[arg(long)]
        no_torch: bool,
    },
    /// Sentence embeddings of 256 fixed sentences of about 100 word pieces in batches of
    /// 32 with all-MiniLM-L6-v2 (scripts/fetch_minilm.sh); with a Python that has PyTorch
    /// and transformers, the same embeddings by transformers' `BertModel`
    /// (scripts/bench_embed_torch.py) in the same invocation, and the ratio.
    Embed {
        /// The sentence-transformers model directory [default: .cache/all-MiniLM-L6-v2].
        #[arg(long)]
        model: Option<std::path::PathBuf>,
        /// Timed passes over all sentences (after 1 untimed).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Do not run the PyTorch comparison.
        #[arg(long)]
        no_torch: bool,
    },
}

/// The benchmark's sentences: as many and as long as the speed issue's table.
const EMBED_SENTENCES: usize = 256;
const EMBED_WORDS: usize = 90;
const EMBED_BATCH: usize = 32;

impl BenchCommand {
    /// Runs the benchmark.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            BenchCommand::Embed {
                model,
                rounds,
                no_torch,
            } => bench_embed(model, rounds, no_torch, out),
            BenchCommand::Train { steps, no_torch } => {
                let toy = TrainConfig::default();
                let mut toy_model = toy.model.clone();
                (toy_model.src_vocab_size, toy_model.tgt_vocab_size) = (80, 81);
                writeln!(
                    out,
                    "| configuration | forward ms | backward ms | optimizer ms | step ms |"
                )?;
                writeln!(out, "|---|---:|---:|---:|---:|")?;
                let mut reference = None;
                for (name, cfg, batch, len) in [
                    (
                        "reference (d256, 3+3, batch 64 × 24)",
                        Config::benchmark_reference(),
                        64,
                        24,
                    ),
                    (
                        "toy (d64, 2+2, batch 64 × 20)",
                        toy_model,
                        toy.batch_size,
                        20,
                    ),
                ] {
                    let t = time_training_step(&cfg, batch, len, 2, steps)?;
                    writeln!(
                        out,
                        "| {name} | {:.1} | {:.1} | {:.1} | {:.1} |",
                        t.forward_ms, t.backward_ms, t.optimizer_ms, t.total_ms
                    )?;
                    if reference.is_none() {
                        reference = Some(t);
                    }
                }
                if no_torch {
                    return Ok(());
                }
                let ours = reference.context("the reference configuration was not timed")?;
                match torch_reference_step(steps) {
                    Ok(torch) => {
                        writeln!(
                            out,
                            "| PyTorch {} ({} threads), reference | {:.1} | {:.1} | {:.1} | {:.1} |",
                            torch.version, torch.threads, torch.forward_ms, torch.backward_ms,
                            torch.optimizer_ms, torch.total_ms
                        )?;
                        writeln!(
                            out,
                            "\nspeed relative to PyTorch (its time / ours, > 1: faster): step {:.2}×, forward {:.2}×, backward {:.2}×",
                            torch.total_ms / ours.total_ms,
                            torch.forward_ms / ours.forward_ms,
                            torch.backward_ms / ours.backward_ms
                        )?;
                    }
                    Err(e) => skipped(out, &e)?,
                }
                Ok(())
            }
        }
    }
}

/// PyTorch's timing of the reference step, as `scripts/bench_train_torch.py` prints it.
#[derive(Debug, Deserialize)]
struct TorchTiming {
    forward_ms: f64,
    backward_ms: f64,
    optimizer_ms: f64,
    total_ms: f64,
    #[serde(rename = "torch")]
    version: String,
    threads: usize,
}

fn skipped(out: &mut impl Write, e: &anyhow::Error) -> Result<()> {
    writeln!(
        out,
        "\nPyTorch comparison skipped: {e:#}\n(install it with: python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt)"
    )?;
    Ok(())
}

fn bench_embed(
    model: Option<std::path::PathBuf>,
    rounds: usize,
    no_torch: bool,
    out: &mut impl Write,
) -> Result<()> {
    use posenc_embed::sentence::{benchmark_sentences, SentenceEncoder};
    posenc::limits::check_positive("rounds", rounds, 1000)?;
    let dir = match model {
        Some(dir) => dir,
        None => posenc_embed::resolve::fetched_minilm()?,
    };
    let encoder = SentenceEncoder::load(&dir)?;
    let sentences = benchmark_sentences(EMBED_SENTENCES, EMBED_WORDS);
    let first = encoder.embed(&sentences, EMBED_BATCH)?;
    let checksum: f64 = first.iter().flatten().map(|x| f64::from(x.abs())).sum();
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = std::time::Instant::now();
        encoder.embed(&sentences, EMBED_BATCH)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let ours = times[times.len() / 2];
    let threads = candle_core::utils::get_num_threads();
    writeln!(
        out,
        "{EMBED_SENTENCES} sentences of {EMBED_WORDS} words, batches of {EMBED_BATCH}, median of {rounds} passes, {threads} threads"
    )?;
    writeln!(out, "| implementation | ms per pass |\n|---|---:|")?;
    writeln!(out, "| posenc | {ours:.0} |")?;
    if no_torch {
        return Ok(());
    }
    let mut file = tempfile::NamedTempFile::new().context("creating a temporary file")?;
    file.write_all(&serde_json::to_vec(&sentences)?)
        .context("writing the sentences to a temporary file")?;
    let torch = run_torch::<TorchEmbedTiming>(
        "scripts/bench_embed_torch.py",
        &[
            ("--model", dir.display().to_string()),
            ("--sentences", file.path().display().to_string()),
            ("--batch", EMBED_BATCH.to_string()),
            ("--rounds", rounds.to_string()),
            ("--threads", threads.to_string()),
        ],
    );
    match torch {
        Ok(t) => {
            writeln!(
                out,
                "| PyTorch {} ({} threads), transformers' BertModel | {:.0} |",
                t.version, t.threads, t.median_ms
            )?;
            writeln!(
                out,
                "\nspeed relative to PyTorch (its time / ours, > 1: faster): {:.2}×; embeddings' checksums {checksum:.4} and {:.4}",
                t.median_ms / ours,
                t.checksum
            )?;
        }
        Err(e) => skipped(out, &e)?,
    }
    Ok(())
}

/// PyTorch's timing of the embeddings, as `scripts/bench_embed_torch.py` prints it.
#[derive(Debug, Deserialize)]
struct TorchEmbedTiming {
    median_ms: f64,
    checksum: f64,
    #[serde(rename = "torch")]
    version: String,
    threads: usize,
}

/// Runs a committed PyTorch script with a Python that has PyTorch ($POSENC_PYTHON, else
/// .venv/bin/python, else python3) and reads the one JSON line it prints.
fn run_torch<T: serde::de::DeserializeOwned>(script: &str, args: &[(&str, String)]) -> Result<T> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("POSENC_PYTHON")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(root.join(".venv/bin/python")).filter(|p| p.exists()))
        .unwrap_or_else(|| "python3".into());
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(root.join(script));
    for (flag, value) in args {
        cmd.arg(flag).arg(value);
    }
    let out = cmd
        .stderr(std::process::Stdio::piped())
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").to_string();
        bail!(
            "{} could not run the PyTorch script: {last}",
            python.display()
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).context("reading the PyTorch script's output")
}

/// Runs the PyTorch script on the reference configuration with as many threads as candle
/// uses.
fn torch_reference_step(steps: usize) -> Result<TorchTiming> {
    let cfg = Config::benchmark_reference();
    let threads = candle_core::utils::get_num_threads();
    let mut args = Vec::new();
    for (flag, value) in [
        ("--d-model", cfg.d_model),
        ("--heads", cfg.heads),
        ("--layers", cfg.encoder_layers),
        ("--d-ff", cfg.d_ff),
        ("--vocab", cfg.src_vocab_size),
        ("--batch", 64),
        ("--len", 24),
        ("--warmup", 2),
        ("--steps", steps),
        ("--threads", threads),
    ] {
        args.push((flag, value.to_string()));
    }
    run_torch("scripts/bench_train_torch.py", &args)
}
