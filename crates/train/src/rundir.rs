//! A run directory: everything one training run writes, kept as one consistent unit.
//!
//! | file | written | holds |
//! |---|---|---|
//! | `config.json` and the tokenizers (`source.tokenizer.json` and `target.tokenizer.json` for translation, `tokenizer.json` for a language model) | once, when the run starts | the model's config and its vocabularies |
//! | `trainer.json` | when the run starts, then at every checkpoint | the run's id, config, step and validation history |
//! | `manifest.json` | once, after the four files above | the run's id, its kind (the task that wrote it: `kotoba`, `lm`, `lengthgen`) and the SHA-256 of the config and both tokenizers |
//! | `training.safetensors` | at every checkpoint | weights and AdamW moments; its header holds the run's id and the whole trainer state, so resuming reads this one file |
//! | `model.safetensors` | at every checkpoint | the weights for inference (PyTorch names); its header names the run and the step |
//! | `.lock` | while a process writes | the writer's pid, for the message a second writer gets; removed when it is done |
//! | `logs/` | at every step | the run's curves, for TensorBoard and as JSON lines ([`crate::logs`]), unless `--log-dir` placed them elsewhere |
//!
//! A writer holds an exclusive lock (`flock`) on the directory itself while it writes, so
//! a second writer is refused; the lock ends with its process, however that ends.
//!
//! Every file is written atomically ([`write_atomic`]). The manifest ties the pieces
//! together: loading checks the hashes of the fixed files, and that every weight file and
//! `trainer.json` name the manifest's run. A tokenizer from another run, weights from
//! another process or a half-replaced directory is an error naming the file, never a
//! silently wrong model.
//!
//! Nothing is written before everything is validated: `RunDir::create` runs after the
//! config, the data and the model have been checked, and it refuses a directory holding
//! another run (unless forced) or files posenc did not write (always).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::Result;
use posenc_error::{bail, ensure, Context};
use posenc_io::{is_temporary, remove_stale_temporaries, write_atomic};
use posenc_transformer::checkpoint::{self, CONFIG_FILE, WEIGHTS_FILE};

use crate::labelled::Labelled;
use crate::optim::AdamW;
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `manifest.json`.
pub const MANIFEST: &str = "manifest.json";
/// `attention.png`: the attention maps `posenc kotoba experiment` draws into each run it trained,
/// beside the run's own files (a run directory holding it is still a run).
pub const ATTENTION_PLOT: &str = "attention.png";
/// `.lock`: held by the process writing the directory.
pub const LOCK: &str = ".lock";
/// `source.tokenizer.json`.
pub const SOURCE_TOKENIZER: &str = "source.tokenizer.json";
/// `target.tokenizer.json`.
pub const TARGET_TOKENIZER: &str = "target.tokenizer.json";
/// `tokenizer.json`: a language model's one tokenizer.
pub const TOKENIZER: &str = "tokenizer.json";
/// `trainer.json`.
pub const TRAINER_FILE: &str = "trainer.json";
/// `training.safetensors`.
pub const STATE_FILE: &str = "training.safetensors";
/// The header key of the run id in the weight files.
pub const RUN_KEY: &str = "posenc.run";
/// The header key of the step in the weight files.
const STEP_KEY: &str = "posenc.step";
/// The header key of the trainer state (JSON) in `training.safetensors`.
const TRAINER_KEY: &str = "posenc.trainer";
/// The manifest's format version.
const FORMAT: u32 = 1;
/// Every file a run writes.
const RUN_FILES: [&str; 8] = [
    MANIFEST,
    CONFIG_FILE,
    SOURCE_TOKENIZER,
    TARGET_TOKENIZER,
    TOKENIZER,
    TRAINER_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
];

/// `manifest.json`: which run the directory holds, and the hashes of its fixed files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The format version (1).
    pub format: u32,
    /// The run's id, also written into every weight file and `trainer.json`.
    pub run: String,
    /// The kind of run (the task that wrote it, `posenc <kind> …`); absent in runs written
    /// before runs carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// SHA-256 (hex) of each fixed file, by name.
    pub files: BTreeMap<String, String>,
}

/// A fresh run id: 128 random bits in hex.
pub fn new_run_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How the directory of one seed's run inside an experiment entry's directory begins.
const SEED_DIR_PREFIX: &str = "seed-";

/// The directory of one seed's run inside an experiment entry's directory: `seed-<seed>`.
pub fn seed_dir_name(seed: u64) -> String {
    format!("{SEED_DIR_PREFIX}{seed}")
}

