//! The one training loop. Every task (translation, the language model, the algorithmic
//! length-generalization tasks) runs through it; a task only says what a
//! step's loss is and how to validate ([`Task`]). Its runs on disk (starting, continuing,
//! opening one) are [`crate::job`]'s.
//!
//! ```text
//! for step in state.step + 1 ..= steps:
//!     dropout::seed(seed, step)                 masks: a function of (seed, step)
//!     loss = task.loss(step)                    batch: a function of (seed, step)
//!     loss not finite         → Err(Diverged { step, loss })
//!     AdamW step at lr(step)
//!     loss, lr, tokens/s logged               TensorBoard and JSON lines (crate::logs)
//!     step % eval_every == 0 or last → task.validate(…) appended to the history, logged
//!     step % save_every == 0 or last → checkpoint (atomically, in the run directory)
//! ```
//!
//! Because nothing a step draws depends on the steps before it, a run resumed from any
//! checkpoint is bit-identical to one that never stopped: the loop keeps no state outside
//! [`RunState`], which every checkpoint saves (the training losses since the last
//! validation included, so a resumed run's next record averages the same steps).

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Tensor;
use candle_nn::VarMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::logs::ScalarLog;
use crate::optim::{AdamW, AdamWConfig};
use crate::rundir::{self, RunDir};
pub use crate::stop::{request_stop, stop_requested, Diverged, Interrupted};

/// What every task's training run is set with besides its model, data and learning-rate
/// curve: how long, on how many examples a step, how fast the learning rate warms up, the
/// optimizer, and how often to validate and save.
///
/// A task's config holds it as one field, flattened, so that its file keeps these as
/// top-level keys, and a key the file leaves out takes the task's own default:
///
/// ```
/// use posenc_train::fit::RunSchedule;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Serialize, Deserialize)]
/// #[serde(default, deny_unknown_fields)]
/// struct MyConfig {
///     lr: f64,
///     #[serde(flatten, deserialize_with = "RunSchedule::or_defaults_of::<MyConfig, _>")]
///     run: RunSchedule,
/// }
///
/// impl Default for MyConfig {
///     fn default() -> Self {
///         Self { lr: 1e-3, run: RunSchedule { steps: 600, ..RunSchedule::default() } }
///     }
/// }
///
/// posenc_train::settings!(MyConfig, |cfg, _step| cfg.lr);
///
/// let cfg: MyConfig = serde_json::from_str(r#"{"lr": 0.01, "seed": 7}"#)?;
/// assert_eq!((cfg.run.seed, cfg.run.steps), (7, 600));
/// assert!(serde_json::from_str::<MyConfig>(r#"{"stpes": 5}"#).is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunSchedule {
    /// Seed of the weights, the batches and the dropout masks.
    pub seed: u64,
    /// Optimizer steps in all.
    pub steps: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// Warm-up steps, over which the learning rate rises to its peak.
    pub warmup: usize,
    /// The optimizer's settings.
    pub adam: AdamWConfig,
    /// Validate every this many steps (and at the last).
    pub eval_every: usize,
    /// Save a checkpoint every this many steps (and at the last).
    pub save_every: usize,
}

impl Default for RunSchedule {
    /// Seed 0, 1000 steps of 32 examples, 100 warm-up steps, AdamW's defaults, validating
    /// every 100 steps and saving every 500. Tasks set their own.
    fn default() -> Self {
        Self {
            seed: 0,
            steps: 1000,
            batch_size: 32,
            warmup: 100,
            adam: AdamWConfig::default(),
            eval_every: 100,
            save_every: 500,
        }
    }
}

/// The keys of a [`RunSchedule`] a file gives; the others come from a task's defaults.
#[derive(Deserialize)]
struct GivenSchedule {
    seed: Option<u64>,
    steps: Option<usize>,
    batch_size: Option<usize>,
    warmup: Option<usize>,
    adam: Option<AdamWConfig>,
    eval_every: Option<usize>,
    save_every: Option<usize>,
}

