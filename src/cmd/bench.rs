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
}

impl BenchCommand {
    /// Runs the benchmark.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
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
                    Err(e) => writeln!(
                        out,
                        "\nPyTorch comparison skipped: {e:#}\n(install it with: python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt)"
                    )?,
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

/// Runs the PyTorch script on the reference configuration with as many threads as candle
/// uses.
fn torch_reference_step(steps: usize) -> Result<TorchTiming> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("POSENC_PYTHON")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(root.join(".venv/bin/python")).filter(|p| p.exists()))
        .unwrap_or_else(|| "python3".into());
    let cfg = Config::benchmark_reference();
    let threads = candle_core::utils::get_num_threads();
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(root.join("scripts/bench_train_torch.py"));
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
        cmd.arg(flag).arg(value.to_string());
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