/// A run directory of an experiment: `out/<label>` when there is one seed,
/// `out/<label>/seed-<seed>` when there are several. The first seed's run is found where it
/// already is when the number of seeds changed since it trained: an experiment of one seed
/// given more keeps its run in `out/<label>` (the other seeds' go into `seed-<seed>` beside
/// its files), and one cut to a single seed reads `out/<label>/seed-<first>`.
pub fn seed_dir(
    out: &Path,
    entry: &Labelled,
    seeds: usize,
    first: u64,
    seed: u64,
) -> std::path::PathBuf {
    let dir = out.join(entry.dir_name());
    let nested = dir.join(seed_dir_name(seed));
    if seed != first {
        return nested;
    }
    let (usual, other) = match seeds {
        1 => (dir, nested),
        _ => (nested, dir),
    };
    let holds = |d: &Path, what: Contents| inspect(d).is_ok_and(|c| c == what);
    match holds(&usual, Contents::Empty) && holds(&other, Contents::Run) {
        true => other,
        false => usual,
    }
}

/// Whether `name` is a [`seed_dir_name`]: an experiment may keep its other seeds' runs
/// beside the files of its first (see [`seed_dir`]).
fn is_seed_dir_name(name: &str) -> bool {
    name.strip_prefix(SEED_DIR_PREFIX)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What a directory holds, as far as training is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    /// It does not exist, or holds nothing but a lock and stale temporaries.
    Empty,
    /// A run: it has a manifest (checked by `verify`).
    Run,
    /// Files a run writes but no manifest: a run stopped before it had started, or one
    /// written by a posenc older than the manifest. `weights` says whether it holds any.
    Unfinished {
        /// Whether `model.safetensors` or `training.safetensors` is there.
        weights: bool,
    },
    /// Files posenc does not write (their names, sorted).
    Foreign(Vec<String>),
}

/// Looks at `dir` without changing it.
///
/// # Errors
/// If `dir` is a file, or cannot be read.
pub fn inspect(dir: &Path) -> Result<Contents> {
    if !dir.exists() {
        return Ok(Contents::Empty);
    }
    ensure!(
        dir.is_dir(),
        "{} is a file, not a run directory",
        dir.display()
    );
    let mut ours = Vec::new();
    let mut foreign = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == LOCK
            || name == ATTENTION_PLOT
            || is_temporary(&name)
            || ((is_seed_dir_name(&name) || name == crate::logs::LOGS_DIR)
                && entry.file_type()?.is_dir())
        {
            continue;
        }
        if RUN_FILES.contains(&name.as_str()) {
            ours.push(name);
        } else {
            foreign.push(name);
        }
    }
    foreign.sort();
    Ok(if !foreign.is_empty() {
        Contents::Foreign(foreign)
    } else if ours.iter().any(|n| n == MANIFEST) {
        Contents::Run
    } else if ours.is_empty() {
        Contents::Empty
    } else {
        Contents::Unfinished {
            weights: ours.iter().any(|n| n == STATE_FILE || n == WEIGHTS_FILE),
        }
    })
}

pub(crate) fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: Manifest =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    ensure!(
        manifest.format == FORMAT,
        "{} has format {}; this posenc reads format {FORMAT}",
        path.display(),
        manifest.format
    );
    Ok(manifest)
}

/// Checks that `dir` holds a complete run whose fixed files are the ones its manifest
/// names, and returns the manifest.
///
/// # Errors
/// Names the directory or file at fault: missing, not a directory, no manifest, or a file
/// changed since the run wrote it.
pub fn verify(dir: &Path) -> Result<Manifest> {
    ensure!(
        dir.exists(),
        "model directory {} does not exist",
        dir.display()
    );
    ensure!(
        dir.is_dir(),
        "{} is a file: a model is a directory (config.json, model.safetensors, tokenizers, manifest.json)",
        dir.display()
    );
    ensure!(
        dir.join(MANIFEST).exists(),
        "{} has no {MANIFEST}: it is not a model written by `posenc kotoba train`, or it was \
         written before posenc kept manifests, or its run was stopped before it started",
        dir.display()
    );
    let manifest = read_manifest(dir)?;
    ensure!(
        manifest.files.contains_key(CONFIG_FILE),
        "{} lists no `{CONFIG_FILE}`",
        dir.join(MANIFEST).display()
    );
    for (name, want) in &manifest.files {
        ensure!(
            RUN_FILES.contains(&name.as_str()) && name != MANIFEST,
            "{} lists `{name}`, which is not a file a run writes",
            dir.join(MANIFEST).display()
        );
        let path = dir.join(name);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        ensure!(
            &sha256_hex(&bytes) == want,
            "{} is not the file this run wrote (its SHA-256 differs from {MANIFEST}): \
             it was changed, or copied from another run",
            path.display()
        );
    }
    Ok(manifest)
}