impl RunSchedule {
    /// Checks every value: at least one step (at most 2⁴⁰), a batch of 1 to 65 536
    /// examples, intervals of at least one step, and the optimizer's settings.
    ///
    /// # Errors
    /// The first value out of range, by name.
    pub fn validate(&self) -> Result<()> {
        use posenc::limits::check;
        posenc_error::ensure!(
            self.steps > 0,
            "steps must be at least 1: a run of 0 steps has no loss to report"
        );
        check("steps", self.steps, 1 << 40)?;
        posenc_error::ensure!(self.batch_size > 0, "batch_size must be at least 1");
        check("batch_size", self.batch_size, 1 << 16)?;
        posenc_error::ensure!(
            self.eval_every > 0 && self.save_every > 0,
            "eval_every and save_every must be at least 1"
        );
        self.adam.validate()
    }

    /// Reads the schedule keys a config file gives (as the flattened field of the config
    /// `C`), each one it leaves out from `C::default()`'s: use it as
    /// `#[serde(flatten, deserialize_with = "RunSchedule::or_defaults_of::<C, _>")]`.
    ///
    /// # Errors
    /// A key of the wrong type. Keys that are not the config's are the config's to refuse
    /// (`#[serde(deny_unknown_fields)]` on it).
    pub fn or_defaults_of<'de, C, D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        C: Settings + Default,
        D: serde::Deserializer<'de>,
    {
        let given = GivenSchedule::deserialize(deserializer)?;
        let d = *C::default().run();
        Ok(Self {
            seed: given.seed.unwrap_or(d.seed),
            steps: given.steps.unwrap_or(d.steps),
            batch_size: given.batch_size.unwrap_or(d.batch_size),
            warmup: given.warmup.unwrap_or(d.warmup),
            adam: given.adam.unwrap_or(d.adam),
            eval_every: given.eval_every.unwrap_or(d.eval_every),
            save_every: given.save_every.unwrap_or(d.save_every),
        })
    }
}

/// Says on standard error when a run's warm-up does not end within its steps: its
/// learning rate then never reaches the peak asked for.
pub fn warn_schedule(run: &RunSchedule) {
    let (warmup, steps) = (run.warmup, run.steps);
    if warmup >= steps {
        crate::log(&format!(
            "warning: the warm-up of {warmup} steps does not end within the run's {steps}: \
             the learning rate never reaches its peak (--warmup sets it)"
        ));
    }
}

/// What the loop reads from a task's config: its [`RunSchedule`] and its learning rate at
/// each step.
pub trait Settings: Clone + Serialize + DeserializeOwned {
    /// The run's schedule.
    fn run(&self) -> &RunSchedule;
    /// The run's schedule, to change (a resumed run may go further).
    fn run_mut(&mut self) -> &mut RunSchedule;
    /// The learning rate of step `step` (counted from 1).
    fn lr(&self, step: usize) -> f64;
    /// Seed of the weights, the batches and the dropout masks.
    fn seed(&self) -> u64 {
        self.run().seed
    }
    /// Optimizer steps in all.
    fn steps(&self) -> usize {
        self.run().steps
    }
    /// Sets the steps in all (a resumed run may go further).
    fn set_steps(&mut self, steps: usize) {
        self.run_mut().steps = steps;
    }
}

/// Implements [`Settings`] for a config whose [`RunSchedule`] is its field `run`, its
/// learning rate at step `step` (from 1) given by `lr`:
/// `settings!(MyConfig, |cfg, step| cfg.schedule().lr(step - 1));`.
#[macro_export]
macro_rules! settings {
    ($config:ty, |$cfg:ident, $step:ident| $lr:expr) => {
        impl $crate::fit::Settings for $config {
            fn run(&self) -> &$crate::fit::RunSchedule {
                &self.run
            }
            fn run_mut(&mut self) -> &mut $crate::fit::RunSchedule {
                &mut self.run
            }
            fn lr(&self, $step: usize) -> f64 {
                let $cfg = self;
                $lr
            }
        }
    };
}

