//! `posenc lm train|generate|eval|passkey|experiment`: causal language models, ours trained
//! on Shakespeare and pretrained ones alike.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Format;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use posenc_lm::corpus::{self, Corpus, TextSource};
use posenc_lm::experiment::{self, LmExperimentConfig};
use posenc_lm::passkey::{self, PasskeyConfig, PasskeyRecord, Subject};
use posenc_lm::run::{self, LmInputs};
use posenc_lm::tables;
use posenc_lm::task::{
    evaluate_observed, evaluate_strided, LengthEval, LmData, LmState, LmTask, LmTrainConfig,
    StridedEval,
};
use posenc_lm::text_tokenizer::TextTokenizer;
use posenc_train::fit::RunOptions;
use posenc_train::job::{self, Job};
use posenc_transformer::Streaming;
use serde::Serialize;

use super::model::{self, ModelArgs};

/// Which tokenization.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TokenizerArg {
    /// One token per character.
    Char,
    /// Byte-level BPE (see --merges).
    Bpe,
}

/// Which split to evaluate on.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Split {
    /// Twelfth Night and Julius Caesar.
    Valid,
    /// Hamlet, Macbeth and The Tempest.
    Test,
}

/// `posenc lm train`
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// The run directory: new or empty (or, with --resume, a run to continue).
    #[arg(long, default_value = "runs/lm")]
    out: PathBuf,
    /// A JSON training config (model, tokenizer, steps, schedule); flags override it.
    /// With --from, only its training settings are used.
    #[arg(long, conflicts_with = "resume")]
    config: Option<PathBuf>,
    /// Start from this trained run's weights, model and tokenizer (to fine-tune it at a
    /// longer --context, or with another --encoding of the same parameters) into a new run.
    #[arg(long, conflicts_with_all = ["resume", "tokenizer", "d_model", "layers", "heads"])]
    from: Option<PathBuf>,
    /// The positional encoding.
    #[arg(long, conflicts_with = "resume", value_parser = super::EncodingParser::<super::EncodingArg>::new(), hide_possible_values = true, help = format!(
        "The positional encoding: a kind, `kind:key=value:…` or a JSON object (`posenc \
         encoding list` shows them all) [default: the config's, else {}]",
        LmTrainConfig::default().model.encoding.kind()
    ))]
    encoding: Option<super::EncodingArg>,
    /// The training context L.
    #[arg(long, conflicts_with = "resume", help = format!(
        "The training context L [default: the config's, else {}]",
        LmTrainConfig::default().model.context
    ))]
    context: Option<usize>,
    /// The tokenization [default: the config's, else char].
    #[arg(long, value_enum, conflicts_with = "resume")]
    tokenizer: Option<TokenizerArg>,
    /// BPE merges (with --tokenizer bpe).
    #[arg(long, default_value_t = 2000, conflicts_with = "resume")]
    merges: usize,
    /// Optimizer steps in all (with --resume: raise the run's own).
    #[arg(long, help = format!(
        "Optimizer steps in all (with --resume: raise the run's own) [default: the config's, \
         else {}]",
        LmTrainConfig::default().run.steps
    ))]
    steps: Option<usize>,
    /// Randomized positions: train at sorted random positions below this (Ruoss et al. 2023)
    /// [default: off, consecutive positions from 0].
    #[arg(long, conflicts_with = "resume")]
    randomized_positions: Option<usize>,
    /// Seed of the weights and of the windows drawn.
    #[arg(long, conflicts_with = "resume", help = format!(
        "Seed of the weights and of the windows drawn [default: the config's, else {}]",
        LmTrainConfig::default().run.seed
    ))]
    seed: Option<u64>,
    #[command(flatten)]
    schedule: super::ScheduleArgs,
    /// Windows per step.
    #[arg(long, conflicts_with = "resume", help = format!(
        "Windows per step [default: the config's, else {}]",
        LmTrainConfig::default().run.batch_size
    ))]
    batch_size: Option<usize>,
    /// Print the full config this command would train with, as JSON that --config takes
    /// back, and train nothing.
    #[arg(long, conflicts_with = "resume")]
    print_config: bool,
    /// Output format: text (a summary line) or json (the run's state, alone on standard
    /// output).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    size: super::ModelSizeArgs<super::LmSize>,
    #[command(flatten)]
    rope_scaling: super::RopeScalingArg,
    /// Continue the run in --out from its last checkpoint, bit-identically.
    #[arg(long, conflicts_with_all = ["d_model", "layers", "heads"])]
    resume: bool,
    /// Replace a run already in --out (never files posenc did not write).
    #[arg(long, conflicts_with = "resume")]
    force: bool,
    #[command(flatten)]
    log_dir: super::LogDirArg,
    /// The corpus directory [default: .cache/shakespeare, from scripts/fetch_shakespeare.sh].
    #[arg(long, conflicts_with = "text")]
    corpus: Option<PathBuf>,
    /// Train on your own text instead: a UTF-8 file (split at a line) or a directory of .txt
    /// files (split by file).
    #[arg(long, conflicts_with = "resume")]
    text: Option<PathBuf>,
    /// The share of --text held out for validation.
    #[arg(long, default_value_t = 0.1, requires = "text")]
    valid_fraction: f64,
    /// Where to train: cpu; cuda or cuda:N (built with --features cuda); metal or metal:N
    /// (--features metal). The run directory is the same on any device.
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