/// Checks that a weight file's header names `run`.
///
/// # Errors
/// If the file is missing, unreadable, or from another run.
pub fn check_weights(path: &Path, run: &str) -> Result<BTreeMap<String, String>> {
    ensure!(
        path.exists(),
        "{} is missing: the run was stopped before its first checkpoint (continue it with \
         `posenc kotoba train --resume --out {}`)",
        path.display(),
        path.parent()
            .map_or(String::new(), |p| p.display().to_string())
    );
    let meta: BTreeMap<String, String> = checkpoint::read_metadata(path)?.into_iter().collect();
    match meta.get(RUN_KEY) {
        Some(r) if r == run => Ok(meta),
        Some(r) => bail!(
            "{} belongs to run {r}, not to this directory's run {run}: it was written by another process or copied from another run",
            path.display()
        ),
        None => bail!(
            "{} names no run: it was not written by this run",
            path.display()
        ),
    }
}

/// A run directory this process writes into, locked against every other writer for as
/// long as the value lives. The lock is released when the process ends, however it ends.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    _lock: File,
}

impl Drop for RunDir {
    /// A run no process writes keeps no `.lock`: the writer removes its own as it lets go
    /// (a killed one leaves it, and the next writer replaces it).
    fn drop(&mut self) {
        let path = self.dir.join(LOCK);
        let mine = format!("pid {}", std::process::id());
        if std::fs::read_to_string(&path).is_ok_and(|held| held.trim() == mine) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

impl RunDir {
    /// Takes the write lock of the existing directory `dir`: an exclusive `flock` on the
    /// directory itself, so a process that is refused writes nothing at all.
    fn lock(dir: &Path) -> Result<File> {
        let handle = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        match handle.try_lock() {
            Ok(()) => Ok(handle),
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(dir.join(LOCK)).unwrap_or_default();
                let holder = holder.trim();
                bail!(
                    "{} is being written by another posenc process ({}); wait for it to \
                     finish, or choose another --out",
                    dir.display(),
                    if holder.is_empty() {
                        "pid unknown"
                    } else {
                        holder
                    }
                )
            }
            Err(std::fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("locking {}", dir.display()))?
            }
        }
    }

    /// Records this process as the writer (in `.lock`, for the message another process
    /// gets) and removes temporaries that a killed writer left. Call it once every check
    /// has passed, just before writing.
    pub fn begin_writing(&self) -> Result<()> {
        write_atomic(
            &self.dir.join(LOCK),
            format!("pid {}", std::process::id()).as_bytes(),
        )?;
        remove_stale_temporaries(&self.dir)?;
        Ok(())
    }

    /// Starts a new run of `kind` in `dir`: checks what it holds, locks it, and writes the
    /// run's fixed files (the config and the tokenizers), the initial `trainer` state, then
    /// the manifest. `describe_existing(dir)` says why a run already there is not replaced.
    ///
    /// # Errors
    /// If another process writes `dir`; if `dir` holds another run or weights without a
    /// manifest and `force` is false; if it holds files posenc did not write (even with
    /// `force`: those are never deleted); if a file cannot be written. Nothing is written
    /// before these checks pass.
    pub fn create(
        dir: &Path,
        fixed: &FixedFiles,
        kind: &str,
        state: &impl Progress,
        force: bool,
        describe_existing: impl Fn(&Path) -> String,
    ) -> Result<Self> {
        let decide = |contents: Contents| -> Result<()> {
            match contents {
                Contents::Empty | Contents::Unfinished { weights: false } => Ok(()),
                Contents::Foreign(names) => bail!(
                    "{} holds files posenc did not write ({}); choose an empty or new --out",
                    dir.display(),
                    shorten(&names)
                ),
                Contents::Run | Contents::Unfinished { weights: true } if !force => {
                    bail!("{}", describe_existing(dir))
                }
                Contents::Run | Contents::Unfinished { weights: true } => Ok(()),
            }
        };
        // Once before touching anything, and again under the lock.
        decide(inspect(dir)?)?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let lock = Self::lock(dir)?;
        decide(inspect(dir)?)?;
        let this = Self {
            dir: dir.to_path_buf(),
            _lock: lock,
        };
        this.begin_writing()?;
        // The manifest goes first, so a directory half-way through being replaced is never
        // taken for a complete run.
        for name in RUN_FILES {
            let path = dir.join(name);
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        }
        let mut files = BTreeMap::new();
        for (name, bytes) in &fixed.0 {
            write_atomic(&dir.join(name), bytes)?;
            files.insert(name.to_string(), sha256_hex(bytes));
        }
        write_atomic(
            &dir.join(TRAINER_FILE),
            serde_json::to_string_pretty(state)?.as_bytes(),
        )?;
        let manifest = Manifest {
            format: FORMAT,
            run: state.run().to_string(),
            kind: Some(kind.to_string()),
            files,
        };
        write_atomic(
            &dir.join(MANIFEST),
            serde_json::to_string_pretty(&manifest)?.as_bytes(),
        )?;
        Ok(this)
    }