/// One validation record of a task's history.
pub trait Validation: Clone + Serialize + DeserializeOwned {
    /// The step it was taken at.
    fn step(&self) -> usize;
    /// What a progress line shows after the step, e.g. `train loss 1.2  valid loss 1.3`.
    fn summary(&self) -> String;
    /// The curves it adds to the run's logs ([`crate::logs`]), by TensorBoard tag:
    /// `valid/loss`, `valid/exact`, and the mean training loss since the last record as
    /// `train/loss_mean`.
    fn scalars(&self) -> Vec<(&'static str, f64)>;
}

/// The loss of one training step.
#[derive(Debug)]
pub struct StepLoss {
    /// The scalar loss to differentiate.
    pub loss: Tensor,
    /// How many tokens the step trained on (for throughput).
    pub tokens: usize,
}

/// What a task gives the loop.
pub trait Task {
    /// The run's settings (`trainer.json`'s `config`).
    type Config: Settings;
    /// One validation record.
    type Record: Validation;

    /// The trainable weights.
    fn varmap(&self) -> &VarMap;

    /// The loss of step `step` (counted from 1) on its batch, which must be a function of
    /// the seed and `step` alone.
    ///
    /// # Errors
    /// Whatever building the batch or the forward pass refuses.
    fn loss(&mut self, cfg: &Self::Config, step: usize) -> Result<StepLoss>;

    /// Validates the weights after `step`, given the mean training loss since the last
    /// record and the seconds trained so far; `None` if the task has nothing to validate on.
    ///
    /// # Errors
    /// Whatever the evaluation refuses.
    fn validate(
        &mut self,
        cfg: &Self::Config,
        step: usize,
        train_loss: f64,
        elapsed_s: f64,
    ) -> Result<Option<Self::Record>>;
}

/// A run's config and progress: `trainer.json`, and the header of every checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunState<C, R> {
    /// The run's id (as in `manifest.json` and the weight files; empty for a run held only
    /// in memory).
    pub run: String,
    /// The run's settings.
    pub config: C,
    /// Steps done.
    pub step: usize,
    /// Validation history.
    pub history: Vec<R>,
    /// Training seconds so far, over every resumption.
    pub elapsed_s: f64,
    /// Tokens trained on so far.
    pub tokens: usize,
    /// Sum and count of the training losses since the last record, so a resumed run's
    /// next record averages the same steps as an uninterrupted one's (absent in runs
    /// written before it was saved: then zero).
    #[serde(default)]
    pub pending: (f64, usize),
    /// The process's peak resident memory while it trained this run, in MB: the largest
    /// over every resumption (Linux's `VmHWM`, reset as the loop starts, after the memory
    /// freed before is given back; on a GPU, the host's side only). None where it cannot
    /// be read, and in runs written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_mb: Option<f64>,
    /// Where its logs go when `--log-dir` placed them (absolute), so that resuming
    /// continues them there; None: the run directory's `logs/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_dir: Option<PathBuf>,
}

impl<C, R> RunState<C, R> {
    /// A run at step 0.
    pub fn new(run: String, config: C) -> Self {
        Self {
            run,
            config,
            step: 0,
            history: Vec::new(),
            elapsed_s: 0.0,
            tokens: 0,
            pending: (0.0, 0),
            peak_rss_mb: None,
            log_dir: None,
        }
    }

    /// Training throughput in tokens per second.
    pub fn tokens_per_second(&self) -> f64 {
        self.tokens as f64 / self.elapsed_s.max(1e-9)
    }
}

impl<C: Settings, R: Validation> RunState<C, R> {
    /// Reads `trainer.json` from a run directory.
    ///
    /// # Errors
    /// If it is missing or not a state of this task's runs.
    pub fn load(dir: &Path) -> Result<Self> {
        rundir::read_trainer(dir)
    }
}