/// `posenc lm eval`
#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Window lengths [default: 1, 2, 4 and 8 times the trained context].
    #[arg(long, value_delimiter = ',')]
    lengths: Option<Vec<usize>>,
    /// Non-overlapping windows per length, at most.
    #[arg(long, default_value_t = 64, conflicts_with = "stride")]
    windows: usize,
    /// Slide each window by this many tokens over the whole text, scoring only the tokens
    /// no earlier window scored (transformers' perplexity guide): every token once, with
    /// context before it [default: off, separate windows (--windows)].
    #[arg(long)]
    stride: Option<usize>,
    /// Read each window a token at a time through a rolling key/value cache that holds
    /// this many positions: the first --sinks tokens and the most recent ones, each at its
    /// place within the cache (StreamingLLM, Xiao et al. 2024), in memory that stays flat
    /// however long the window [default: off, each window read whole].
    #[arg(long, requires = "sinks", conflicts_with = "stride")]
    window: Option<usize>,
    /// The tokens a rolling cache keeps from the start of each window (attention sinks; 0:
    /// none, the cache holds only the most recent tokens) [default: off; given with
    /// --window].
    #[arg(long, requires = "window")]
    sinks: Option<usize>,
    /// The split of the Shakespeare corpus [default: test; for a run trained on its own
    /// --text: valid, that text's held-out part, the only one it has].
    #[arg(long, value_enum, conflicts_with = "text")]
    split: Option<Split>,
    /// Evaluate on this text file instead of the corpus.
    #[arg(long)]
    text: Option<PathBuf>,
    /// The corpus directory [default: .cache/shakespeare].
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: super::Format,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// `posenc lm passkey`
#[derive(Args, Debug)]
pub struct PasskeyArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt lengths in tokens [default: 0.5, 1, 2 and 4 times the trained context, each
    /// at least the shortest prompt the tokenizer can make, doubled on from there].
    #[arg(long, value_delimiter = ',')]
    lengths: Option<Vec<usize>>,
    /// Where the key sits in the filler, from 0 (start) to 1 (end).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.1,0.5,0.9",
        allow_negative_numbers = true
    )]
    depths: Vec<f64>,
    /// Trials (keys) per length and depth.
    #[arg(long, default_value_t = 1)]
    trials: usize,
    /// Seed of the keys.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output format: a table of accuracy, or JSON records, one per trial.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: super::Format,
    /// Also draw accuracy by length and depth as a heatmap PNG here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// `posenc lm experiment`
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// Output directory: one run per encoding, results.md, results.json and plots.
    #[arg(long, default_value = "runs/lm-experiment")]
    out: PathBuf,
    #[command(flatten)]
    grid: super::GridArgs,
    /// Optimizer steps per encoding [default: 2000; with --budget quick: 300].
    #[arg(long)]
    steps: Option<usize>,
    /// The training context L.
    #[arg(long, help = format!(
        "The training context L [default: {}]",
        LmExperimentConfig::full().base.model.context
    ))]
    context: Option<usize>,
    /// Seed of weights and windows, the first of several.
    #[arg(long, help = format!(
        "Seed of weights and windows, the first of several [default: {}]",
        LmExperimentConfig::full().base.run.seed
    ))]
    seed: Option<u64>,
    /// Comma-separated evaluation lengths, as multiples of the trained context, in any
    /// order [default: 1,2,4,8].
    #[arg(long, value_delimiter = ',')]
    factors: Option<Vec<usize>>,
    /// Randomized positions: train at sorted random positions below this (Ruoss et al.
    /// 2023); the default learned table then has this many rows [default: off].
    #[arg(long)]
    randomized_positions: Option<usize>,
    /// Also read every evaluation window a token at a time through a rolling key/value
    /// cache of this many positions, once per --sinks count (StreamingLLM, Xiao et al.
    /// 2024) [default: off, windows read whole only].
    #[arg(long, requires = "sinks")]
    window: Option<usize>,
    /// Comma-separated sink counts for --window: the tokens each rolling cache keeps from
    /// the start of the window (0: the most recent only) [default: off; given with
    /// --window].
    #[arg(long, value_delimiter = ',', requires = "window")]
    sinks: Option<Vec<usize>>,
    #[command(flatten)]
    budget: super::BudgetArg,
    /// A JSON training config for every run (model size, steps, batch, schedule), as
    /// `lm train --config` takes; the flags above override it (not with `--budget quick`).
    #[arg(long)]
    base: Option<PathBuf>,
    /// The corpus directory [default: .cache/shakespeare].
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Where to train and evaluate: cpu; cuda or cuda:N (built with --features cuda);
    /// metal or metal:N (--features metal).
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
    /// Pool the results.json of experiments of one setting (more encodings, or more seeds of
    /// the same, run in several calls or on several machines) into --out's results.json,
    /// results.md and figures; trains nothing [default: off].
    #[arg(long, num_args = 1.., value_name = "RESULTS", conflicts_with_all = [
        "shard", "merge", "encodings", "seeds", "steps", "context", "seed", "factors",
        "randomized_positions", "window", "sinks", "budget", "base", "corpus",
    ])]
    pool: Vec<PathBuf>,
}

