//! The one experiment driver: a grid of labelled encodings × seeds, each cell a run of a
//! task trained and evaluated the same way.
//!
//! A task says what a cell is ([`Experiment`]); the driver owns the rest, the same for every
//! task:
//!
//! - **directories**: the run of an entry and seed trains into [`rundir::seed_dir`] under
//!   `--out`;
//! - **reuse and resume**: a finished run there with the same settings is reused, an
//!   unfinished one resumed, one with other settings refused (never overwritten);
//! - **divergence**: a run whose loss is not finite is a row of the results, and the grid
//!   goes on;
//! - **guards**: an `--out` that holds a training run, or results or shards of another kind
//!   of experiment, is refused before anything is written;
//! - **records**: `results.json` and `results.md` are rewritten after every cell, so an
//!   interrupted experiment still shows its rows;
//! - **shards**: [`run_shard`] runs every N-th cell of the grid (`--shard I/N`, one process
//!   or machine each) into `shard-I-of-N.json`, and [`merge`] joins the N shards into the
//!   `results.json` one process would have written.
//!
//! ```text
//! out/
//!   results.json, results.md     the experiment (or, sharded, after `merge`)
//!   shard-1-of-2.json, …         the cells of each shard
//!   <label>/                     a run (one seed), or
//!   <label>/seed-<seed>/         one run per seed
//! ```

use std::path::{Path, PathBuf};

use candle_core::Device;
use posenc_error::{bail, ensure, Context};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::fit::{Diverged, RunOptions, RunState, Settings, Validation};
use crate::job::{self, Job};
use crate::labelled::{check_seeds, check_unique, Labelled};
use crate::results::{self, Found};
use crate::rundir;

/// The kind of an experiment's runs and results: its task's ([`Job::KIND`]).
pub fn job_kind<E: Experiment>() -> &'static str {
    <E::Job<'static> as Job<'static>>::KIND
}

/// The run state of an experiment's runs.
pub type StateOf<E> = RunState<<E as Experiment>::Run, <E as Experiment>::Record>;

/// An experiment of a task: what a cell trains and how its result is recorded. The driver
/// ([`run`], [`run_shard`], [`merge`]) does everything else.
pub trait Experiment {
    /// What the experiment is called in errors: "a translation experiment".
    const KIND: &'static str;
    /// Its settings, as `results.json` and the shards record them.
    type Config: Clone + PartialEq + Serialize + DeserializeOwned;
    /// The settings of one run.
    type Run: Settings;
    /// A run's validation record.
    type Record: Validation;
    /// What every cell shares, prepared once: data, a tokenizer, test instances.
    type Data;
    /// What the prepared data says that the results keep (token counts), `()` if nothing.
    type Facts: Clone + PartialEq + Serialize + DeserializeOwned;
    /// What one cell leaves in the results.
    type Cell: Clone + Serialize + DeserializeOwned;
    /// `results.json`.
    type Results: Serialize + DeserializeOwned;

    /// The settings.
    fn config(&self) -> &Self::Config;

    /// The grid: the entries, in order, and their seeds.
    fn grid(&self) -> Grid<'_>;

    /// Checks every setting and prepares the shared data, before anything is written.
    ///
    /// # Errors
    /// The setting at fault, named; data that cannot be read.
    fn prepare(&self) -> Result<(Self::Data, Self::Facts)>;

    /// The settings of the run of `entry` with `seed`.
    fn run_config(&self, data: &Self::Data, entry: &Labelled, seed: u64) -> Self::Run;

    /// The settings in which a run found in a cell's directory differs from the one wanted
    /// (none: it is this run, perhaps short of its steps).
    fn differences(&self, previous: &Self::Run, wanted: &Self::Run) -> Vec<String> {
        results::differences(previous, wanted)
    }

    /// The task a cell trains ([`Job`]): its settings are the experiment's runs', its
    /// records theirs.
    type Job<'d>: Job<'d, Config = Self::Run, Record = Self::Record>;

    /// What every run is built from besides its settings ([`Job::Inputs`]), out of the
    /// prepared data.
    fn inputs<'d>(&self, data: &'d Self::Data) -> &'d <Self::Job<'d> as Job<'d>>::Inputs;

    /// The device the runs train on.
    fn device(&self) -> &Device;

    /// The cell's result: the trained run in `cell.dir` evaluated, or the divergence
    /// recorded.
    ///
    /// # Errors
    /// An evaluation that fails.
    fn record(
        &self,
        data: &Self::Data,
        cell: &Cell<'_, Self::Run>,
        outcome: Outcome<StateOf<Self>>,
    ) -> Result<Self::Cell>;

    /// The results of the cells run so far, in the grid's order.
    fn results(&self, facts: &Self::Facts, cells: Vec<Self::Cell>) -> Self::Results;

    /// `results.md`.
    fn markdown(results: &Self::Results) -> String;
}