impl<C: Settings, R: Validation> rundir::Progress for RunState<C, R> {
    fn run(&self) -> &str {
        &self.run
    }
    fn step(&self) -> usize {
        self.step
    }
    fn steps(&self) -> usize {
        self.config.steps()
    }
    fn set_steps(&mut self, steps: usize) {
        self.config.set_steps(steps);
    }
}

/// How to run: what every task's training and every experiment take.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// No progress bar or log lines.
    pub quiet: bool,
    /// Replace a run already in the output directory (never files posenc did not write).
    pub force: bool,
    /// Stop after this many steps in all, with a checkpoint, as an interrupted run would
    /// (resuming then continues it exactly); `None`: run to the configured steps.
    pub stop_after: Option<usize>,
    /// Where the run's logs go ([`crate::logs`]); `None`: where the run has kept them, at
    /// first its directory's `logs/`.
    pub log_dir: Option<PathBuf>,
}

/// What the loop reports after each step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stepped {
    /// The step's loss.
    pub loss: f64,
    /// Its learning rate.
    pub lr: f64,
}

/// A task with its optimizer, built and checked before anything is written.
pub struct Trainer<T: Task> {
    pub(crate) task: T,
    pub(crate) opt: AdamW,
}

/// The state of task `T`'s runs.
pub type StateOf<T> = RunState<<T as Task>::Config, <T as Task>::Record>;

impl<T: Task> Trainer<T> {
    /// The task with a fresh optimizer over its weights.
    pub fn new(task: T, cfg: &T::Config) -> Result<Self> {
        let opt = AdamW::new(task.varmap(), cfg.run().adam)?;
        Ok(Self { task, opt })
    }

    /// [`Self::run`] into the run directory `dir`, logging into `log`, with a progress
    /// printer unless quiet.
    pub(crate) fn run_in(
        &mut self,
        dir: &RunDir,
        log: &mut ScalarLog,
        state: &mut StateOf<T>,
        opts: &RunOptions,
    ) -> Result<()> {
        self.run(
            state,
            Some((dir.path(), log)),
            opts.stop_after,
            printer(opts.quiet),
        )
    }

    /// Trains `state` in memory to its steps, writing nothing (a run directory is
    /// [`crate::job::train`]'s); `progress` sees the state after every step.
    ///
    /// # Errors
    /// [`Diverged`] at a loss that is not finite; [`Interrupted`]; whatever the task
    /// refuses.
    pub fn run_in_memory(
        &mut self,
        state: &mut StateOf<T>,
        progress: impl FnMut(&StateOf<T>, Stepped),
    ) -> Result<()> {
        self.run(state, None, None, progress)
    }