/// `posenc lm …`
#[derive(Subcommand, Debug)]
pub enum LmCommand {
    /// Train a causal language model on the Shakespeare corpus, or your own text, into a
    /// run directory.
    #[command(
        after_help = "Examples:\n  posenc lm train --out runs/lm-rope --encoding rope --steps 2000\n  posenc lm train --out runs/lm-own --text my-book.txt --tokenizer bpe\n  posenc lm train --out runs/lm-rope --resume"
    )]
    Train(TrainArgs),
    /// Continue a prompt with any causal language model (`posenc generate` is the same
    /// command with SmolLM2 as the default model).
    #[command(
        after_help = "Examples:\n  posenc lm generate --model runs/lm-rope --max-tokens 200 \"ROMEO:\""
    )]
    Generate(super::generate::GenerateArgs),
    /// Per-token loss and perplexity on windows of several lengths: how the encoding
    /// extrapolates.
    #[command(
        after_help = "Examples:\n  posenc lm eval --model runs/lm-rope --lengths 64,128,256,512\n  posenc lm eval --model smollm2 --lengths 8192,16384 --rope-scaling '{\"rope_type\": \"yarn\", \"factor\": 2}'"
    )]
    Eval(EvalArgs),
    /// Passkey retrieval: a number hidden at several depths of long filler, then asked for
    /// (Mohtashami & Jaggi 2023).
    #[command(
        after_help = "Examples:\n  posenc lm passkey --model smollm2 --lengths 4096,8192 --depths 0.1,0.5,0.9"
    )]
    Passkey(PasskeyArgs),
    /// A subset of RULER (Hsieh et al. 2024): needles in a haystack (single, multi-key,
    /// multi-value, multi-query), variable tracking and common-words extraction, at exact
    /// lengths; the score is the share of the expected answers given.
    #[command(
        after_help = "Examples:\n  posenc lm ruler --model smollm2 --lengths 4096 --seeds 3 --out runs/ruler.json\n  posenc lm ruler --model smollm2 --lengths 16384 --tasks niah_single,vt --rope-scaling '{\"rope_type\": \"yarn\", \"factor\": 4}'"
    )]
    Ruler(super::ruler::RulerArgs),
    /// One model per encoding, evaluated at 1, 2, 4 and 8 times the trained context.
    ///
    /// The lineup: every registered encoding (learned with a table of L rows), one seed;
    /// with --budget quick: none, sinusoidal, rope and alibi.
    #[command(
        after_help = "Examples:\n  posenc lm experiment --budget quick\n  posenc lm experiment --encodings rope,alibi,fire --seeds 3 --out runs/lm-exp\n  posenc lm experiment --pool runs/lm-a/results.json runs/lm-b/results.json --out runs/lm-pooled"
    )]
    Experiment(ExperimentArgs),
}