/// An experiment's grid: entries × seeds.
#[derive(Debug, Clone, Copy)]
pub struct Grid<'a> {
    /// The entries, in order.
    pub entries: &'a [Labelled],
    /// The first seed.
    pub first_seed: u64,
    /// Seeds per entry: `first_seed`, `first_seed + 1`, ….
    pub seeds: usize,
}

impl<'a> Grid<'a> {
    /// The grid of `entries` × `seeds` seeds from `first_seed`.
    pub fn new(entries: &'a [Labelled], first_seed: u64, seeds: usize) -> Self {
        Self {
            entries,
            first_seed,
            seeds,
        }
    }

    /// Every (entry, seed) in order: entries, then seeds.
    pub fn cells(&self) -> impl Iterator<Item = (usize, &Labelled, u64)> + '_ {
        let seeds = self.seeds;
        let first = self.first_seed;
        self.entries
            .iter()
            .flat_map(move |e| (0..seeds as u64).map(move |i| (e, first + i)))
            .enumerate()
            .map(|(i, (e, s))| (i, e, s))
    }

    /// How many cells.
    pub fn len(&self) -> usize {
        self.entries.len() * self.seeds
    }

    /// Whether the grid has no cell.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the run of the entry labelled `label` with `seed` trains under `out`
/// ([`rundir::seed_dir`]); `None` if the grid has no such entry.
pub fn run_dir<E: Experiment>(cfg: &E, out: &Path, label: &str, seed: u64) -> Option<PathBuf> {
    let grid = cfg.grid();
    let entry = grid.entries.iter().find(|e| e.label == label)?;
    Some(rundir::seed_dir(
        out,
        entry,
        grid.seeds,
        grid.first_seed,
        seed,
    ))
}

/// One cell of the grid as the task sees it.
#[derive(Debug)]
pub struct Cell<'a, R> {
    /// Its place in the grid's order.
    pub index: usize,
    /// The entry.
    pub entry: &'a Labelled,
    /// The seed.
    pub seed: u64,
    /// The run's settings.
    pub run: R,
    /// Its run directory.
    pub dir: PathBuf,
}

/// How a cell's training ended.
#[derive(Debug)]
pub enum Outcome<S> {
    /// Trained (or found finished): its state.
    Trained(S),
    /// Its loss diverged; the state of its last checkpoint, if it saved one.
    Diverged(Diverged, Option<S>),
}

/// A part of a grid: every `count`-th cell, starting at the `index`-th (both from 1),
/// written `I/N` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// Which shard, 1 to `count`.
    pub index: usize,
    /// How many shards the grid is split into.
    pub count: usize,
}

impl Shard {
    /// Whether the cell at `index` (from 0, in the grid's order) is this shard's.
    pub fn holds(&self, index: usize) -> bool {
        index % self.count == self.index - 1
    }

    /// The shard's file in an experiment's directory: `shard-I-of-N.json`.
    pub fn file_name(&self) -> String {
        format!("shard-{}-of-{}.json", self.index, self.count)
    }

    /// The shard a file name names, if it is one ([`Shard::file_name`]).
    fn from_file_name(name: &str) -> Option<Self> {
        let (i, n) = name
            .strip_prefix("shard-")?
            .strip_suffix(".json")?
            .split_once("-of-")?;
        format!("{i}/{n}").parse().ok()
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = crate::Error;

    /// `I/N` with `1 ≤ I ≤ N`.
    fn from_str(s: &str) -> Result<Self> {
        let parsed = s.split_once('/').and_then(|(i, n)| {
            let number = |t: &str| t.trim().parse::<usize>().ok();
            Some((number(i)?, number(n)?))
        });
        match parsed {
            Some((index, count)) if (1..=count).contains(&index) => Ok(Self { index, count }),
            Some(_) => bail!("a shard is I/N with 1 ≤ I ≤ N, got {s}"),
            None => bail!("a shard is I/N (the I-th of N, e.g. 2/4), got {s:?}"),
        }
    }
}

/// The cells of one shard: `shard-I-of-N.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardFile<C, F, X> {
    /// Which shard.
    pub shard: Shard,
    /// The whole grid's settings.
    pub config: C,
    /// What its data said.
    pub facts: F,
    /// The shard's cells run so far, in the grid's order.
    pub cells: Vec<ShardCell<X>>,
}

