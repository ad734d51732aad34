//! `posenc lengthgen train|eval|experiment`: length generalization on an algorithmic
//! problem, one run, its evaluation, or one run per encoding and seed.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Format;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use posenc_lengthgen::experiment::{self, LengthScore, LengthgenExperimentConfig};
use posenc_lengthgen::problems::Problem;
use posenc_lengthgen::task::{Lengthgen, LengthgenConfig};
use posenc_train::fit::RunOptions;
use posenc_train::job::Job;

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

/// `posenc lengthgen …`
#[derive(Subcommand, Debug)]
pub enum LengthgenCommand {
    /// Train one decoder on a problem into a run directory.
    ///
    /// The decoder has 3 layers of width 64 with 4 heads (0.15 M parameters) unless
    /// --d-model, --layers or --heads say otherwise.
    #[command(
        after_help = "Examples:\n  posenc lengthgen train --task copy --encoding alibi --out runs/copy-alibi"
    )]
    Train(TrainArgs),
    /// Exact answers of a trained run at lengths inside and past its trained ones.
    #[command(
        after_help = "Examples:\n  posenc lengthgen eval --model runs/copy-alibi --lengths 5,10,20,40"
    )]
    Eval(EvalArgs),
    /// One decoder per encoding and seed, exact answers at lengths inside and past the
    /// trained ones, compared.
    ///
    /// The decoder has 3 layers of width 64 with 4 heads (0.15 M parameters) unless
    /// --d-model, --layers or --heads say otherwise. The lineup: every registered encoding
    /// (a learned table reaching the longest test), then sinusoidal, learned, rope, alibi
    /// and t5 at randomized positions over that reach, 3 seeds each; with --budget quick:
    /// none, sinusoidal, rope and alibi.
    #[command(
        after_help = "Examples:\n  posenc lengthgen experiment --task sort --budget quick\n  posenc lengthgen experiment --task copy --encodings none,rope,alibi --seeds 3 --out runs/copy"
    )]
    Experiment(ExperimentArgs),
}

impl super::TaskCommand for LengthgenCommand {
    const KIND: &'static str = <Lengthgen as Job<'static>>::KIND;
    const A_RUN: &'static str = "a lengthgen run";

    fn holds_older_run(dir: &Path) -> bool {
        posenc_lengthgen::task::LengthgenState::load(dir).is_ok()
    }

    fn study(path: &Path) -> Result<(String, serde_json::Value)> {
        let e = experiment::LengthgenExperiment::load(path)?;
        Ok((e.markdown(), serde_json::to_value(&e.records)?))
    }

    fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            Self::Train(a) => a.run(out),
            Self::Eval(a) => a.run(out),
            Self::Experiment(a) => a.run(out),
        }
    }

    fn trains(&self) -> bool {
        !matches!(self, Self::Eval(_))
    }

    fn resume(&self) -> Option<super::Resume> {
        match self {
            Self::Train(_) => Some(super::Resume::Train("lengthgen")),
            Self::Experiment(_) => Some(super::Resume::Rerun),
            _ => None,
        }
    }
}

/// How a run trains: shared by `train` and `experiment`.
#[derive(Args, Debug)]
pub struct RunSettings {
    /// Randomized positions for every encoding without its own: train at sorted random
    /// positions below this (Ruoss et al. 2023) [default: off].
    #[arg(long)]
    randomized_positions: Option<usize>,
    /// Trained instance lengths, `lo-hi` [default: 1-10; with --budget quick: 1-5].
    #[arg(long)]
    train_lengths: Option<Range>,
    /// Optimizer steps per run [default: 3000; with --budget quick: 1000].
    #[arg(long)]
    steps: Option<usize>,
    #[command(flatten)]
    schedule: super::ScheduleArgs,
    /// Instances per step.
    #[arg(long, help = format!(
        "Instances per step [default: {}]",
        LengthgenConfig::default().run.batch_size
    ))]
    batch_size: Option<usize>,
    #[command(flatten)]
    size: super::ModelSizeArgs<super::LengthgenSize>,
    #[command(flatten)]
    budget: super::BudgetArg,
    /// Where to train and evaluate: cpu; cuda or cuda:N (built with --features cuda);
    /// metal or metal:N (--features metal). The run directory is the same on any device.
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

impl RunSettings {
    /// The experiment's config for `task` with these settings and `seed` applied (its
    /// encodings and seeds left at their defaults).
    fn config(&self, task: Problem, seed: Option<u64>) -> LengthgenExperimentConfig {
        let mut cfg = match self.budget.quick() {
            true => LengthgenExperimentConfig::quick(task),
            false => LengthgenExperimentConfig::full(task),
        };
        if let Some(Range(lengths)) = self.train_lengths {
            cfg.test_lengths = experiment::default_test_lengths(lengths[1]);
        }
        self.apply_to(&mut cfg.base, None, seed);
        cfg
    }

