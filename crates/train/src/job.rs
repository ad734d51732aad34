//! A task's runs on disk, alike for every task: start one, continue one, open one.
//!
//! A task implements [`Job`] beside [`Task`]: its kind (the name its run directories carry
//! in `manifest.json`, which is also its command, `posenc <kind> …`), how to build the task
//! for a new run and for a run read back, and how its weights start. [`train`], [`resume`]
//! and [`open`] do the rest (the run directory, its lock and manifest, the loop, the
//! checkpoints, the refusal of another task's run), so a task writes none of it.
//!
//! ```text
//! train::<J>(cfg, inputs, out)   J::begin(cfg, inputs) → task, config, fixed files
//!                                J::initialize(weights)  → RunDir::create → logs → fit loop
//! resume::<J>(out, steps, inputs) lock, last state → J::reopen(dir, config, inputs)
//!                                restore the checkpoint (or J::initialize at step 0)
//!                                → logs from that step → fit loop
//! open(dir, J::KIND)             manifest, kind, weights checked → the task builds its model
//! ```

use std::path::{Path, PathBuf};

use candle_core::Device;
use candle_nn::VarMap;
use posenc_error::{bail, ensure, Context};

use crate::error::Result;
use crate::fit::{RunOptions, Settings, StateOf, Task, Trainer};
use crate::logs::{self, ScalarLog};
use crate::results;
use crate::rundir::{self, FixedFiles, Manifest, RunDir};
use posenc_transformer::checkpoint::WEIGHTS_FILE;

/// A task whose runs live in run directories: what the core needs to start, continue and
/// open them.
///
/// `'a` is the lifetime of what a run is built from besides its config
/// ([`Job::Inputs`]), which the task may borrow.
pub trait Job<'a>: Task + Sized {
    /// The kind of run: the name `manifest.json` carries, and the command that reads the
    /// run (`posenc <KIND> …`).
    const KIND: &'static str;

    /// What a run is built from besides its config and device, given again when it is
    /// continued: token streams made elsewhere, or `()` for a task that makes its data from
    /// its config.
    type Inputs: ?Sized;

    /// The task for a new run of `cfg`, checked before anything is written: the task, the
    /// config the run saves (the task may complete it, with vocabulary sizes say), and the
    /// files fixed for the run (its model's config and tokenizers).
    ///
    /// # Errors
    /// Bad settings or data, named.
    fn begin(cfg: Self::Config, inputs: &'a Self::Inputs, device: &Device) -> Result<Begun<Self>>;

    /// The task that continues the run in `dir`, whose saved config is `cfg`, from the
    /// files the run keeps (its tokenizers, say).
    ///
    /// # Errors
    /// Files that do not fit the config, or bad settings.
    fn reopen(
        dir: &Path,
        cfg: &Self::Config,
        inputs: &'a Self::Inputs,
        device: &Device,
    ) -> Result<Self>;

    /// The weights at step 0: drawn from the run's seed ([`crate::init::initialize`]) unless
    /// the task starts them otherwise (from another run, say).
    ///
    /// # Errors
    /// Whatever reading the weights refuses.
    fn initialize(varmap: &VarMap, cfg: &Self::Config) -> Result<()> {
        crate::init::initialize(varmap, cfg.seed())
    }
}

/// A task built for a new run ([`Job::begin`]).
pub struct Begun<T: Task> {
    /// The task.
    pub task: T,
    /// The config the run saves.
    pub config: T::Config,
    /// Its fixed files: the model's config and the tokenizers.
    pub fixed: FixedFiles,
}

/// Trains a new run of `cfg` into `out`, which must be new or empty, or hold a run that
/// `opts.force` replaces; returns the final state. Everything is checked before anything
/// is written, and the files are the same on any device.
///
/// # Errors
/// Bad settings or data (before anything is written), another writer, a directory that
/// holds another run or files posenc did not write, a loss that is not finite, a failed
/// write.
pub fn train<'a, J: Job<'a>>(
    cfg: J::Config,
    inputs: &'a J::Inputs,
    out: &Path,
    opts: RunOptions,
    device: &Device,
) -> Result<StateOf<J>> {
    let Begun {
        task,
        config,
        fixed,
    } = J::begin(cfg, inputs, device)?;
    let mut state = StateOf::<J>::new(rundir::new_run_id(), config);
    let mut trainer = Trainer::new(task, &state.config)?;
    J::initialize(trainer.task.varmap(), &state.config)?;
    if let Some(logs) = &opts.log_dir {
        logs::check_fresh(logs, opts.force)?;
        let absolute = std::path::absolute(logs)
            .with_context(|| format!("resolving --log-dir {}", logs.display()))?;
        state.log_dir = Some(absolute);
    }
    let describe = |dir: &Path| describe_existing::<J>(dir, &state.config);
    let dir = RunDir::create(out, &fixed, J::KIND, &state, opts.force, describe)?;
    let mut log = ScalarLog::start(&log_dir(out, &state))?;
    // Said once the run is sure to start: a refused --out says only why.
    crate::fit::warn_schedule(state.config.run());
    trainer.run_in(&dir, &mut log, &mut state, &opts)?;
    Ok(state)
}