/// The shard file of an experiment.
type ShardOf<E> =
    ShardFile<<E as Experiment>::Config, <E as Experiment>::Facts, <E as Experiment>::Cell>;

/// One cell of a shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardCell<C> {
    /// Its place in the grid's order (from 0).
    pub index: usize,
    /// The entry's label.
    pub label: String,
    /// The seed.
    pub seed: u64,
    /// Its result.
    pub cell: C,
}

/// Trains and evaluates every cell of `cfg`'s grid under `out`, writing `results.json` and
/// `results.md` after each.
///
/// # Errors
/// Bad settings or an `out` that holds something else (before anything is written), a run
/// directory holding other settings or files that are not a run, a failed evaluation or
/// write. A diverging run is a row, not an error.
pub fn run<E: Experiment>(cfg: &E, out: &Path, opts: RunOptions) -> Result<E::Results> {
    let (data, facts) = begin(cfg, out)?;
    let mut cells = Vec::new();
    for_each_cell(cfg, &data, out, opts, None, |_, _, _, cell| {
        cells.push(cell);
        save::<E>(out, &cfg.results(&facts, cells.clone()))
    })?;
    Ok(cfg.results(&facts, cells))
}

/// Runs the cells of `shard` only, writing them into `out/shard-I-of-N.json` after each;
/// [`merge`] joins the shards. Shards of one grid may run at once, on one machine or on
/// several sharing `out`.
///
/// # Errors
/// As [`run`].
pub fn run_shard<E: Experiment>(
    cfg: &E,
    out: &Path,
    opts: RunOptions,
    shard: Shard,
) -> Result<PathBuf> {
    let (data, facts) = begin(cfg, out)?;
    let path = out.join(shard.file_name());
    let mut file = ShardFile {
        shard,
        config: cfg.config().clone(),
        facts,
        cells: Vec::new(),
    };
    let write = |file: &ShardOf<E>| -> Result<()> {
        let json = serde_json::to_string_pretty(file)?;
        posenc_io::write_atomic(&path, json.as_bytes())?;
        Ok(())
    };
    write(&file)?;
    for_each_cell(
        cfg,
        &data,
        out,
        opts,
        Some(shard),
        |index, entry, seed, cell| {
            file.cells.push(ShardCell {
                index,
                label: entry.label.clone(),
                seed,
                cell,
            });
            write(&file)
        },
    )?;
    Ok(path)
}

/// The grid the shards in `out` ran: the settings every `shard-I-of-N.json` records, so
/// that `--merge` needs none of the flags they ran with.
///
/// # Errors
/// No shards; a shard file that does not parse; two shards of other grids, named with
/// the settings they differ in.
pub fn shards_config<C: Serialize + DeserializeOwned>(out: &Path) -> Result<C> {
    let shards = shard_files(out)?;
    let Some((first, first_path)) = shards.first() else {
        bail!(
            "{} holds no shards (shard-I-of-N.json): run the grid's shards with --shard I/N first",
            out.display()
        );
    };
    let config = |path: &Path| -> Result<serde_json::Value> {
        let file: serde_json::Value = results::load_results(path)?;
        file.get("config").cloned().ok_or_else(|| {
            posenc_error::invalid!("{} records no grid (`config`)", path.display()).into()
        })
    };
    let grid = config(first_path)?;
    for (shard, path) in &shards[1..] {
        let differ = json_differences(&config(path)?, &grid);
        ensure!(
            differ.is_empty(),
            "{} ran another grid than {} (they differ in {}): merge the shards of one grid",
            shard.file_name(),
            first.file_name(),
            differ.join(", ")
        );
    }
    serde_json::from_value(grid)
        .with_context(|| format!("{} records no grid of this task", first_path.display()))
        .map_err(Into::into)
}