impl super::TaskCommand for LmCommand {
    const KIND: &'static str = <LmTask<'static> as Job<'static>>::KIND;
    const A_RUN: &'static str = "a language-model run";

    fn holds_older_run(dir: &Path) -> bool {
        LmState::load(dir).is_ok()
    }

    fn study(path: &Path) -> Result<(String, serde_json::Value)> {
        let e = experiment::LmExperiment::load(path)?;
        Ok((e.markdown(), serde_json::to_value(&e.records)?))
    }

    fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            Self::Train(a) => train(a, out),
            Self::Generate(a) => a.run(&model::shipped(), out),
            Self::Eval(a) => eval(a, out),
            Self::Passkey(a) => passkey(a, out),
            Self::Ruler(a) => a.run(out),
            Self::Experiment(a) => experiment(a, out),
        }
    }

    fn trains(&self) -> bool {
        matches!(self, Self::Train(_) | Self::Experiment(_))
    }

    fn resume(&self) -> Option<super::Resume> {
        match self {
            Self::Train(_) => Some(super::Resume::Train("lm")),
            Self::Experiment(_) => Some(super::Resume::Rerun),
            _ => None,
        }
    }
}

fn load_corpus(dir: Option<PathBuf>) -> Result<Corpus> {
    Ok(Corpus::load(&dir.unwrap_or_else(corpus::default_dir))?)
}

fn train(a: TrainArgs, out: &mut impl Write) -> Result<()> {
    let opts = a.log_dir.options(a.quiet, a.force);
    let state = if a.resume {
        // The same text again, tokenized by the tokenizer the run saved.
        let (cfg, tokenizer) = run::saved(&a.out).map_err(|e| super::for_task(e, &a.out, "lm"))?;
        let corpus = match &cfg.text {
            Some(source) => source.reread()?,
            None => load_corpus(a.corpus)?,
        };
        let data = LmData::from_corpus(&corpus, &tokenizer)?;
        let inputs = LmInputs { tokenizer, data };
        job::resume::<LmTask>(&a.out, a.steps, &inputs, opts, &a.device.0)?
    } else {
        let mut cfg = match &a.config {
            Some(path) => read_config(path)?,
            None => LmTrainConfig::default(),
        };
        let mut source = None;
        if let Some(from) = &a.from {
            let (from_cfg, tokenizer) = run::from_run(from, cfg)?;
            (cfg, source) = (from_cfg, Some(tokenizer));
        }
        if let Some(e) = a.encoding {
            cfg.model.encoding = e.0;
        }
        if let Some(c) = a.context {
            cfg.model.context = c;
        }
        if let Some(s) = a.steps {
            cfg.run.steps = s;
        }
        if a.randomized_positions.is_some() {
            cfg.randomized_positions = a.randomized_positions;
        }
        cfg.run.seed = a.seed.unwrap_or(cfg.run.seed);
        (cfg.lr, cfg.min_lr, cfg.run.warmup) = a.schedule.apply(cfg.lr, cfg.min_lr, cfg.run.warmup);
        cfg.run.batch_size = a.batch_size.unwrap_or(cfg.run.batch_size);
        a.size.apply_to(&mut cfg.model);
        cfg.model.encoding = a.rope_scaling.apply_to(&cfg.model.encoding)?;
        match a.tokenizer {
            Some(TokenizerArg::Char) => cfg.tokenizer = TextTokenizer::Char,
            Some(TokenizerArg::Bpe) => cfg.tokenizer = TextTokenizer::Bpe { merges: a.merges },
            None => {}
        }
        let corpus = match &a.text {
            Some(path) => {
                let (source, corpus) = TextSource::read(path, a.valid_fraction)?;
                cfg.text = Some(source);
                corpus
            }
            None => match &cfg.text {
                // Fine-tuning a run of your own text goes on with that text.
                Some(source) => source.reread()?,
                None => load_corpus(a.corpus)?,
            },
        };
        // Everything is checked before anything is written.
        cfg.validate()?;
        let tokenizer = match source {
            Some(tokenizer) => tokenizer,
            None => cfg.tokenizer.train(&Corpus::stream(&corpus.train))?,
        };
        cfg.model.vocab_size = tokenizer.get_vocab_size(true);
        // The config as it trains, its vocabulary read off the data.
        if a.print_config {
            writeln!(out, "{}", serde_json::to_string_pretty(&cfg)?)?;
            return Ok(());
        }
        let data = LmData::from_corpus(&corpus, &tokenizer)?;
        let inputs = LmInputs { tokenizer, data };
        job::train::<LmTask>(cfg, &inputs, &a.out, opts, &a.device.0)?
    };
    match a.format {
        Format::Json => super::print_run(out, &a.out, &state),
        Format::Text => report(&state, &a.out, out),
    }
}

