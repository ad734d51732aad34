//! `posenc bench …`: speed measurements, reported with their configuration.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;
use posenc_train::bench::time_training_step;
use posenc_train::trainer::TrainConfig;
use posenc_transformer::Config;

/// `posenc bench`
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// One training step (forward, backward, AdamW): the reference configuration
    /// (d_model 256, 8 heads, 3+3 layers, d_ff 1024, vocab 1000, batch 64, length 24),
    /// then the toy translation model.
    Train {
        /// Timed steps (after 2 untimed).
        #[arg(long, default_value_t = 10)]
        steps: usize,
    },
}

impl BenchCommand {
    /// Runs the benchmark.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            BenchCommand::Train { steps } => {
                let toy = TrainConfig::default();
                let mut toy_model = toy.model.clone();
                (toy_model.src_vocab_size, toy_model.tgt_vocab_size) = (80, 81);
                writeln!(
                    out,
                    "| configuration | forward ms | backward ms | optimizer ms | step ms |"
                )?;
                writeln!(out, "|---|---:|---:|---:|---:|")?;
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
                }
                Ok(())
            }
        }
    }
}