/// Continues the run in `out` up to `steps` (default: its own) steps in all, built from
/// the same `inputs` it started with, on `device` (any: a run started on the CPU may go on
/// on a GPU, no longer bit-identically). A run resumed on the device it started on is
/// bit-identical to one that never stopped.
///
/// # Errors
/// As [`train`]; also a directory that holds no complete run, a run of another kind, or
/// `steps` below the run's step.
pub fn resume<'a, J: Job<'a>>(
    out: &Path,
    steps: Option<usize>,
    inputs: &'a J::Inputs,
    opts: RunOptions,
    device: &Device,
) -> Result<StateOf<J>> {
    let (dir, manifest) = RunDir::open(out)?;
    check_kind(out, &manifest, J::KIND)?;
    let mut state: StateOf<J> = rundir::last_state(out, &manifest)?;
    rundir::set_steps(out, &mut state, steps)?;
    let task = J::reopen(out, &state.config, inputs, device)?;
    let mut trainer = Trainer::new(task, &state.config)?;
    if let Some(logs) = &opts.log_dir {
        let absolute = std::path::absolute(logs)
            .with_context(|| format!("resolving --log-dir {}", logs.display()))?;
        state.log_dir = Some(absolute);
    }
    dir.begin_writing()?;
    if state.step > 0 {
        let (varmap, opt) = (trainer.task.varmap(), &mut trainer.opt);
        rundir::restore(out, varmap, opt, state.step)?;
    } else {
        J::initialize(trainer.task.varmap(), &state.config)?;
    }
    let mut log = ScalarLog::resume(&log_dir(out, &state), state.step)?;
    trainer.run_in(&dir, &mut log, &mut state, &opts)?;
    Ok(state)
}

/// Where the logs of the run in `out` go: where `--log-dir` placed them, else its `logs/`.
pub fn log_dir<C, R>(out: &Path, state: &crate::fit::RunState<C, R>) -> PathBuf {
    state
        .log_dir
        .clone()
        .unwrap_or_else(|| out.join(logs::LOGS_DIR))
}

/// A run directory opened to read its model ([`open`]).
#[derive(Debug, Clone)]
pub struct Opened {
    /// Its manifest.
    pub manifest: Manifest,
    /// Its weights for inference, checked to be the run's.
    pub weights: PathBuf,
}

/// Opens the run in `dir` to read its model: its fixed files are the ones its manifest
/// names, it is a run of `kind` (or of a format older than kinds), and its weights are its
/// own.
///
/// # Errors
/// Names the file at fault, or the kind of run `dir` holds.
pub fn open(dir: &Path, kind: &str) -> Result<Opened> {
    let manifest = rundir::verify(dir)?;
    check_kind(dir, &manifest, kind)?;
    let weights = dir.join(WEIGHTS_FILE);
    rundir::check_weights(&weights, &manifest.run)?;
    Ok(Opened { manifest, weights })
}

/// Checks that the run `manifest` describes is of `kind`; a manifest that names no kind
/// (written before runs carried one) passes, and its state decides.
///
/// # Errors
/// A run of another kind, naming it.
pub fn check_kind(dir: &Path, manifest: &Manifest, kind: &str) -> Result<()> {
    match &manifest.kind {
        Some(other) if other != kind => bail!(
            "{} holds a `{other}` run (the kind its {} names), not a `{kind}` run",
            dir.display(),
            rundir::MANIFEST
        ),
        _ => Ok(()),
    }
}

/// Why a new run of `wanted` does not replace the run in `dir`.
fn describe_existing<'a, J: Job<'a>>(dir: &Path, wanted: &J::Config) -> String {
    let d = dir.display();
    let kind = J::KIND;
    let old = rundir::verify(dir)
        .and_then(|m| check_kind(dir, &m, kind))
        .and_then(|()| rundir::read_trainer::<StateOf<J>>(dir));
    match old {
        Ok(old) => {
            let diff = results::differences(&old.config, wanted);
            if diff.is_empty() {
                format!(
                    "{d} already holds a run of this config (step {} of {}): continue it with `posenc {kind} train --resume --out {d}`, or pass --force to start it again",
                    old.step,
                    old.config.steps()
                )
            } else {
                format!(
                    "{d} holds a run with a different config (it differs in {}): choose another --out, or pass --force to replace it",
                    diff.join(", ")
                )
            }
        }
        Err(_) => format!(
            "{d} holds a model that posenc cannot read as a `{kind}` run: choose another --out, or pass --force to replace it"
        ),
    }
}

/// The kind of run `dir` holds, as its manifest names it: `None` for a directory without a
/// manifest, or one written before runs carried their kind.
///
/// # Errors
/// A manifest that cannot be read.
pub fn kind_of(dir: &Path) -> Result<Option<String>> {
    ensure!(dir.is_dir(), "{} is not a run directory", dir.display());
    if !dir.join(rundir::MANIFEST).is_file() {
        return Ok(None);
    }
    Ok(rundir::read_manifest(dir)?.kind)
}

/// The run of `kind` in `dir` for inference: its last state, and `varmap` holding its
/// weights once `build` has made the model's variables in it (from the state's config).
///
/// # Errors
/// A directory that is not a complete run of `kind` (`what` names one in the message:
/// "a lengthgen run"), a model `build` refuses, or weights that do not fit it.
pub fn load_run<S: rundir::Progress>(
    dir: &Path,
    kind: &str,
    what: &str,
    varmap: &VarMap,
    build: impl FnOnce(&S) -> Result<()>,
) -> Result<S> {
    let Opened { manifest, weights } = open(dir, kind)?;
    let state: S =
        rundir::last_state(dir, &manifest).context(format!("{} holds no {what}", dir.display()))?;
    build(&state)?;
    posenc_transformer::checkpoint::load_into(varmap, &weights)?;
    Ok(state)
}