/// A JSON training config.
/// The text `spec` was trained on, read again, if it is a run of ours trained with `--text`.
fn own_text(spec: &str) -> Result<Option<(TextSource, Corpus)>> {
    let dir = Path::new(spec);
    if !posenc_lm::causal::is_run(dir) {
        return Ok(None);
    }
    let Ok(state) = LmState::load(dir) else {
        return Ok(None);
    };
    match state.config.text {
        Some(source) => {
            let corpus = source.reread()?;
            Ok(Some((source, corpus)))
        }
        None => Ok(None),
    }
}

fn read_config(path: &Path) -> Result<LmTrainConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn report(state: &LmState, dir: &Path, out: &mut impl Write) -> Result<()> {
    let cfg = &state.config;
    writeln!(
        out,
        "{} ({}): validation loss {} after {} steps in {:.0} s{}; saved in {}",
        cfg.model.encoding.kind(),
        cfg.tokenizer.describe(),
        posenc_lm::task::valid_loss(state).map_or("–".to_string(), |v| format!("{v:.4}")),
        state.step,
        state.elapsed_s,
        super::peak_note(state.peak_rss_mb),
        dir.display()
    )?;
    Ok(())
}

/// The text `lm eval` scores, and what it is in words ("the Shakespeare test split
/// (hamlet, macbeth, tempest)"): `--text`, else the held-out part of the text a run of
/// ours was trained on, else the corpus's `--split`.
fn eval_text(a: &EvalArgs, spec: &str) -> Result<(String, String)> {
    if let Some(path) = &a.text {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        return Ok((text, format!("the file {}", path.display())));
    }
    // A run trained on its own text is measured on that text's held-out part.
    if a.corpus.is_none() {
        if let Some((source, corpus)) = own_text(spec)? {
            anyhow::ensure!(
                !matches!(a.split, Some(Split::Test)),
                "{spec} was trained on its own text ({}), which has no test split: its \
                 held-out part is --split valid (the default), and --text scores another file",
                source.path.display()
            );
            let share = format!("{:.0}%", 100.0 * source.valid_fraction);
            let what = format!("the held-out {share} of {}", source.path.display());
            return Ok((Corpus::stream(&corpus.valid), what));
        }
    }
    let dir = a.corpus.clone().unwrap_or_else(corpus::default_dir);
    let corpus = load_corpus(Some(dir.clone()))?;
    let (split, works) = match a.split.unwrap_or(Split::Test) {
        Split::Test => ("test", &corpus.test),
        Split::Valid => ("valid", &corpus.valid),
    };
    anyhow::ensure!(
        !works.is_empty(),
        "the corpus in {} has no {split} split",
        dir.display()
    );
    let names: Vec<&str> = works.iter().map(|w| w.name.as_str()).collect();
    let what = format!(
        "the {split} split of {} ({})",
        dir.display(),
        names.join(", ")
    );
    Ok((Corpus::stream(works), what))
}

