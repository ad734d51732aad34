//! `posenc kotoba experiment`: the toy translation model once per positional encoding.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use posenc_kotoba::experiment::{self, ExperimentConfig};
use posenc_train::fit::RunOptions;

/// `posenc kotoba experiment`
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// Comma-separated encodings, each `kind`, `kind:key=value:…` (`label=` names it,
    /// `randomized=R` trains it at randomized positions) or a JSON object [default: every
    /// kind; with --budget quick: none,sinusoidal].
    #[arg(long)]
    encodings: Option<super::EncodingList>,
    /// Seeds per encoding: each row is then their mean ± standard deviation.
    #[arg(long)]
    seeds: Option<usize>,
    /// Optimizer steps per encoding [default: 1000; with --budget quick: 500].
    #[arg(long)]
    steps: Option<usize>,
    /// Seed of weights and batch order (the data has its own, fixed seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Randomized positions: train at sorted random positions below this (Ruoss et al. 2023).
    #[arg(long)]
    randomized_positions: Option<usize>,
    /// Output directory: one run per encoding, results.md, results.json and plots.
    #[arg(long, default_value = "runs/experiment")]
    out: PathBuf,
    #[command(flatten)]
    budget: super::BudgetArg,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

impl ExperimentArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let mut cfg = if self.budget.quick() {
            ExperimentConfig::quick()
        } else {
            ExperimentConfig::full()
        };
        if let Some(e) = self.encodings {
            cfg.encodings = e.0;
        }
        cfg.base.steps = self.steps.unwrap_or(cfg.base.steps);
        cfg.base.seed = self.seed.unwrap_or(cfg.base.seed);
        cfg.base.randomized_positions = self.randomized_positions;
        cfg.seeds = self.seeds.unwrap_or(cfg.seeds);
        let opts = RunOptions {
            quiet: self.quiet,
            force: false,
            stop_after: None,
        };
        let result = experiment::run(&cfg, &self.out, opts)?;
        let plots = posenc_kotoba::figures::experiment(&result, &self.out)?;
        super::report_experiment(out, &result.table(), &self.out, &plots)
    }
}
