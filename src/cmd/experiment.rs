//! `posenc kotoba experiment`: the toy translation model once per positional encoding.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use posenc_kotoba::experiment::ExperimentConfig;
use posenc_train::fit::RunOptions;

/// `posenc kotoba experiment`
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    #[command(flatten)]
    grid: super::GridArgs,
    /// Optimizer steps per encoding [default: 1000; with --budget quick: 500].
    #[arg(long)]
    steps: Option<usize>,
    /// Seed of weights and batch order, the first of several (the data has its own, fixed
    /// seed).
    #[arg(long, help = format!(
        "Seed of weights and batch order, the first of several (the data has its own, fixed \
         seed) [default: {}]",
        ExperimentConfig::full().base.run.seed
    ))]
    seed: Option<u64>,
    /// Randomized positions: train at sorted random positions below this (Ruoss et al. 2023)
    /// [default: off, consecutive positions from 0].
    #[arg(long)]
    randomized_positions: Option<usize>,
    /// Output directory: one run per encoding, results.md, results.json and plots.
    #[arg(long, default_value = "runs/kotoba-experiment")]
    out: PathBuf,
    #[command(flatten)]
    budget: super::BudgetArg,
    /// Where to train and evaluate: cpu; cuda or cuda:N (built with --features cuda);
    /// metal or metal:N (--features metal). The run directory is the same on any device.
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

impl ExperimentArgs {
    /// The grid the flags ask for.
    fn config(&self) -> ExperimentConfig {
        let mut cfg = if self.budget.quick() {
            ExperimentConfig::quick()
        } else {
            ExperimentConfig::full()
        };
        if let Some(e) = &self.grid.encodings {
            cfg.encodings = e.0.clone();
        }
        cfg.base.run.steps = self.steps.unwrap_or(cfg.base.run.steps);
        cfg.base.run.seed = self.seed.unwrap_or(cfg.base.run.seed);
        cfg.base.randomized_positions = self.randomized_positions;
        cfg.seeds = self.grid.seeds.unwrap_or(cfg.seeds);
        cfg
    }

    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let given = [
            ("--steps", self.steps.is_some()),
            ("--seed", self.seed.is_some()),
            (
                "--randomized-positions",
                self.randomized_positions.is_some(),
            ),
            ("--budget", self.budget.quick()),
        ];
        let cfg = match self.grid.merged_config(&self.out, &given)? {
            Some(cfg) => cfg,
            None => self.config(),
        };
        let opts = RunOptions {
            quiet: self.quiet,
            ..RunOptions::default()
        };
        self.grid
            .run(&cfg.on(&self.device.0), &self.out, opts, out, |results| {
                let plots = posenc_kotoba::figures::experiment(results, &self.out)?;
                Ok((results.table(), plots))
            })
    }
}