/// One row of `lm eval`: a tidy record (the evaluation's own fields, `len` among them, or
/// `len` and why there is none).
#[derive(Serialize)]
struct EvalRow<'a> {
    #[serde(flatten)]
    model: model::ModelNote<'a>,
    /// What was scored, in words.
    data: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    len: Option<usize>,
    #[serde(flatten)]
    eval: Option<posenc_lm::task::LengthEval>,
    perplexity: Option<f64>,
    unavailable: Option<String>,
    /// The rolling cache's window and sinks, when the windows were read through one.
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sinks: Option<usize>,
}

fn eval(a: EvalArgs, out: &mut impl Write) -> Result<()> {
    let default = model::shipped();
    // Settings first: nothing is loaded for a window that cannot roll.
    let rolling = match (a.window, a.sinks) {
        (Some(window), Some(sinks)) => Some(Streaming::new(sinks, window)?),
        _ => None,
    };
    let lm = a.model.load(&default)?;
    let (text, data) = eval_text(&a, a.model.spec(&default))?;
    let ids = lm.encode_text(&text)?;
    let context = lm.model.config().context;
    let lengths = a
        .lengths
        .clone()
        .unwrap_or_else(|| [1, 2, 4, 8].map(|f| f * context).to_vec());
    if let Some(stride) = a.stride {
        return eval_strided(&a, &lm, (&ids, &data), &lengths, stride, out);
    }
    let slots = |len: usize| (ids.len().saturating_sub(1) / len.max(1)).min(a.windows);
    if !a.quiet {
        let reads: Vec<(usize, usize)> = lengths.iter().map(|&l| (l, slots(l))).collect();
        model::announce_long(&lm, "this evaluation", &reads)?;
    }
    let bar = posenc_train::token_bar(a.quiet, lengths.iter().map(|&l| l * slots(l)).sum());
    // Every row is computed before any is printed: a bad length prints nothing but the error.
    let mut rows = Vec::new();
    for len in lengths {
        let (eval, unavailable) = match lm.model.max_positions() {
            // Past a learned table there is no answer, and the row says why.
            Some(max) if len > max && rolling.is_none() => (
                None,
                Some(format!(
                    "the encoding has max_positions = {max}: no position past it"
                )),
            ),
            _ => {
                bar.set_message(format!("length {len}"));
                let e =
                    evaluate_observed(&lm.model, &ids, len, a.windows, context, rolling, |n| {
                        bar.inc(n as u64)
                    })?;
                (Some(e), None)
            }
        };
        rows.push(EvalRow {
            model: a.model.note(&default),
            data: &data,
            len: eval.is_none().then_some(len),
            perplexity: eval.as_ref().map(|e| e.perplexity()),
            eval,
            unavailable,
            window: rolling.map(|s| s.window()),
            sinks: rolling.map(|s| s.sinks()),
        });
    }
    bar.finish_and_clear();
    if let Format::Json = a.format {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    let table: Vec<(usize, Result<&LengthEval, &str>)> = rows
        .iter()
        .map(|r| match (&r.eval, &r.unavailable) {
            (Some(e), _) => (e.len, Ok(e)),
            (None, why) => (r.len.unwrap_or_default(), Err(why.as_deref().unwrap_or(""))),
        })
        .collect();
    let evals: Vec<&LengthEval> = rows.iter().filter_map(|r| r.eval.as_ref()).collect();
    let reading = rolling.map_or(String::new(), |s| {
        format!(
            "; each window read a token at a time through a rolling cache of {} positions, its first {} token(s) kept as sinks",
            s.window(),
            s.sinks()
        )
    });
    write!(
        out,
        "{}{}{reading}\nscored on {data}\n\n{}{}",
        lm.describe(),
        a.model.reading_note(),
        tables::lengths(&table),
        tables::octaves(&evals, context)
    )?;
    Ok(())
}

/// One row of `lm eval --stride`: a tidy record.
#[derive(Serialize)]
struct StridedRow<'a> {
    #[serde(flatten)]
    model: model::ModelNote<'a>,
    /// What was scored, in words.
    data: &'a str,
    #[serde(flatten)]
    eval: &'a StridedEval,
    perplexity: f64,
}

