//! One module per subcommand.

pub mod bench;
pub mod embed;
pub mod encoding;
pub mod experiment;
pub mod generate;
pub mod kotoba;
pub mod lengthgen;
pub mod lm;
pub mod model;
pub mod plot;
pub mod report;
pub mod ruler;
pub mod serve;
pub mod translate;
pub mod vision;

use std::io::{BufRead, Write};

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use posenc_train::experiment::{Experiment, Shard};
use posenc_train::results::{RESULTS_JSON, RESULTS_MD};

/// A comma-separated list of labelled encodings ([`posenc_train::labelled`]): each a kind,
/// `kind:key=value:…` or a JSON object; commas inside a JSON object do not split it
/// (`rope,{"kind": "learned", "max_positions": 64}`).
#[derive(Debug, Clone)]
pub struct EncodingList(pub Vec<posenc_train::labelled::Labelled>);

impl std::str::FromStr for EncodingList {
    type Err = posenc_train::Error;

    fn from_str(s: &str) -> posenc_train::Result<Self> {
        posenc_train::labelled::parse_list(s).map(Self)
    }
}

/// Parses an `--encoding` as `T` (by its `FromStr`), and offers the registered kinds to a
/// shell's completion (`posenc completions`); the help does not list them (`posenc
/// encoding list` does, with their settings).
#[derive(Clone)]
pub struct EncodingParser<T>(std::marker::PhantomData<fn() -> T>);

impl<T> EncodingParser<T> {
    /// The parser.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T> Default for EncodingParser<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> clap::builder::TypedValueParser for EncodingParser<T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        clap::builder::StringValueParser::new()
            .try_map(|s: String| s.parse::<T>())
            .parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let mut kinds = posenc::EncodingConfig::kinds();
        kinds.extend(posenc::EncodingConfig::presets());
        Some(Box::new(
            kinds.into_iter().map(clap::builder::PossibleValue::new),
        ))
    }
}

/// How a command prints its results: text to read (tables), or JSON for scripts, alone on
/// standard output (progress and warnings go to standard error either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Text and Markdown tables, to read.
    #[default]
    #[value(alias = "table")]
    Text,
    /// JSON, alone on standard output.
    Json,
}

/// Prints a finished run as JSON, alone on standard output: where it is and its state
/// (settings, steps, validation history, time, peak memory), as its `trainer.json` holds it.
///
/// # Errors
/// A failed write.
pub fn print_run(out: &mut impl Write, dir: &Path, state: &impl serde::Serialize) -> Result<()> {
    let json = serde_json::json!({"out": dir, "state": state});
    writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
    Ok(())
}

/// How a task's `train` was asked to run: continue `dir` (`--resume`), print the config it
/// would train (`--print-config`), or train it into `dir`.
pub struct TrainRequest<'a> {
    /// The run directory.
    pub dir: &'a Path,
    /// `--resume`.
    pub resume: bool,
    /// `--print-config`.
    pub print_config: bool,
    /// `--steps`, which a resumed run may extend to.
    pub steps: Option<usize>,
    /// Where to train.
    pub device: &'a candle_core::Device,
    /// `--quiet`, `--force` and `--log-dir`.
    pub opts: posenc_train::fit::RunOptions,
}

impl TrainRequest<'_> {
    /// The run's state once trained (or resumed) from the config `config` gives, or `None`
    /// when the config was only printed to `out`, for a task `J` that reads nothing beside
    /// its config.
    ///
    /// # Errors
    /// The config's, or the run's, with what `dir` holds named.
    pub fn run<J>(
        self,
        config: impl FnOnce() -> Result<J::Config>,
        out: &mut impl Write,
    ) -> Result<Option<posenc_train::fit::StateOf<J>>>
    where
        J: posenc_train::job::Job<'static, Inputs = ()>,
    {
        if self.resume {
            return posenc_train::job::resume::<J>(
                self.dir,
                self.steps,
                &(),
                self.opts,
                self.device,
            )
            .map(Some)
            .map_err(|e| for_task(e, self.dir, J::KIND));
        }
        let run = config()?;
        if self.print_config {
            writeln!(out, "{}", serde_json::to_string_pretty(&run)?)?;
            return Ok(None);
        }
        Ok(Some(posenc_train::job::train::<J>(
            run,
            &(),
            self.dir,
            self.opts,
            self.device,
        )?))
    }
}