    /// Opens the run in `dir` to continue it: verifies the manifest and locks the
    /// directory. Nothing is written until [`RunDir::begin_writing`].
    ///
    /// # Errors
    /// If another process writes `dir`, or it holds no complete run.
    pub fn open(dir: &Path) -> Result<(Self, Manifest)> {
        ensure!(
            dir.is_dir(),
            "{} is not a run directory (--resume continues a run that a `train` command wrote)",
            dir.display()
        );
        verify(dir)?;
        let lock = Self::lock(dir)?;
        let manifest = verify(dir)?;
        Ok((
            Self {
                dir: dir.to_path_buf(),
                _lock: lock,
            },
            manifest,
        ))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// The files a run writes once, when it starts, by name: `config.json` and the
/// tokenizers. The manifest holds their hashes.
#[derive(Debug, Clone)]
pub struct FixedFiles(Vec<(&'static str, Vec<u8>)>);

impl FixedFiles {
    /// `config` as `config.json`, and the tokenizers by name (one of this module's names).
    ///
    /// # Errors
    /// A name that is not a tokenizer file a run writes.
    pub fn new(config: Vec<u8>, tokenizers: Vec<(&'static str, Vec<u8>)>) -> Result<Self> {
        for (name, _) in &tokenizers {
            ensure!(
                [SOURCE_TOKENIZER, TARGET_TOKENIZER, TOKENIZER].contains(name),
                "`{name}` is not a tokenizer file"
            );
        }
        let mut files = vec![(CONFIG_FILE, config)];
        files.extend(tokenizers);
        Ok(Self(files))
    }
}

/// What a trainer keeps between steps, saved with every checkpoint (in
/// `training.safetensors`' header, and readable in `trainer.json`).
pub trait Progress: Serialize + DeserializeOwned {
    /// The run's id.
    fn run(&self) -> &str;
    /// Steps done.
    fn step(&self) -> usize;
    /// The steps the run trains for in all.
    fn steps(&self) -> usize;
    /// Sets the steps the run trains for in all.
    fn set_steps(&mut self, steps: usize);
}

/// Sets the steps the run in `dir`, read as `state`, trains for in all to `steps` (none:
/// its own).
///
/// # Errors
/// `steps` below the step the run is at.
pub fn set_steps<S: Progress>(dir: &Path, state: &mut S, steps: Option<usize>) -> Result<()> {
    if let Some(steps) = steps {
        ensure!(
            steps >= state.step(),
            "the run in {} is at step {}, past --steps {steps}",
            dir.display(),
            state.step()
        );
        if steps < state.steps() {
            // A lower target is allowed (a run cut short on purpose), but never silently:
            // the schedule then decays to the new end.
            crate::log(&format!(
                "note: the run in {} was to train {} steps; it now ends at {steps}, its \
                 learning-rate schedule with it",
                dir.display(),
                state.steps()
            ));
        }
        state.set_steps(steps);
    }
    Ok(())
}

/// Writes one checkpoint: `training.safetensors` (weights, AdamW moments and `state`),
/// then `model.safetensors`, then `trainer.json`, each atomically and each naming the run.
///
/// # Errors
/// If a file cannot be serialised or written; the previous checkpoint is then intact.
pub fn save_checkpoint(
    dir: &Path,
    varmap: &VarMap,
    opt: &AdamW,
    state: &impl Progress,
) -> Result<()> {
    let weights = checkpoint::variables(varmap);
    let header = |with_state: bool| -> Result<HashMap<String, String>> {
        let mut h = HashMap::from([
            (RUN_KEY.to_string(), state.run().to_string()),
            (STEP_KEY.to_string(), state.step().to_string()),
        ]);
        if with_state {
            h.insert(TRAINER_KEY.to_string(), serde_json::to_string(state)?);
        }
        Ok(h)
    };
    let mut tensors: HashMap<String, Tensor> = opt.state()?;
    tensors.extend(
        weights
            .iter()
            .map(|(k, v)| (format!("model.{k}"), v.clone())),
    );
    let path = dir.join(STATE_FILE);
    write_atomic(
        &path,
        &checkpoint::serialize(&tensors, header(true)?, &path)?,
    )?;
    let path = dir.join(WEIGHTS_FILE);
    write_atomic(
        &path,
        &checkpoint::serialize(&weights, header(false)?, &path)?,
    )?;
    write_atomic(
        &dir.join(TRAINER_FILE),
        serde_json::to_string_pretty(state)?.as_bytes(),
    )?;
    Ok(())
}

/// Reads `trainer.json` from a run directory.
///
/// # Errors
/// If it is missing or not a trainer state of this kind.
pub fn read_trainer<S: Progress>(dir: &Path) -> Result<S> {
    read_json(&dir.join(TRAINER_FILE))
}

/// Reads a JSON file of a run or an experiment as `T`, naming the file in any error.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?)
}

/// Reads `trainer.json` and checks that it belongs to the manifest's run.
///
/// # Errors
/// As [`read_trainer`], or a state from another run.
pub fn read_trainer_of<S: Progress>(dir: &Path, manifest: &Manifest) -> Result<S> {
    let state: S = read_trainer(dir)?;
    ensure!(
        state.run() == manifest.run,
        "{} belongs to run {}, not to this directory's run {}",
        dir.join(TRAINER_FILE).display(),
        state.run(),
        manifest.run
    );
    Ok(state)
}

/// The trainer state of the last checkpoint in `dir`: from `training.safetensors` (which
/// holds it with the weights), or, before the first checkpoint, `trainer.json` at step 0.
///
/// # Errors
/// A state from another run, or a checkpoint that was deleted.
pub fn last_state<S: Progress>(dir: &Path, manifest: &Manifest) -> Result<S> {
    let path = dir.join(STATE_FILE);
    let state: S = if path.exists() {
        let header = check_weights(&path, &manifest.run)?;
        header
            .get(TRAINER_KEY)
            .with_context(|| format!("{} holds no trainer state", path.display()))
            .and_then(|s| {
                serde_json::from_str(s)
                    .with_context(|| format!("parsing the trainer state in {}", path.display()))
            })?
    } else {
        let state: S = read_trainer(dir)?;
        ensure!(
            state.step() == 0,
            "{} is missing, but {} says the run is at step {}: the checkpoint was deleted",
            path.display(),
            dir.join(TRAINER_FILE).display(),
            state.step()
        );
        state
    };
    ensure!(
        state.run() == manifest.run,
        "the trainer state in {} belongs to run {}, not to this directory's run {}",
        dir.display(),
        state.run(),
        manifest.run
    );
    Ok(state)
}

/// Restores weights and AdamW moments from `training.safetensors`, at `step`.
///
/// # Errors
/// A missing, mis-shaped or non-finite tensor, named with the file.
pub fn restore(dir: &Path, varmap: &VarMap, opt: &mut AdamW, step: usize) -> Result<()> {
    let path = dir.join(STATE_FILE);
    // Onto the variables' device: a run may resume on another one.
    let device = varmap
        .all_vars()
        .first()
        .map_or(Device::Cpu, |v| v.device().clone());
    let mut tensors = candle_core::safetensors::load(&path, &device)
        .with_context(|| format!("reading {}", path.display()))?;
    let weights: HashMap<String, Tensor> = tensors
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("model.")?.to_string(), v.clone())))
        .collect();
    checkpoint::set_checked(varmap, &weights, &path)?;
    tensors.retain(|k, _| !k.starts_with("model."));
    opt.restore(&tensors, step)
        .with_context(|| format!("restoring the optimizer from {}", path.display()))?;
    Ok(())
}

fn shorten(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(3).map(|n| format!("{n:?}")).collect();
    if names.len() > 3 {
        format!("{}, and {} more", shown.join(", "), names.len() - 3)
    } else {
        shown.join(", ")
    }
}