/// Joins the shards of `cfg`'s grid in `out` (`shard-I-of-N.json`, every I from 1 to N)
/// into the `results.json` and `results.md` one process running the whole grid writes.
///
/// # Errors
/// No shard; a shard file that does not parse; shards of different splits (`N`), of
/// another grid than `cfg`, or with other data; a missing or unfinished shard. Nothing is
/// written then.
pub fn merge<E: Experiment>(cfg: &E, out: &Path) -> Result<E::Results> {
    shards_config::<E::Config>(out)?;
    let shards = shard_files(out)?;
    ensure!(
        !shards.is_empty(),
        "{} holds no shards (shard-I-of-N.json): run the grid's shards with --shard I/N first",
        out.display()
    );
    let count = shards[0].0.count;
    if let Some((other, _)) = shards.iter().find(|(s, _)| s.count != count) {
        bail!(
            "{} holds shards of two splits, {} and {}: merge the shards of one split",
            out.display(),
            shards[0].0.file_name(),
            other.file_name()
        );
    }
    let mut files: Vec<ShardOf<E>> = Vec::new();
    for (shard, path) in &shards {
        let file: ShardOf<E> = results::load_results(path)
            .with_context(|| format!("{} is not a shard of {}", path.display(), E::KIND))?;
        ensure!(
            file.shard == *shard,
            "{} holds shard {}, not the {shard} its name says",
            path.display(),
            file.shard
        );
        let differ = json_differences(&file.config, cfg.config());
        ensure!(
            differ.is_empty(),
            "{} ran another grid than this one (it differs in {}): merge with the settings \
             the shards ran with",
            path.display(),
            differ.join(", ")
        );
        if let Some(first) = files.first() {
            ensure!(
                first.facts == file.facts,
                "{} saw other data than {}: its shards must read the same data",
                path.display(),
                first.shard.file_name()
            );
        }
        files.push(file);
    }
    for index in 1..=count {
        ensure!(
            files.iter().any(|f| f.shard.index == index),
            "shard {index}/{count} is missing: {} has no {}",
            out.display(),
            Shard { index, count }.file_name()
        );
    }
    let grid = cfg.grid();
    let mut cells: Vec<Option<E::Cell>> = vec![None; grid.len()];
    for file in &files {
        let expected: Vec<(usize, &Labelled, u64)> = grid
            .cells()
            .filter(|(i, _, _)| file.shard.holds(*i))
            .collect();
        for (k, (index, entry, seed)) in expected.iter().enumerate() {
            let Some(got) = file.cells.get(k) else {
                bail!(
                    "shard {} is unfinished: it has {} of its {} cells, none yet for `{}` \
                     seed {seed}; run it again to finish it",
                    file.shard,
                    file.cells.len(),
                    expected.len(),
                    entry.label
                );
            };
            ensure!(
                got.index == *index && got.label == entry.label && got.seed == *seed,
                "shard {}'s cell {} is `{}` seed {}, where the grid has `{}` seed {seed}",
                file.shard,
                k + 1,
                got.label,
                got.seed,
                entry.label
            );
            cells[*index] = Some(got.cell.clone());
        }
        ensure!(
            file.cells.len() == expected.len(),
            "shard {} holds {} cells, more than its {}",
            file.shard,
            file.cells.len(),
            expected.len()
        );
    }
    let facts = files[0].facts.clone();
    let results = cfg.results(&facts, cells.into_iter().flatten().collect());
    save::<E>(out, &results)?;
    Ok(results)
}

/// Checks the grid, `out` and the settings, prepares the data and creates `out`.
fn begin<E: Experiment>(cfg: &E, out: &Path) -> Result<(E::Data, E::Facts)> {
    let grid = cfg.grid();
    check_unique(grid.entries)?;
    check_seeds(grid.first_seed, grid.seeds)?;
    check_out::<E>(out)?;
    let prepared = cfg.prepare()?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    Ok(prepared)
}

/// Refuses an `out` that holds a training run, or results or shards of another kind of
/// experiment. The driver checks this first; a command that reads large data before it
/// starts the driver may check it sooner.
///
/// # Errors
/// What `out` holds instead, named.
pub fn check_out<E: Experiment>(out: &Path) -> Result<()> {
    results::check_out_dir::<E::Results>(out, job_kind::<E>(), E::KIND)?;
    for (_, path) in shard_files(out)? {
        if results::load_results::<ShardOf<E>>(&path).is_err() {
            bail!(
                "{} is not a shard of {} (another kind of experiment?); choose another --out",
                path.display(),
                E::KIND
            );
        }
    }
    Ok(())
}

/// The shard files in `out`, by shard.
fn shard_files(out: &Path) -> Result<Vec<(Shard, PathBuf)>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("reading {}", out.display()))
                .map_err(Into::into)
        }
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", out.display()))?;
        if let Some(shard) = entry.file_name().to_str().and_then(Shard::from_file_name) {
            found.push((shard, entry.path()));
        }
    }
    found.sort_by_key(|(s, _)| (s.count, s.index));
    Ok(found)
}