/// One encoding, in the grammar every command reads: a kind (`rope`), a kind with settings
/// (`rope:base=500000`) or a JSON object (`{"kind": "rope", "base": 500000}`); the same as
/// one entry of `--encodings`, without a label.
#[derive(Debug, Clone)]
pub struct EncodingArg(pub posenc::EncodingConfig);

impl std::str::FromStr for EncodingArg {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let entry: posenc_train::labelled::Labelled = s.parse()?;
        anyhow::ensure!(
            entry.randomized_positions.is_none(),
            "`{s}`: randomized positions are the --randomized-positions flag here"
        );
        Ok(Self(entry.encoding))
    }
}

/// What kind of run `dir` holds, as `(the task that reads it, what it is)`: the kind its
/// manifest names, or, for a run written before manifests named it, the task whose state
/// its `trainer.json` parses as; `None` for no run of ours.
pub fn run_kind(dir: &Path) -> Option<(&'static str, &'static str)> {
    let named = posenc_train::job::kind_of(dir).ok()?;
    crate::RUNS
        .iter()
        .find(|(kind, _, older)| match &named {
            Some(named) => named == kind,
            None => older(dir),
        })
        .map(|&(kind, what, _)| (kind, what))
}

/// `e`, or, when `dir` holds a run of another task than `task`, an error that says so
/// (instead of the field its settings lack).
pub fn for_task(e: impl Into<anyhow::Error>, dir: &Path, task: &str) -> anyhow::Error {
    match run_kind(dir) {
        Some((other, what)) if other != task => anyhow::anyhow!(
            "{} is {what}, which `posenc {other} …` reads, not `posenc {task} …`",
            dir.display()
        ),
        _ => e.into(),
    }
}

/// The verbs of a task (`posenc <task> <verb>`), registered in the `tasks!` list of the
/// command line.
pub trait TaskCommand {
    /// The kind its runs and experiments' results carry: its task's
    /// ([`posenc_train::job::Job::KIND`]), which is also the command's name.
    const KIND: &'static str;

    /// What one of its runs is, in a message: "a lengthgen run".
    const A_RUN: &'static str;

    /// Whether `dir` holds a run of this task written before runs carried their kind: its
    /// `trainer.json` parses as the task's state.
    fn holds_older_run(dir: &Path) -> bool;

    /// The page and the tidy records of this task's experiment whose `results.json` is
    /// at `path`.
    ///
    /// # Errors
    /// A file that is not this task's results.
    fn study(path: &Path) -> Result<(String, serde_json::Value)>;

    /// Runs the verb, writing what it prints to `out`.
    ///
    /// # Errors
    /// Whatever stopped it, with its causes.
    fn run(self, out: &mut impl Write) -> Result<()>;

    /// Whether the verb trains a model (the process is then set up for training).
    fn trains(&self) -> bool;

    /// How the verb, stopped by Ctrl-C, is taken up again (none for a verb that does not
    /// train).
    fn resume(&self) -> Option<Resume> {
        None
    }
}

/// How an interrupted command is taken up again.
#[derive(Debug, Clone, Copy)]
pub enum Resume {
    /// `posenc <task> train --resume --out DIR`.
    Train(&'static str),
    /// The same command again: its finished runs are reused and the interrupted one
    /// resumed.
    Rerun,
}

/// A training command stopped by Ctrl-C (or SIGTERM), its checkpoint saved: what happened
/// and the command that goes on from there.
#[derive(Debug, thiserror::Error)]
#[error("{interrupted}; {}", match (resume, &interrupted.dir) {
    (Resume::Train(task), Some(dir)) => format!(
        "go on with: posenc {task} train --resume --out {}", dir.display()
    ),
    _ => "run the same command again to go on: its finished runs are reused and this one \
          resumed".to_string(),
})]
pub struct Stopped {
    /// Where the run stopped.
    pub interrupted: posenc_train::fit::Interrupted,
    /// How to go on.
    pub resume: Resume,
}

/// The interruption `e` comes from, if it does.
pub fn interrupted(e: &anyhow::Error) -> Option<posenc_train::fit::Interrupted> {
    e.chain().find_map(|c| {
        c.downcast_ref::<posenc_train::Error>()
            .and_then(posenc_train::Error::interrupted)
            .or_else(|| c.downcast_ref::<posenc_train::fit::Interrupted>().cloned())
            .or_else(|| c.downcast_ref::<Stopped>().map(|s| s.interrupted.clone()))
    })
}