    /// Sets the settings given on `run`, `task` among them: the run's own checks name a
    /// bad one.
    fn apply_to(&self, run: &mut LengthgenConfig, task: Option<Problem>, seed: Option<u64>) {
        let task = task.unwrap_or(run.task);
        if let Some(Range(lengths)) = self.train_lengths {
            *run = run.clone().for_task(task, lengths);
        } else if task != run.task {
            *run = run.clone().for_task(task, run.train_lengths);
        }
        run.randomized_positions = self.randomized_positions.or(run.randomized_positions);
        run.run.steps = self.steps.unwrap_or(run.run.steps);
        (run.lr, run.min_lr, run.run.warmup) =
            self.schedule.apply(run.lr, run.min_lr, run.run.warmup);
        run.run.batch_size = self.batch_size.unwrap_or(run.run.batch_size);
        self.size.apply_to(&mut run.model);
        run.run.seed = seed.unwrap_or(run.run.seed);
    }
}

/// `posenc lengthgen train`
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// The problem (`addition-hints`: each digit after an index hint of its place)
    /// [default: the config's].
    #[arg(long, value_parser = task_parser(), required_unless_present_any = ["config", "resume"])]
    task: Option<Problem>,
    /// A JSON run config, as --print-config prints it; the flags given override it.
    #[arg(long, conflicts_with_all = ["resume", "budget", "quick"])]
    config: Option<PathBuf>,
    /// The encoding: a kind, `kind:key=value:…` (`randomized=R` trains it at randomized
    /// positions) or a JSON object [default: the config's, else rope].
    #[arg(
        long,
        value_parser = super::EncodingParser::<posenc_train::labelled::Labelled>::new(),
        hide_possible_values = true
    )]
    encoding: Option<posenc_train::labelled::Labelled>,
    /// Seed of the weights and of the instances drawn.
    #[arg(long, help = format!(
        "Seed of the weights and of the instances drawn [default: the config's, else {}]",
        LengthgenConfig::default().run.seed
    ))]
    seed: Option<u64>,
    #[command(flatten)]
    settings: RunSettings,
    /// The run directory: new or empty (or, with --resume, a run to continue).
    #[arg(long, default_value = "runs/lengthgen")]
    out: PathBuf,
    /// Continue the run in --out (its config is kept; --steps may extend it).
    #[arg(long, conflicts_with = "force")]
    resume: bool,
    /// Replace the run already in --out (files posenc did not write are never touched).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    log_dir: super::LogDirArg,
    /// Print the full config this command would train with, as JSON that --config takes
    /// back, and train nothing.
    #[arg(long, conflicts_with = "resume")]
    print_config: bool,
    /// Output format: text (a summary line) or json (the run's state, alone on standard
    /// output).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

impl TrainArgs {
    /// The run this command trains: the config's, or the experiment's for --task, with
    /// the flags given applied.
    fn config(&self) -> Result<LengthgenConfig> {
        let mut run = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let mut run: LengthgenConfig = serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                self.settings.apply_to(&mut run, self.task, self.seed);
                run
            }
            None => {
                let task = self
                    .task
                    .context("give --task, or a --config that names one")?;
                let cfg = self.settings.config(task, self.seed);
                let entry = posenc_train::labelled::Labelled::new(
                    posenc::EncodingConfig::from_kind(DEFAULT_ENCODING)?,
                );
                cfg.run_config(&entry, cfg.base.run.seed)
            }
        };
        if let Some(entry) = &self.encoding {
            run.model.encoding = entry.encoding.clone();
            run.randomized_positions = entry.randomized_positions.or(run.randomized_positions);
        }
        run.validate()?;
        Ok(run)
    }

    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let request = super::TrainRequest {
            dir: &self.out,
            resume: self.resume,
            print_config: self.print_config,
            steps: self.settings.steps,
            device: &self.settings.device.0,
            opts: self.log_dir.options(self.settings.quiet, self.force),
        };
        let Some(state) = request.run::<Lengthgen>(|| self.config(), out)? else {
            return Ok(());
        };
        if self.format == Format::Json {
            return super::print_run(out, &self.out, &state);
        }
        let valid = state.history.last().map_or("–".to_string(), |r| {
            format!("{:.1}%", 100.0 * r.valid_exact)
        });
        writeln!(
            out,
            "{} on {} ({}): valid exact {valid} after {} steps in {:.0} s{}; saved in {}",
            state.config.model.encoding.kind(),
            state.config.task.name(),
            lengths(state.config.train_lengths),
            state.step,
            state.elapsed_s,
            super::peak_note(state.peak_rss_mb),
            self.out.display()
        )?;
        Ok(())
    }
}

/// The encoding `lengthgen train` trains without --encoding or a config.
const DEFAULT_ENCODING: &str = "rope";

/// `lo-hi`
fn lengths([lo, hi]: [usize; 2]) -> String {
    format!("lengths {lo}-{hi}")
}