    /// Trains from `state.step` to `state.config.steps()` (or `stop_after`, as an
    /// interrupted run would stop), validating and, with a directory, saving on the
    /// config's schedule and at the end, and logging every step and validation into its
    /// log; `progress` sees the state after every step. After
    /// [`request_stop`] it stops at the end of the current step, saves a checkpoint there
    /// and returns [`Interrupted`].
    ///
    /// # Errors
    /// [`Diverged`] at a loss that is not finite; [`Interrupted`]; whatever the task or a
    /// write refuses.
    pub(crate) fn run(
        &mut self,
        state: &mut StateOf<T>,
        out: Option<(&Path, &mut ScalarLog)>,
        stop_after: Option<usize>,
        mut progress: impl FnMut(&StateOf<T>, Stepped),
    ) -> Result<()> {
        let (dir, mut log) = out.unzip();
        let cfg = state.config.clone();
        state.history.retain(|r| r.step() <= state.step);
        let started = Instant::now();
        let elapsed_before = state.elapsed_s;
        let mut saved = dir
            .is_some_and(|d| d.join(rundir::STATE_FILE).exists())
            .then_some(state.step);
        let until = stop_after.map_or(cfg.steps(), |s| s.min(cfg.steps()));
        // This run's own peak memory, not what the process held before it.
        crate::memory::reset_peak_rss();
        let peak_before = state.peak_rss_mb;
        // The high-water mark, read where the state is saved, and at the end.
        let note_peak = |state: &mut StateOf<T>| {
            state.peak_rss_mb = [peak_before, crate::memory::peak_rss_mb()]
                .into_iter()
                .flatten()
                .reduce(f64::max);
        };
        let mut interrupted = false;
        while state.step < until {
            if stop_requested() {
                interrupted = true;
                break;
            }
            let step = state.step + 1;
            posenc_transformer::dropout::seed(cfg.seed(), step as u64);
            let StepLoss { loss, tokens } = self.task.loss(&cfg, step)?;
            let value: f32 = loss.to_scalar()?;
            if !value.is_finite() {
                return Err(Diverged { step, loss: value }.into());
            }
            let lr = cfg.lr(step);
            self.opt.step(&loss.backward()?, lr)?;
            state.step = step;
            state.tokens += tokens;
            state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();
            state.pending.0 += f64::from(value);
            state.pending.1 += 1;
            if let Some(log) = log.as_deref_mut() {
                let stepped = [
                    ("train/loss", f64::from(value)),
                    ("train/lr", lr),
                    ("train/tokens_per_second", state.tokens_per_second()),
                ];
                log.write(step, &stepped)?;
            }
            let last = step == cfg.steps();
            if step.is_multiple_of(cfg.run().eval_every) || last {
                let train_loss = state.pending.0 / state.pending.1.max(1) as f64;
                if let Some(record) = self
                    .task
                    .validate(&cfg, step, train_loss, state.elapsed_s)?
                {
                    if let Some(log) = log.as_deref_mut() {
                        log.write(step, &record.scalars())?;
                        log.flush()?;
                    }
                    state.history.push(record);
                    state.pending = (0.0, 0);
                }
            }
            if let Some(dir) = dir {
                if step.is_multiple_of(cfg.run().save_every) || last {
                    note_peak(state);
                    rundir::save_checkpoint(dir, self.task.varmap(), &self.opt, state)?;
                    saved = Some(step);
                    if let Some(log) = log.as_deref_mut() {
                        log.flush()?;
                    }
                }
            }
            progress(
                state,
                Stepped {
                    loss: f64::from(value),
                    lr,
                },
            );
        }
        if dir.is_none() || saved != Some(state.step) {
            note_peak(state);
        }
        if let Some(dir) = dir.filter(|_| saved != Some(state.step)) {
            rundir::save_checkpoint(dir, self.task.varmap(), &self.opt, state)?;
        }
        if let Some(log) = log {
            log.flush()?;
        }
        if interrupted {
            return Err(Interrupted {
                step: state.step,
                steps: cfg.steps(),
                dir: dir.map(Path::to_path_buf),
            }
            .into());
        }
        Ok(())
    }
}

/// A progress bar with the loss, learning rate and throughput, and a line at every
/// validation (nothing when `quiet`).
pub fn printer<C: Settings, R: Validation>(quiet: bool) -> impl FnMut(&RunState<C, R>, Stepped) {
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut logged = 0;
    move |state, stepped| {
        if quiet {
            return;
        }
        let steps = state.config.steps();
        let bar = bar.get_or_insert_with(|| crate::progress_bar(false, state.step - 1, steps));
        bar.set_position(state.step as u64);
        bar.set_message(format!(
            "loss {:.3}  lr {:.2e}  {:.0} tok/s",
            stepped.loss,
            stepped.lr,
            state.tokens_per_second()
        ));
        if let Some(r) = state.history.last().filter(|r| r.step() > logged) {
            logged = r.step();
            crate::bar_line(bar, format!("step {:>6}  {}", r.step(), r.summary()));
        }
        if state.step == steps {
            bar.finish_and_clear();
        }
    }
}