/// `--seeds`, in every command a count of seeds (from `--seed` up), never a list: a list
/// is refused with the flags that say it.
///
/// # Errors
/// Not a number, or 0; a list, with its spelling as `--seed S --seeds N` when its seeds
/// are consecutive.
pub fn seed_count(s: &str) -> Result<usize> {
    if let Ok(n) = s.trim().parse::<usize>() {
        anyhow::ensure!(n > 0, "give at least one seed");
        return Ok(n);
    }
    let list: Option<Vec<u64>> = s.split(',').map(|x| x.trim().parse().ok()).collect();
    match list {
        Some(l) if l.len() > 1 && l.windows(2).all(|w| w[1] == w[0] + 1) => anyhow::bail!(
            "--seeds is a count, not a list: for seeds {s} give --seed {} --seeds {}",
            l[0],
            l.len()
        ),
        Some(l) if l.len() > 1 => anyhow::bail!(
            "--seeds is a count of consecutive seeds from --seed, not a list: run each of {s} \
             apart with --seed, or a consecutive range"
        ),
        _ => anyhow::bail!("--seeds is a count of seeds: `{s}` is not a number"),
    }
}

/// The grid of an experiment, the same flags for every task: which encodings, how many
/// seeds, and which part of the grid this process runs.
#[derive(clap::Args, Debug)]
pub struct GridArgs {
    /// Comma-separated encodings, each `kind`, `kind:key=value:…` (`label=` names it,
    /// `randomized=R` trains it at randomized positions) or a JSON object [default: the
    /// experiment's lineup, above].
    #[arg(long)]
    pub encodings: Option<EncodingList>,
    /// Seeds per encoding, counted up from --seed: each row is then their mean ± standard
    /// deviation [default: the experiment's, above].
    #[arg(long, value_parser = seed_count)]
    pub seeds: Option<usize>,
    /// Run only every N-th cell (encoding × seed) of the grid, starting at the I-th, and
    /// write them into shard-I-of-N.json in --out: one process or machine per shard.
    #[arg(long, value_name = "I/N", conflicts_with = "merge")]
    pub shard: Option<Shard>,
    /// Join the shards in --out (every shard-I-of-N.json) into the results.json one
    /// process would have written, and draw its figures; the grid is the one the shards
    /// recorded, so no other setting is given.
    #[arg(long, conflicts_with_all = ["shard", "encodings", "seeds"])]
    pub merge: bool,
    /// Output format: text (the table, and where the results and figures are) or json (the
    /// results, as results.json holds them, alone on standard output).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

impl GridArgs {
    /// With `--merge`, the grid the shards in `dir` ran
    /// ([`posenc_train::experiment::shards_config`]), after refusing any of the `given`
    /// settings (`(flag, whether it was given)`): the shards say them all; `None` without.
    ///
    /// # Errors
    /// A setting given beside `--merge`; the shards' own.
    pub fn merged_config<C: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        dir: &Path,
        given: &[(&str, bool)],
    ) -> Result<Option<C>> {
        if !self.merge {
            return Ok(None);
        }
        let given: Vec<&str> = given.iter().filter(|(_, g)| *g).map(|(f, _)| *f).collect();
        anyhow::ensure!(
            given.is_empty(),
            "--merge reads the grid from the shards, which recorded it: leave out {}",
            given.join(", ")
        );
        Ok(Some(posenc_train::experiment::shards_config(dir)?))
    }

    /// Runs `experiment` into `dir` as these flags say (the whole grid, one shard, or the
    /// merge of the shards), then prints its table and where its results and figures are;
    /// `figures` draws them.
    pub fn run<E: Experiment>(
        &self,
        experiment: &E,
        dir: &Path,
        opts: posenc_train::fit::RunOptions,
        out: &mut impl Write,
        figures: impl FnOnce(&E::Results) -> Result<(String, Vec<PathBuf>)>,
    ) -> Result<()> {
        let results = match (self.shard, self.merge) {
            (Some(shard), _) => {
                let path = posenc_train::experiment::run_shard(experiment, dir, opts, shard)?;
                match self.format {
                    Format::Json => writeln!(
                        out,
                        "{}",
                        serde_json::json!({"shard": shard.to_string(), "file": path})
                    )?,
                    Format::Text => writeln!(
                        out,
                        "shard {} of {} done: {}; once every shard is done, join them with \
                         --merge --out {}",
                        shard.index,
                        shard.count,
                        path.display(),
                        dir.display()
                    )?,
                }
                return Ok(());
            }
            (None, true) => posenc_train::experiment::merge(experiment, dir)?,
            (None, false) => posenc_train::experiment::run(experiment, dir, opts)?,
        };
        let (table, plots) = figures(&results)?;
        self.print(&results, &table, &plots, dir, out)
    }