/// `posenc lengthgen eval`
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The run directory (`posenc lengthgen train`, or one run of an experiment).
    #[arg(long)]
    model: PathBuf,
    /// Tested lengths, comma-separated [default: 16 lengths up to 4 × the longest trained].
    #[arg(long, value_delimiter = ',', alias = "test-lengths")]
    lengths: Option<Vec<usize>>,
    /// Test instances per length (the experiment's, drawn from the same seed).
    #[arg(long, default_value_t = 100)]
    test_instances: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: super::Format,
    /// Where to evaluate: cpu; cuda or cuda:N (built with --features cuda); metal or
    /// metal:N (--features metal).
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
}

impl EvalArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let (state, model) = posenc_lengthgen::task::load(&self.model, &self.device.0)
            .with_context(|| format!("loading the lengthgen run in {}", self.model.display()))
            .map_err(|e| super::for_task(e, &self.model, "lengthgen"))?;
        let cfg: &LengthgenConfig = &state.config;
        let hi = cfg.train_lengths[1];
        let test_lengths = self
            .lengths
            .unwrap_or_else(|| experiment::default_test_lengths(hi));
        experiment::check_tests(cfg, &test_lengths, self.test_instances)?;
        let tests = experiment::test_set(cfg.task, hi, &test_lengths, self.test_instances);
        let scores = experiment::evaluate(&model, cfg, &tests)?;
        match self.format {
            Format::Json => {
                let json = serde_json::json!({"config": cfg, "scores": scores});
                writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
            }
            Format::Text => write!(out, "{}", table(cfg, &scores))?,
        }
        Ok(())
    }
}

/// The scores of one run, a row per length.
fn table(cfg: &LengthgenConfig, scores: &[LengthScore]) -> String {
    let mut s = format!(
        "{} on {}, trained at {}\n\n| length | trained | instances | exact | token |\n|---:|---|---:|---:|---:|\n",
        cfg.model.encoding.kind(),
        cfg.task.name(),
        lengths(cfg.train_lengths)
    );
    for t in scores {
        s += &format!(
            "| {} | {} | {} | {:.1}% | {:.1}% |\n",
            t.length,
            if t.trained { "yes" } else { "no" },
            t.score.instances,
            100.0 * t.score.exact,
            100.0 * t.score.token
        );
    }
    s
}

/// `posenc lengthgen experiment`
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// The problem (`addition-hints`: each digit after an index hint of its place)
    /// [default: with --merge, the shards'; else none, it is required].
    #[arg(long, value_parser = task_parser(), required_unless_present = "merge")]
    task: Option<Problem>,
    /// The first seed: --seeds counts up from it.
    #[arg(long, help = format!(
        "The first seed: --seeds counts up from it [default: {}]",
        LengthgenConfig::default().run.seed
    ))]
    seed: Option<u64>,
    #[command(flatten)]
    settings: RunSettings,
    #[command(flatten)]
    grid: super::GridArgs,
    /// Tested lengths, comma-separated [default: 16 lengths up to 4 × the longest trained].
    #[arg(long, value_delimiter = ',', alias = "test-lengths")]
    lengths: Option<Vec<usize>>,
    /// Test instances per length [default: 100; with --budget quick: 64].
    #[arg(long)]
    test_instances: Option<usize>,
    /// Output directory: one run per encoding and seed, results.md, results.json and plots.
    #[arg(long, default_value = "runs/lengthgen-experiment")]
    out: PathBuf,
}

impl ExperimentArgs {
    /// The grid the flags ask for.
    fn config(&self) -> Result<LengthgenExperimentConfig> {
        let task = self.task.context("give --task")?;
        let mut cfg = self.settings.config(task, self.seed);
        if let Some(t) = &self.lengths {
            cfg.test_lengths = t.clone();
        }
        cfg.seeds = self.grid.seeds.unwrap_or(cfg.seeds);
        cfg.test_instances = self.test_instances.unwrap_or(cfg.test_instances);
        cfg.encodings = match &self.grid.encodings {
            Some(list) => list.0.clone(),
            None if self.settings.budget.quick() => cfg.encodings,
            None => cfg.default_encodings(),
        };
        Ok(cfg)
    }

    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let s = &self.settings;
        let mut given = vec![
            ("--task", self.task.is_some()),
            ("--seed", self.seed.is_some()),
            ("--lengths", self.lengths.is_some()),
            ("--test-instances", self.test_instances.is_some()),
            ("--randomized-positions", s.randomized_positions.is_some()),
            ("--train-lengths", s.train_lengths.is_some()),
            ("--steps", s.steps.is_some()),
            ("--batch-size", s.batch_size.is_some()),
            ("--budget", s.budget.quick()),
        ];
        given.extend(s.schedule.given());
        given.extend(s.size.given());
        let cfg = match self.grid.merged_config(&self.out, &given)? {
            Some(cfg) => cfg,
            None => self.config()?,
        };
        let opts = RunOptions {
            quiet: self.settings.quiet,
            ..RunOptions::default()
        };
        let run = cfg.on(&self.settings.device.0);
        self.grid.run(&run, &self.out, opts, out, |results| {
            let plots = posenc_lengthgen::figures::lengthgen(results, &self.out)?;
            Ok((results.table(), plots))
        })
    }
}