/// Runs the cells of the grid (of `shard` only, if given), handing each cell's result to
/// `done` with its index, entry and seed.
fn for_each_cell<E: Experiment>(
    cfg: &E,
    data: &E::Data,
    out: &Path,
    opts: RunOptions,
    shard: Option<Shard>,
    mut done: impl FnMut(usize, &Labelled, u64, E::Cell) -> Result<()>,
) -> Result<()> {
    let grid = cfg.grid();
    let cells: Vec<_> = grid
        .cells()
        .filter(|(index, _, _)| shard.is_none_or(|s| s.holds(*index)))
        .collect();
    let scope = match shard {
        Some(s) => format!("shard {} of {} is done", s.index, s.count),
        None => "the grid is done".to_string(),
    };
    let mut progress = Progress::new(cells.len(), opts.quiet, scope);
    for (index, entry, seed) in cells {
        progress.begin(&entry.label, seed);
        let cell = Cell {
            index,
            entry,
            seed,
            run: cfg.run_config(data, entry, seed),
            dir: rundir::seed_dir(out, entry, grid.seeds, grid.first_seed, seed),
        };
        // Each cell logs into its own run directory.
        let cell_opts = RunOptions {
            log_dir: None,
            ..opts.clone()
        };
        let (outcome, reused) = train_or_reuse(cfg, data, &cell, cell_opts)?;
        let result = cfg.record(data, &cell, outcome)?;
        progress.end(reused, &cell.dir);
        done(index, entry, seed, result)?;
    }
    Ok(())
}

/// The grid's progress on standard error: "run k of n" before each cell, and after it the
/// time left, estimated from the cells trained so far (a reused run costs next to
/// nothing, and says so).
struct Progress {
    total: usize,
    done: usize,
    trained: usize,
    training_s: f64,
    started: std::time::Instant,
    quiet: bool,
    /// What the last cell ends: "the grid is done", "shard 2 of 4 is done".
    scope: String,
}

impl Progress {
    fn new(total: usize, quiet: bool, scope: String) -> Self {
        Self {
            scope,
            total,
            done: 0,
            trained: 0,
            training_s: 0.0,
            started: std::time::Instant::now(),
            quiet,
        }
    }

    fn begin(&mut self, label: &str, seed: u64) {
        self.started = std::time::Instant::now();
        if !self.quiet {
            let k = self.done + 1;
            crate::log(&format!(
                "── run {k} of {}: {label} (seed {seed}) ──",
                self.total
            ));
        }
    }

    fn end(&mut self, reused: bool, dir: &Path) {
        self.done += 1;
        if !reused {
            self.trained += 1;
            self.training_s += self.started.elapsed().as_secs_f64();
        }
        if self.quiet {
            return;
        }
        let left = self.total - self.done;
        let eta = match (left, self.trained) {
            (0, _) => self.scope.clone(),
            (_, 0) => format!("{left} left"),
            (_, n) => format!(
                "{left} left, about {} to go",
                crate::duration(self.training_s / n as f64 * left as f64)
            ),
        };
        let what = match reused {
            true => format!("reused the finished run in {}", dir.display()),
            false => format!(
                "done in {}",
                crate::duration(self.started.elapsed().as_secs_f64())
            ),
        };
        crate::log(&format!("   {what}; {eta}"));
    }
}

/// Trains the cell's run, or reuses or resumes the run already in its directory; and
/// whether it was reused.
fn train_or_reuse<E: Experiment>(
    cfg: &E,
    data: &E::Data,
    cell: &Cell<'_, E::Run>,
    opts: RunOptions,
) -> Result<(Outcome<StateOf<E>>, bool)> {
    let (run, dir) = (&cell.run, cell.dir.as_path());
    let trained = match results::find_run(dir, run, |previous: &StateOf<E>| {
        cfg.differences(&previous.config, run)
    })? {
        Found::Finished(previous) => return Ok((Outcome::Trained(previous), true)),
        Found::Unfinished => {
            let steps = Some(run.steps());
            job::resume::<E::Job<'_>>(dir, steps, cfg.inputs(data), opts, cfg.device())
        }
        Found::Nothing => {
            job::train::<E::Job<'_>>(run.clone(), cfg.inputs(data), dir, opts, cfg.device())
        }
    };
    match trained {
        Ok(state) => Ok((Outcome::Trained(state), false)),
        Err(e) => match e.diverged() {
            Some(d) => Ok((Outcome::Diverged(d, RunState::load(dir).ok()), false)),
            None => Err(e),
        },
    }
}

/// Writes `results.json` and `results.md`.
fn save<E: Experiment>(out: &Path, results: &E::Results) -> Result<()> {
    results::save_results(out, results, &E::markdown(results))
}

/// The fields (and one level below: `base.…`) in which two values differ as JSON.
fn json_differences(a: &impl Serialize, b: &impl Serialize) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(a).unwrap_or_default(),
        serde_json::to_value(b).unwrap_or_default(),
    );
    results::value_differences(&a, &b)
}