    /// Prints an experiment's results as `--format` says: its table and where its results
    /// and figures are, or the results alone as JSON.
    pub fn print(
        &self,
        results: &impl serde::Serialize,
        table: &str,
        plots: &[PathBuf],
        dir: &Path,
        out: &mut impl Write,
    ) -> Result<()> {
        if self.format == Format::Json {
            writeln!(out, "{}", serde_json::to_string_pretty(results)?)?;
            return Ok(());
        }
        write!(out, "{table}")?;
        let plots: Vec<String> = plots.iter().map(|p| p.display().to_string()).collect();
        writeln!(
            out,
            "\n{RESULTS_MD} and {RESULTS_JSON} in {}; plots: {}",
            dir.display(),
            plots.join(", ")
        )?;
        Ok(())
    }
}

/// The sentences given as arguments, or with none, one per line from standard input.
pub fn sentences_or_stdin(args: Vec<String>) -> Result<Vec<String>> {
    if !args.is_empty() {
        return Ok(args);
    }
    std::io::stdin()
        .lock()
        .lines()
        .enumerate()
        .map(|(i, line)| line.with_context(|| format!("reading line {} of standard input", i + 1)))
        .collect()
}

/// `, peak N MB`: a run's peak resident memory for a report line, or nothing where it is
/// not known.
fn peak_note(peak_rss_mb: Option<f64>) -> String {
    peak_rss_mb.map_or(String::new(), |mb| format!(", peak {mb:.0} MB"))
}

/// How much a run or a grid of runs spends: the study's own settings, or a few minutes on
/// two cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Budget {
    /// The study's settings.
    #[default]
    Full,
    /// Fewer steps, encodings and test instances: minutes, not half an hour.
    Quick,
}

/// `--log-dir DIR`: where a training run's curves go (TensorBoard event files and
/// `scalars.jsonl`).
#[derive(clap::Args, Debug, Clone)]
pub struct LogDirArg {
    /// Where the run's curves go, as TensorBoard event files and scalars.jsonl; with
    /// --resume, they go on there from the checkpoint [default: where the run keeps them:
    /// --out's logs/, or the --log-dir it was started with]
    #[arg(long)]
    log_dir: Option<PathBuf>,
}

impl LogDirArg {
    /// The run options of a `train` command.
    pub fn options(&self, quiet: bool, force: bool) -> posenc_train::fit::RunOptions {
        posenc_train::fit::RunOptions {
            quiet,
            force,
            stop_after: None,
            log_dir: self.log_dir.clone(),
        }
    }
}

/// `--budget full|quick`, or `--quick` for short (listed in the help: hidden, it was a
/// flag users could not find).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct BudgetArg {
    /// How much to spend: `full` (the study's settings) or `quick` (minutes on two cores).
    #[arg(long, value_enum, default_value_t = Budget::Full)]
    budget: Budget,
    /// The same as `--budget quick`.
    #[arg(long, conflicts_with = "budget")]
    quick: bool,
}

impl BudgetArg {
    /// Whether the quick budget was asked for, in either spelling.
    pub fn quick(&self) -> bool {
        self.quick || self.budget == Budget::Quick
    }
}

/// Where a command computes: `cpu` (the default), `cuda` / `cuda:N` (a build with
/// `--features cuda`) or `metal` / `metal:N` (`--features metal`). The fused kernels are
/// the CPU's; on a GPU every op is candle's.
#[derive(Debug, Clone)]
pub struct DeviceArg(pub candle_core::Device);