fn eval_strided(
    a: &EvalArgs,
    lm: &model::CausalLm,
    (ids, data): (&[u32], &str),
    lengths: &[usize],
    stride: usize,
    out: &mut impl Write,
) -> Result<()> {
    let default = model::shipped();
    let reads: usize = lengths
        .iter()
        .map(|&l| l * ids.len().div_ceil(stride.clamp(1, l.max(1))))
        .sum();
    let bar = posenc_train::token_bar(a.quiet, reads);
    let mut evals = Vec::new();
    for &len in lengths {
        bar.set_message(format!("length {len}"));
        evals.push(evaluate_strided(&lm.model, ids, len, stride, |n| {
            bar.inc(n as u64)
        })?);
    }
    bar.finish_and_clear();
    if let Format::Json = a.format {
        let rows: Vec<_> = evals
            .iter()
            .map(|eval| StridedRow {
                model: a.model.note(&default),
                data,
                eval,
                perplexity: eval.perplexity(),
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    write!(
        out,
        "{}{}; sliding windows, each token scored once\nscored on {data}\n\n{}",
        lm.describe(),
        a.model.reading_note(),
        tables::strided(&evals)
    )?;
    Ok(())
}

/// One row of `lm passkey --format json`: a trial, with the model it ran on.
#[derive(Serialize)]
struct PasskeyRow<'a> {
    #[serde(flatten)]
    model: model::ModelNote<'a>,
    #[serde(flatten)]
    record: &'a PasskeyRecord,
}

fn passkey(a: PasskeyArgs, out: &mut impl Write) -> Result<()> {
    let default = model::shipped();
    let lm = a.model.load(&default)?;
    let context = lm.model.config().context;
    let cfg = PasskeyConfig {
        lengths: match a.lengths {
            Some(lengths) => lengths,
            None => {
                let encode = |text: &str| {
                    lm.encode_prompt(text)
                        .map_err(posenc_train::Error::callback)
                };
                passkey::default_lengths(context, passkey::shortest(&encode)?)
            }
        },
        // `-0` is depth 0 in the table's column and the records too (`key` already agrees).
        depths: a.depths.iter().map(|d| d + 0.0).collect(),
        trials: a.trials,
        seed: a.seed,
    };
    cfg.validate()?;
    // The plot's directory is checked before hours of work, not after.
    if let Some(dir) = a.plot.as_ref().and_then(|p| p.parent()) {
        anyhow::ensure!(
            dir.as_os_str().is_empty() || dir.is_dir(),
            "--plot: the directory {} does not exist",
            dir.display()
        );
    }
    let encode = |text: &str| {
        lm.encode_prompt(text)
            .map_err(posenc_train::Error::callback)
    };
    let decode = |ids: &[u32]| lm.decode(ids).map_err(posenc_train::Error::callback);
    let subject = Subject {
        model: &lm.model,
        encode: &encode,
        decode: &decode,
        eos: lm.eos,
    };
    let total = cfg.lengths.iter().sum::<usize>() * cfg.depths.len() * cfg.trials;
    let bar = posenc_train::token_bar(a.quiet, total);
    let records = passkey::run(
        &subject,
        &cfg,
        |n| bar.inc(n as u64),
        |r| {
            bar.set_message(format!(
                "length {} depth {}: {}",
                r.length,
                r.depth,
                if r.correct { "found" } else { "missed" }
            ));
            Ok(())
        },
    )?;
    bar.finish_and_clear();
    let accuracy = passkey::accuracy(&cfg, &records);
    match a.format {
        Format::Json => {
            let rows: Vec<_> = records
                .iter()
                .map(|record| PasskeyRow {
                    model: a.model.note(&default),
                    record,
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        }
        Format::Text => {
            writeln!(
                out,
                "{}{}: passkey accuracy over {} trial(s) per cell\n",
                lm.describe(),
                a.model.reading_note(),
                cfg.trials
            )?;
            write!(out, "{}", tables::passkey(&cfg, &accuracy))?;
        }
    }
    // The figure last: the records are out even if it cannot be written.
    out.flush()?;
    if let Some(path) = &a.plot {
        let name = Path::new(a.model.spec(&default))
            .file_name()
            .map_or_else(|| a.model.spec(&default).into(), |n| n.to_string_lossy());
        let title = format!("Passkey retrieval: {name}{}", a.model.reading_note());
        let found = passkey::found(&cfg, &records);
        posenc_lm::figures::passkey(&cfg, &found, &title, path)?;
    }
    Ok(())
}

fn experiment(a: ExperimentArgs, out: &mut impl Write) -> Result<()> {
    if !a.pool.is_empty() {
        let pooled = experiment::LmExperiment::load_pooled(&a.pool)?;
        posenc_train::experiment::check_out::<experiment::LmExperimentRun>(&a.out)?;
        std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
        pooled.save(&a.out)?;
        let plots = posenc_lm::figures::lm_experiment(&pooled, &a.out)?;
        return a.grid.print(&pooled, &pooled.table(), &plots, &a.out, out);
    }
    let given = [
        ("--steps", a.steps.is_some()),
        ("--context", a.context.is_some()),
        ("--seed", a.seed.is_some()),
        ("--factors", a.factors.is_some()),
        ("--randomized-positions", a.randomized_positions.is_some()),
        ("--window", a.window.is_some()),
        ("--base", a.base.is_some()),
        ("--budget", a.budget.quick()),
    ];
    let cfg = match a.grid.merged_config(&a.out, &given)? {
        Some(cfg) => cfg,
        None => experiment_config(&a)?,
    };
    cfg.base.validate()?;
    posenc_train::experiment::check_out::<experiment::LmExperimentRun>(&a.out)?;
    let corpus = load_corpus(a.corpus)?;
    let opts = RunOptions {
        quiet: a.quiet,
        ..RunOptions::default()
    };
    let experiment = experiment::LmExperimentRun {
        config: &cfg,
        corpus: &corpus,
        device: &a.device.0,
    };
    a.grid.run(&experiment, &a.out, opts, out, |results| {
        let plots = posenc_lm::figures::lm_experiment(results, &a.out)?;
        Ok((results.table(), plots))
    })
}

/// The grid `lm experiment`'s flags ask for.
fn experiment_config(a: &ExperimentArgs) -> Result<LmExperimentConfig> {
    anyhow::ensure!(
        !(a.budget.quick() && a.base.is_some()),
        "--base and --budget quick both set the runs' config: give one"
    );
    let mut cfg = if a.budget.quick() {
        LmExperimentConfig::quick()
    } else {
        LmExperimentConfig::full()
    };
    if let Some(path) = &a.base {
        cfg.base = read_config(path)?;
    }
    if let Some(c) = a.context {
        cfg.base.model.context = c;
    }
    cfg.base.randomized_positions = a.randomized_positions;
    if a.grid.encodings.is_none() && !a.budget.quick() {
        let rows = a.randomized_positions.unwrap_or(cfg.base.model.context);
        cfg.encodings = experiment::default_encodings(rows);
    }
    if let Some(e) = &a.grid.encodings {
        cfg.encodings = e.0.clone();
    }
    cfg.base.run.steps = a.steps.unwrap_or(cfg.base.run.steps);
    cfg.base.run.seed = a.seed.unwrap_or(cfg.base.run.seed);
    cfg.seeds = a.grid.seeds.unwrap_or(cfg.seeds);
    if let (Some(window), Some(sinks)) = (a.window, a.sinks.clone()) {
        let streaming = experiment::StreamingEval { window, sinks };
        streaming.caches()?;
        cfg.streaming = Some(streaming);
    }
    if let Some(mut factors) = a.factors.clone() {
        factors.sort_unstable();
        factors.dedup();
        cfg.factors = factors;
    }
    Ok(cfg)
}
