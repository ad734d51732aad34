//! `posenc vision train|eval|experiment`: questions about synthetic scenes answered by a
//! small ViT, one run, its evaluation on other grids, or one run per encoding and seed.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Format;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use posenc_train::fit::RunOptions;
use posenc_train::job::Job;
use posenc_vision::experiment::{self, grid_name, VisionExperimentConfig};
use posenc_vision::task::{Vision, VisionConfig};

/// A grid `H,W` of patches, as `encoding show --grid` takes it.
fn grid(text: &str) -> std::result::Result<[usize; 2], String> {
    super::encoding::parse_grid(text).map(|(h, w)| [h, w])
}

/// `posenc vision …`
#[derive(Subcommand, Debug)]
pub enum VisionCommand {
    /// Train one ViT on questions about scenes of shapes into a run directory.
    ///
    /// The ViT has 3 layers of width 64 with 4 heads, trained on 6 × 6 patches of 4 × 4
    /// pixels unless a --config says otherwise.
    #[command(
        after_help = "Examples:\n  posenc vision train --encoding rope-2d --out runs/vision-rope-2d"
    )]
    Train(TrainArgs),
    /// Accuracy of a trained run on its grid and on larger ones.
    #[command(
        after_help = "Examples:\n  posenc vision eval --model runs/vision-rope-2d --grids 6,6 12,12"
    )]
    Eval(EvalArgs),
    /// One ViT per encoding and seed, tested on the trained grid and larger ones, compared.
    ///
    /// The lineup: none, sinusoidal-2d, learned-2d (resampled), rope-2d, rope-mixed, liere, mrope
    /// (time fixed) and rope over the patches in raster order, 3 seeds each; with --budget
    /// quick: none, sinusoidal-2d and rope-2d for 300 steps.
    #[command(
        after_help = "Examples:\n  posenc vision experiment --budget quick\n  posenc vision experiment --encodings rope-2d,rope-mixed --seeds 3 --out runs/vision"
    )]
    Experiment(ExperimentArgs),
}

impl super::TaskCommand for VisionCommand {
    const KIND: &'static str = <Vision as Job<'static>>::KIND;
    const A_RUN: &'static str = "a vision run";

    fn holds_older_run(_: &Path) -> bool {
        // Every vision run carries its kind.
        false
    }

    fn study(path: &Path) -> Result<(String, serde_json::Value)> {
        let e = experiment::VisionExperiment::load(path)?;
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
            Self::Train(_) => Some(super::Resume::Train("vision")),
            Self::Experiment(_) => Some(super::Resume::Rerun),
            _ => None,
        }
    }
}

/// How a run trains: shared by `train` and `experiment`.
#[derive(Args, Debug)]
pub struct RunSettings {
    /// The grid of patches trained on, `H,W` [default: 6,6].
    #[arg(long, value_name = "H,W", value_parser = grid)]
    grid: Option<[usize; 2]>,
    /// Optimizer steps per run [default: 1500; with --budget quick: 300].
    #[arg(long)]
    steps: Option<usize>,
    #[command(flatten)]
    schedule: super::ScheduleArgs,
    /// Examples per step.
    #[arg(long, help = format!(
        "Examples per step [default: {}]",
        VisionConfig::default().run.batch_size
    ))]
    batch_size: Option<usize>,
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
    fn config(&self, seed: Option<u64>) -> VisionExperimentConfig {
        let mut cfg = match self.budget.quick() {
            true => VisionExperimentConfig::quick(),
            false => VisionExperimentConfig::full(),
        };
        if let Some(g) = self.grid {
            cfg.test_grids = [2, 3, 4].map(|k| [g[0] * k / 2, g[1] * k / 2]).to_vec();
        }
        self.apply_to(&mut cfg.base, seed);
        cfg
    }

    fn apply_to(&self, run: &mut VisionConfig, seed: Option<u64>) {
        run.model.grid = self.grid.unwrap_or(run.model.grid);
        run.run.steps = self.steps.unwrap_or(run.run.steps);
        (run.lr, run.min_lr, run.run.warmup) =
            self.schedule.apply(run.lr, run.min_lr, run.run.warmup);
        run.run.batch_size = self.batch_size.unwrap_or(run.run.batch_size);
        run.run.seed = seed.unwrap_or(run.run.seed);
    }
}

/// `posenc vision train`
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// A JSON run config, as --print-config prints it; the flags given override it.
    #[arg(long, conflicts_with_all = ["resume", "budget", "quick"])]
    config: Option<PathBuf>,
    /// The encoding: a kind, `kind:key=value:…` or a JSON object [default: the config's,
    /// else rope-2d].
    #[arg(
        long,
        value_parser = super::EncodingParser::<posenc_train::labelled::Labelled>::new(),
        hide_possible_values = true
    )]
    encoding: Option<posenc_train::labelled::Labelled>,
    /// Seed of the weights and of the examples drawn.
    #[arg(long, help = format!(
        "Seed of the weights and of the examples drawn [default: the config's, else {}]",
        VisionConfig::default().run.seed
    ))]
    seed: Option<u64>,
    #[command(flatten)]
    settings: RunSettings,
    /// The run directory: new or empty (or, with --resume, a run to continue).
    #[arg(long, default_value = "runs/vision")]
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
    fn config(&self) -> Result<VisionConfig> {
        let experiment = self.settings.config(self.seed);
        let mut run = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let mut run: VisionConfig = serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                self.settings.apply_to(&mut run, self.seed);
                run
            }
            None => experiment.base.clone(),
        };
        if self.config.is_none() || self.encoding.is_some() {
            let entry = match &self.encoding {
                Some(e) => e.clone(),
                None => posenc_train::labelled::Labelled::new(posenc::EncodingConfig::from_kind(
                    "rope-2d",
                )?),
            };
            let with = VisionExperimentConfig {
                base: run,
                ..experiment
            };
            run = with.run_config(&entry, with.base.run.seed);
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
        let Some(state) = request.run::<Vision>(|| self.config(), out)? else {
            return Ok(());
        };
        if self.format == Format::Json {
            return super::print_run(out, &self.out, &state);
        }
        let valid = state.history.last().map_or("–".to_string(), |r| {
            format!("{:.1}%", 100.0 * r.valid_accuracy)
        });
        writeln!(
            out,
            "{} on {} patches: valid accuracy {valid} after {} steps in {:.0} s{}; saved in {}",
            state.config.model.encoding.kind(),
            grid_name(state.config.model.grid),
            state.step,
            state.elapsed_s,
            super::peak_note(state.peak_rss_mb),
            self.out.display()
        )?;
        Ok(())
    }
}