impl std::str::FromStr for DeviceArg {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let (kind, ordinal) = match s.split_once(':') {
            Some((kind, n)) => (
                kind,
                n.parse::<usize>()
                    .with_context(|| format!("the device number in {s:?} is not a number"))?,
            ),
            None => (s, 0),
        };
        let (built, feature) = match kind {
            "cpu" if ordinal == 0 => return Ok(Self(candle_core::Device::Cpu)),
            "cuda" => (candle_core::utils::cuda_is_available(), "cuda"),
            "metal" => (candle_core::utils::metal_is_available(), "metal"),
            _ => anyhow::bail!("unknown device {s:?}: cpu, cuda, cuda:N, metal or metal:N"),
        };
        anyhow::ensure!(
            built,
            "this posenc was built without {kind} support: build it with `cargo build --release --features {feature}`"
        );
        let device = match kind {
            "cuda" => candle_core::Device::new_cuda(ordinal),
            _ => candle_core::Device::new_metal(ordinal),
        };
        // The cause in the message itself: clap shows only the outermost context.
        Ok(Self(device.map_err(|e| {
            anyhow::anyhow!("opening the device {s}: {e}")
        })?))
    }
}

impl std::fmt::Display for DeviceArg {
    /// The device as `--device` takes it: `cpu`, `cuda:N` or `metal:N`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&posenc_bench::device_spec(&self.0))
    }
}

/// `--rope-scaling`: transformers' `rope_parameters` as JSON, applied to a causal language
/// model's encoding (which must be `rope`), replacing any scaling it was loaded with (or,
/// on `lm train`, the encoding it trains with).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RopeScalingArg {
    /// Stretch the rotary encoding's context, with transformers' `rope_parameters` keys:
    /// '{"rope_type": "yarn", "factor": 2}' (rope_type linear, dynamic, yarn, llama3 or
    /// longrope; original_max_position_embeddings defaults to the model's context)
    /// [default: none, the encoding as the model was trained].
    #[arg(long, value_name = "JSON")]
    rope_scaling: Option<String>,
}

impl RopeScalingArg {
    /// The JSON as given.
    pub fn json(&self) -> Option<&str> {
        self.rope_scaling.as_deref()
    }

    /// `model` with the scaling applied, or as it is without the flag.
    ///
    /// # Errors
    /// JSON that is not an object of the settings, or a model whose encoding is not `rope`.
    pub fn apply(
        &self,
        model: posenc_transformer::LanguageModel,
    ) -> Result<posenc_transformer::LanguageModel> {
        if self.rope_scaling.is_none() {
            return Ok(model);
        }
        let encoding = self.apply_to(&model.config().encoding)?;
        Ok(model.with_encoding(&encoding)?)
    }

    /// `encoding` with the scaling set, or as it is without the flag.
    ///
    /// # Errors
    /// As [`RopeScalingArg::apply`].
    pub fn apply_to(&self, encoding: &posenc::EncodingConfig) -> Result<posenc::EncodingConfig> {
        let Some(json) = &self.rope_scaling else {
            return Ok(encoding.clone());
        };
        let value: serde_json::Value = serde_json::from_str(json)
            .ok()
            .filter(serde_json::Value::is_object)
            .with_context(|| format!("--rope-scaling takes a JSON object, got {json:?}"))?;
        encoding
            .with_setting("scaling", value)
            .context("--rope-scaling")
    }
}

/// The learning-rate schedule of a run trained from scratch: its peak, its floor and its
/// warm-up, each replacing the config's (or the command's default) when given.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct ScheduleArgs {
    /// Peak learning rate [default: the config's or the budget's; --print-config shows
    /// it]; without --min-lr the floor keeps its ratio to the peak.
    // Negative numbers are taken as values, so the range check names them.
    #[arg(long, allow_negative_numbers = true)]
    lr: Option<f64>,
    /// The learning rate the cosine decay ends at [default: the config's or the budget's,
    /// scaled with --lr].
    #[arg(long, allow_negative_numbers = true)]
    min_lr: Option<f64>,
    /// Warm-up steps, the learning rate rising linearly to its peak [default: the config's
    /// or the budget's].
    #[arg(long)]
    warmup: Option<usize>,
}

