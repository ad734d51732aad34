//! `posenc lengthgen`: length generalization on an algorithmic problem, one run per
//! encoding and seed.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use posenc_lengthgen::experiment::{self, LengthgenExperimentConfig};
use posenc_lengthgen::problems::Problem;
use posenc_train::fit::RunOptions;

/// Two lengths `lo-hi` (or one, `hi`, for `1-hi`).
#[derive(Debug, Clone, Copy)]
pub struct Range(pub [usize; 2]);

impl std::str::FromStr for Range {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let parse = |t: &str| {
            t.trim()
                .parse::<usize>()
                .with_context(|| format!("`{t}` is not a length"))
        };
        Ok(Self(match s.split_once('-') {
            Some((lo, hi)) => [parse(lo)?, parse(hi)?],
            None => [1, parse(s)?],
        }))
    }
}

/// Parses `--task`, its possible values (shown in `--help`) taken from [`Problem::ALL`].
fn task_parser() -> impl clap::builder::TypedValueParser<Value = Problem> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Problem::ALL.map(Problem::name))
        .try_map(|name| name.parse::<Problem>())
}

/// `posenc lengthgen`
#[derive(Args, Debug)]
pub struct LengthgenArgs {
    /// The problem (`addition-hints`: each digit after an index hint of its place).
    #[arg(long, value_parser = task_parser())]
    task: Problem,
    /// Comma-separated encodings, each `kind`, `kind:key=value:…` (`label=` names it,
    /// `randomized=R` trains it at randomized positions) or a JSON object [default: every
    /// registered encoding, a learned table reaching the longest test, then sinusoidal,
    /// learned, rope, alibi and t5 at randomized positions over that reach; with --quick:
    /// none, sinusoidal, rope, alibi].
    #[arg(long)]
    encodings: Option<super::EncodingList>,
    /// Seeds per encoding.
    #[arg(long)]
    seeds: Option<usize>,
    /// The first seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Randomized positions for every encoding without its own: train at sorted random
    /// positions below this (Ruoss et al. 2023).
    #[arg(long)]
    randomized_positions: Option<usize>,
    /// Trained instance lengths, `lo-hi` [default: 1-10; with --quick: 1-5].
    #[arg(long)]
    train_lengths: Option<Range>,
    /// Tested lengths, comma-separated [default: 16 lengths up to 4 × the longest trained].
    #[arg(long, value_delimiter = ',')]
    test_lengths: Option<Vec<usize>>,
    /// Test instances per length [default: 100; with --quick: 64].
    #[arg(long)]
    test_instances: Option<usize>,
    /// Optimizer steps per run [default: 3000; with --quick: 1000].
    #[arg(long)]
    steps: Option<usize>,
    /// Peak learning rate [default: 1e-3].
    #[arg(long)]
    lr: Option<f64>,
    // The decoder's size (its defaults are in the command's long help).
    #[command(flatten)]
    size: super::ModelSizeArgs,
    /// A smaller budget: a few minutes on two cores.
    #[arg(long)]
    quick: bool,
    /// Output directory: one run per encoding and seed, results.md, results.json and plots.
    #[arg(long, default_value = "runs/lengthgen")]
    out: PathBuf,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

impl LengthgenArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let mut cfg = match self.quick {
            true => LengthgenExperimentConfig::quick(self.task),
            false => LengthgenExperimentConfig::full(self.task),
        };
        if let Some(Range(lengths)) = self.train_lengths {
            cfg.base = cfg.base.for_task(self.task, lengths);
            cfg.test_lengths = experiment::default_test_lengths(lengths[1]);
        }
        if let Some(t) = self.test_lengths {
            cfg.test_lengths = t;
        }
        cfg.base.randomized_positions = self.randomized_positions;
        cfg.base.steps = self.steps.unwrap_or(cfg.base.steps);
        if let Some(lr) = self.lr {
            cfg.base.min_lr = lr / 10.0;
            cfg.base.lr = lr;
        }
        self.size.apply_to(&mut cfg.base.model);
        cfg.base.seed = self.seed.unwrap_or(cfg.base.seed);
        cfg.seeds = self.seeds.unwrap_or(cfg.seeds);
        cfg.test_instances = self.test_instances.unwrap_or(cfg.test_instances);
        cfg.encodings = match self.encodings {
            Some(list) => list.0,
            None if self.quick => cfg.encodings,
            None => cfg.default_encodings(),
        };
        let opts = RunOptions {
            quiet: self.quiet,
            force: false,
            stop_after: None,
        };
        let result = experiment::run(&cfg, &self.out, opts)?;
        let plots = posenc_plot::lengthgen(&result, &self.out)?;
        super::report_experiment(out, &result.table(), &self.out, &plots)
    }
}