/// `posenc vision eval`
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The run directory (`posenc vision train`, or one run of an experiment).
    #[arg(long)]
    model: PathBuf,
    /// Tested grids, each `H,W` [default: the trained grid, 1.5 × and 2 × its side].
    #[arg(long, value_name = "H,W", value_parser = grid, num_args = 1..)]
    grids: Option<Vec<[usize; 2]>>,
    /// Test examples per grid (the experiment's, drawn from the same seed).
    #[arg(long, default_value_t = 512)]
    test_examples: usize,
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
        let (state, model) = posenc_vision::task::load(&self.model, &self.device.0)
            .with_context(|| format!("loading the vision run in {}", self.model.display()))
            .map_err(|e| super::for_task(e, &self.model, "vision"))?;
        let cfg = &state.config;
        let g = cfg.model.grid;
        let grids = self
            .grids
            .unwrap_or_else(|| [2, 3, 4].map(|k| [g[0] * k / 2, g[1] * k / 2]).to_vec());
        experiment::check_tests(cfg, &grids, self.test_examples)?;
        experiment::check_reach(&model, &grids)?;
        let tests = experiment::test_set(&grids, self.test_examples)?;
        let key = posenc_train::labelled::RunKey::new(
            cfg.model.encoding.kind(),
            &cfg.model.encoding,
            cfg.run.seed,
            None,
        );
        let records = experiment::evaluate(&model, &key, &tests)?;
        match self.format {
            Format::Json => {
                let json = serde_json::json!({"config": cfg, "records": records});
                writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
            }
            Format::Text => {
                writeln!(
                    out,
                    "{} trained on {}\n\n| grid | trained | question | examples | accuracy |\n|---|---|---|---:|---:|",
                    cfg.model.encoding.kind(),
                    grid_name(g)
                )?;
                for r in &records {
                    writeln!(
                        out,
                        "| {} | {} | {} | {} | {:.1}% |",
                        grid_name(r.grid),
                        if r.trained { "yes" } else { "no" },
                        r.question,
                        r.examples,
                        100.0 * r.accuracy
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// `posenc vision experiment`
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// The first seed: --seeds counts up from it.
    #[arg(long, help = format!(
        "The first seed: --seeds counts up from it [default: {}]",
        VisionConfig::default().run.seed
    ))]
    seed: Option<u64>,
    #[command(flatten)]
    settings: RunSettings,
    #[command(flatten)]
    grid: super::GridArgs,
    /// Tested grids, each `H,W` [default: 6,6 9,9 12,12; with --budget quick: 6,6 9,9].
    #[arg(long, value_name = "H,W", value_parser = grid, num_args = 1..)]
    grids: Option<Vec<[usize; 2]>>,
    /// Test examples per grid [default: 512; with --budget quick: 128].
    #[arg(long)]
    test_examples: Option<usize>,
    /// Output directory: one run per encoding and seed, results.md, results.json and plots.
    #[arg(long, default_value = "runs/vision-experiment")]
    out: PathBuf,
}

impl ExperimentArgs {
    fn config(&self) -> VisionExperimentConfig {
        let mut cfg = self.settings.config(self.seed);
        if let Some(g) = &self.grids {
            cfg.test_grids = g.clone();
        }
        cfg.seeds = self.grid.seeds.unwrap_or(cfg.seeds);
        cfg.test_examples = self.test_examples.unwrap_or(cfg.test_examples);
        if let Some(list) = &self.grid.encodings {
            cfg.encodings = list.0.clone();
        }
        cfg
    }

    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let s = &self.settings;
        let mut given = vec![
            ("--seed", self.seed.is_some()),
            ("--grids", self.grids.is_some()),
            ("--test-examples", self.test_examples.is_some()),
            ("--grid", s.grid.is_some()),
            ("--steps", s.steps.is_some()),
            ("--batch-size", s.batch_size.is_some()),
            ("--budget", s.budget.quick()),
        ];
        given.extend(s.schedule.given());
        let cfg = match self.grid.merged_config(&self.out, &given)? {
            Some(cfg) => cfg,
            None => self.config(),
        };
        let opts = RunOptions {
            quiet: self.settings.quiet,
            ..RunOptions::default()
        };
        let run = cfg.on(&self.settings.device.0);
        self.grid.run(&run, &self.out, opts, out, |results| {
            let plots = posenc_vision::figures::vision(results, &self.out)?;
            Ok((results.table(), plots))
        })
    }
}