impl ScheduleArgs {
    /// Each flag, and whether it was given (`--merge` refuses them).
    pub fn given(&self) -> [(&'static str, bool); 3] {
        [
            ("--lr", self.lr.is_some()),
            ("--min-lr", self.min_lr.is_some()),
            ("--warmup", self.warmup.is_some()),
        ]
    }

    /// `(lr, min_lr, warmup)` with the flags given applied: a new peak without `--min-lr`
    /// scales the floor with it, so `--lr 1e-5` alone is never refused for a floor above it.
    pub fn apply(&self, lr: f64, min_lr: f64, warmup: usize) -> (f64, f64, usize) {
        let peak = self.lr.unwrap_or(lr);
        let floor = match (self.min_lr, self.lr) {
            (Some(floor), _) => floor,
            (None, Some(peak)) if lr > 0.0 => min_lr * peak / lr,
            (None, _) => min_lr,
        };
        (peak, floor, self.warmup.unwrap_or(warmup))
    }
}

/// A task's model from scratch when neither its config nor a flag sets one: the defaults
/// `--d-model`, `--layers` and `--heads` show in its `--help`.
pub trait DefaultSize: Send + Sync + 'static {
    /// The model trained from scratch by default.
    fn size() -> posenc_transformer::LmConfig;
}

/// The language-model task's default model.
#[derive(Debug, Clone, Copy)]
pub struct LmSize;

impl DefaultSize for LmSize {
    fn size() -> posenc_transformer::LmConfig {
        posenc_lm::task::LmTrainConfig::default().model
    }
}

/// The lengthgen task's default model.
#[derive(Debug, Clone, Copy)]
pub struct LengthgenSize;

impl DefaultSize for LengthgenSize {
    fn size() -> posenc_transformer::LmConfig {
        posenc_lengthgen::task::LengthgenConfig::default().model
    }
}

/// The size of a model trained from scratch: `--d-model`, `--layers`, `--heads`, each
/// replacing the command's default `D` (or its config's) when given.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct ModelSizeArgs<D: DefaultSize + Clone + std::fmt::Debug> {
    /// Model width (the feed-forward width follows at 4 × it).
    #[arg(long, help = format!(
        "Model width (the feed-forward width follows at 4 × it) [default: the config's, else \
         {}]",
        D::size().d_model
    ))]
    d_model: Option<usize>,
    /// Layers.
    #[arg(long, help = format!("Layers [default: the config's, else {}]", D::size().layers))]
    layers: Option<usize>,
    /// Attention heads.
    #[arg(long, help = format!(
        "Attention heads [default: the config's, else {}]",
        D::size().heads
    ))]
    heads: Option<usize>,
    #[arg(skip)]
    task: std::marker::PhantomData<D>,
}

impl<D: DefaultSize + Clone + std::fmt::Debug> ModelSizeArgs<D> {
    /// Each flag, and whether it was given (`--merge` refuses them).
    pub fn given(&self) -> [(&'static str, bool); 3] {
        [
            ("--d-model", self.d_model.is_some()),
            ("--layers", self.layers.is_some()),
            ("--heads", self.heads.is_some()),
        ]
    }

    /// Sets the sizes given on `model`; its own config's checks name a bad one.
    pub fn apply_to(&self, model: &mut posenc_transformer::LmConfig) {
        if let Some(d) = self.d_model {
            (model.d_model, model.d_ff) = (d, 4 * d);
        }
        model.layers = self.layers.unwrap_or(model.layers);
        model.heads = self.heads.unwrap_or(model.heads);
    }
}

use posenc_lm::sample::Sampling;

/// How `generate` commands pick each next token.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct SamplingArgs {
    /// Sampling temperature (0: greedy).
    // Negative numbers are taken as values, so the range check names them.
    #[arg(
        long,
        visible_alias = "temp",
        default_value_t = 0.8,
        allow_negative_numbers = true
    )]
    temperature: f64,
    /// Sample among the k most likely tokens [default: off, every token].
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the most likely tokens holding this much probability [default: off,
    /// every token].
    #[arg(long, allow_negative_numbers = true)]
    top_p: Option<f64>,
    /// Sample among the tokens at least this fraction as likely as the most likely one
    /// [default: off, every token].
    #[arg(long, allow_negative_numbers = true)]
    min_p: Option<f64>,
    /// Divide the positive scores of the tokens among the last `--repeat-last-n` (prompt
    /// included) by this, and multiply their negative ones: 1 is off.
    #[arg(long, default_value_t = Sampling::default().repeat_penalty, allow_negative_numbers = true)]
    repeat_penalty: f64,
    /// How many of the latest tokens the repeat penalty looks at (0: none).
    #[arg(long, default_value_t = Sampling::default().repeat_last_n)]
    repeat_last_n: usize,
    /// Seed of the draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl From<SamplingArgs> for Sampling {
    fn from(a: SamplingArgs) -> Self {
        Self {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repeat_penalty: a.repeat_penalty,
            repeat_last_n: a.repeat_last_n,
            seed: a.seed,
        }
    }
}

/// The prompt given, or standard input when none is; an empty one is an error.
pub fn read_prompt(prompt: Option<String>) -> Result<String> {
    let prompt = match prompt {
        Some(p) => p,
        None => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("reading the prompt from standard input")?;
            // `echo … |` ends the prompt with a line end the user did not mean to give.
            let end = text
                .strip_suffix("\r\n")
                .or_else(|| text.strip_suffix('\n'));
            end.map(str::to_string).unwrap_or(text)
        }
    };
    anyhow::ensure!(
        !prompt.is_empty(),
        "the prompt is empty: give at least one character"
    );
    Ok(prompt)
}

/// Standard output, buffered, whose errors say they are about standard output (a full
/// disk, a closed pipe) and keep their kind, so `main` can tell a closed pipe apart.
pub struct Stdout(std::io::BufWriter<std::io::StdoutLock<'static>>);

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

impl Stdout {
    /// Locks standard output.
    pub fn new() -> Self {
        Self(std::io::BufWriter::new(std::io::stdout().lock()))
    }

    /// Flushes what is left; an error names standard output.
    pub fn finish(&mut self) -> Result<()> {
        Ok(self.flush()?)
    }
}

fn named(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("writing to standard output: {e}"))
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).map_err(named)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(named)
    }
}

/// Whether `e` comes from writing into a pipe whose reader has gone.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// An error's message with its causes, each said once, control characters escaped.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = without_backtrace(&cause.to_string());
        // A cause already quoted in full by the message before it adds nothing.
        if parts.last().is_some_and(|p| p.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts
        .join(": ")
        .chars()
        .flat_map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// `text` up to the first frame of a backtrace in it: with `RUST_BACKTRACE` set, candle
/// writes the backtrace it captured into the error's own text, and a user's mistake (a
/// text file given as a model) is no reason to print forty frames.
fn without_backtrace(text: &str) -> String {
    let is_frame = |line: &str| {
        let t = line.trim_start();
        let digits = t.chars().take_while(char::is_ascii_digit).count();
        digits > 0 && t[digits..].starts_with(": ") && line.starts_with(' ')
    };
    let lines: Vec<&str> = text.lines().take_while(|l| !is_frame(l)).collect();
    lines.join("\n").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::DeviceArg;

    /// `--budget quick` and its earlier spelling `--quick` ask for the same; without either
    /// the budget is full; both at once are refused, and so is a budget with no name.
    #[test]
    fn the_budget_reads_both_spellings() {
        use clap::Parser;
        #[derive(Parser, Debug)]
        struct Cmd {
            #[command(flatten)]
            budget: super::BudgetArg,
        }
        let quick = |args: &[&str]| {
            Cmd::try_parse_from(std::iter::once("cmd").chain(args.iter().copied()))
                .map(|c| c.budget.quick())
        };
        assert!(quick(&["--budget", "quick"]).unwrap());
        assert!(quick(&["--quick"]).unwrap());
        assert!(!quick(&[]).unwrap());
        assert!(!quick(&["--budget", "full"]).unwrap());
        assert!(quick(&["--budget", "full", "--quick"]).is_err());
        assert!(quick(&["--budget", "fast"]).is_err());
    }

    /// A backtrace in an error's text (candle's, with `RUST_BACKTRACE` set) is cut at its
    /// first frame; a message of several lines without one is kept whole.
    #[test]
    fn backtraces_are_cut_from_error_texts() {
        let with = "no GGUF magic in README.md\n   0: candle_core::error::Error::bt\n             at src/error.rs:258:25\n   1: posenc::main";
        assert_eq!(super::without_backtrace(with), "no GGUF magic in README.md");
        let plain = "two lines:\nthe second 2: kept";
        assert_eq!(super::without_backtrace(plain), plain);
    }

    /// `--device` reads back what it writes (a GPU only where this build has one).
    #[test]
    fn a_device_reads_back_as_written() {
        let mut names = vec!["cpu".to_string()];
        if candle_core::utils::cuda_is_available() {
            names.push("cuda:0".into());
        }
        for name in names {
            let device: DeviceArg = name.parse().unwrap();
            assert_eq!(device.to_string(), name);
        }
    }
}
