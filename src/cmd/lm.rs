//! `posenc lm train|generate|eval|experiment`: a causal language model on Shakespeare.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use posenc::EncodingConfig;
use posenc_train::corpus::{self, Corpus};
use posenc_train::lm_experiment::{self, LmExperimentConfig};
use posenc_train::lm_run;
use posenc_train::lm_train::{evaluate, LmData, LmState, LmTrainConfig};
use posenc_train::sample::generate;
use posenc_train::text_tokenizer::{decode, encode, encode_strict, TextTokenizer};
use posenc_train::trainer::RunOptions;
use serde::Serialize;

use super::{read_prompt, RopeScalingArg, SamplingArgs};

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

/// How `lm eval` prints.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    /// A Markdown table.
    Table,
    /// JSON, per-position losses included.
    Json,
}

/// `posenc lm train`
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// The run directory: new or empty (or, with --resume, a run to continue).
    #[arg(long)]
    out: PathBuf,
    /// A JSON training config (model, tokenizer, steps, schedule); flags override it.
    #[arg(long, conflicts_with = "resume")]
    config: Option<PathBuf>,
    /// The positional encoding: a kind or a JSON config.
    #[arg(long, conflicts_with = "resume")]
    encoding: Option<EncodingConfig>,
    /// The training context L.
    #[arg(long, conflicts_with = "resume")]
    context: Option<usize>,
    /// The tokenization.
    #[arg(long, value_enum, conflicts_with = "resume")]
    tokenizer: Option<TokenizerArg>,
    /// BPE merges (with --tokenizer bpe).
    #[arg(long, default_value_t = 2000, conflicts_with = "resume")]
    merges: usize,
    /// Optimizer steps in all (with --resume: raise the run's own).
    #[arg(long)]
    steps: Option<usize>,
    /// Randomized positions: train at sorted random positions below this (Ruoss et al. 2023).
    #[arg(long, conflicts_with = "resume")]
    randomized_positions: Option<usize>,
    /// Continue the run in --out from its last checkpoint, bit-identically.
    #[arg(long)]
    resume: bool,
    /// Replace a run already in --out (never files posenc did not write).
    #[arg(long, conflicts_with = "resume")]
    force: bool,
    /// The corpus directory [default: .cache/shakespeare, from scripts/fetch_shakespeare.sh].
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

/// `posenc lm generate`
#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The run directory [default: the shipped models/shakespeare-alibi].
    #[arg(long)]
    model: Option<PathBuf>,
    /// The text to continue [default: standard input].
    prompt: Option<String>,
    /// How many tokens to generate.
    #[arg(long, default_value_t = 200)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    rope_scaling: RopeScalingArg,
}

/// `posenc lm eval`
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The run directory [default: the shipped models/shakespeare-alibi].
    #[arg(long)]
    model: Option<PathBuf>,
    /// Window lengths [default: 1, 2, 4 and 8 times the trained context].
    #[arg(long, value_delimiter = ',')]
    lengths: Option<Vec<usize>>,
    /// Non-overlapping windows per length, at most.
    #[arg(long, default_value_t = 64)]
    windows: usize,
    /// The split of the corpus.
    #[arg(long, value_enum, default_value_t = Split::Test, conflicts_with = "text")]
    split: Split,
    /// Evaluate on this text file instead of the corpus.
    #[arg(long)]
    text: Option<PathBuf>,
    /// The corpus directory [default: .cache/shakespeare].
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    #[command(flatten)]
    rope_scaling: RopeScalingArg,
}

/// `posenc lm experiment`
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// Output directory: one run per encoding, results.md, results.json and plots.
    #[arg(long, default_value = "runs/lm-experiment")]
    out: PathBuf,
    /// Comma-separated encodings [default: none, sinusoidal, learned (a table of L rows),
    /// rope, alibi, t5; with --quick: none, sinusoidal, rope, alibi].
    #[arg(long)]
    encodings: Option<super::EncodingList>,
    /// Optimizer steps per encoding [default: 2000; with --quick: 300].
    #[arg(long)]
    steps: Option<usize>,
    /// The training context L.
    #[arg(long)]
    context: Option<usize>,
    /// Seed of weights and windows.
    #[arg(long)]
    seed: Option<u64>,
    /// Randomized positions: train at sorted random positions below this (Ruoss et al.
    /// 2023); the default learned table then has this many rows.
    #[arg(long)]
    randomized_positions: Option<usize>,
    /// A smaller budget: minutes, not half an hour.
    #[arg(long)]
    quick: bool,
    /// The corpus directory [default: .cache/shakespeare].
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

/// `posenc lm …`
#[derive(Subcommand, Debug)]
pub enum LmCommand {
    /// Train a causal language model on the Shakespeare corpus into a run directory.
    Train(TrainArgs),
    /// Continue a prompt with a trained model.
    Generate(GenerateArgs),
    /// Per-token loss and perplexity on windows of several lengths: how the encoding
    /// extrapolates.
    Eval(EvalArgs),
    /// One model per encoding, evaluated at 1, 2, 4 and 8 times the trained context.
    Experiment(ExperimentArgs),
}

impl LmCommand {
    /// Runs the command, writing to `out`.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            Self::Train(a) => train(a, out),
            Self::Generate(a) => generate_text(a, out),
            Self::Eval(a) => eval(a, out),
            Self::Experiment(a) => experiment(a, out),
        }
    }
}

fn load_corpus(dir: Option<PathBuf>) -> Result<Corpus> {
    Corpus::load(&dir.unwrap_or_else(corpus::default_dir))
}

fn train(a: TrainArgs, out: &mut impl Write) -> Result<()> {
    let opts = RunOptions {
        quiet: a.quiet,
        force: a.force,
        stop_after: None,
    };
    let state = if a.resume {
        let corpus = load_corpus(a.corpus)?;
        lm_run::resume(
            &a.out,
            a.steps,
            |_, t| LmData::from_corpus(&corpus, t),
            opts,
        )?
    } else {
        let mut cfg = match &a.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", path.display()))?
            }
            None => LmTrainConfig::default(),
        };
        if let Some(e) = a.encoding {
            cfg.model.encoding = e;
        }
        if let Some(c) = a.context {
            cfg.model.context = c;
        }
        if let Some(s) = a.steps {
            cfg.steps = s;
        }
        if a.randomized_positions.is_some() {
            cfg.randomized_positions = a.randomized_positions;
        }
        match a.tokenizer {
            Some(TokenizerArg::Char) => cfg.tokenizer = TextTokenizer::Char,
            Some(TokenizerArg::Bpe) => cfg.tokenizer = TextTokenizer::Bpe { merges: a.merges },
            None => {}
        }
        // Everything is checked before anything is written.
        cfg.validate()?;
        let corpus = load_corpus(a.corpus)?;
        let tokenizer = cfg.tokenizer.train(&Corpus::stream(&corpus.train))?;
        cfg.model.vocab_size = tokenizer.get_vocab_size(true);
        let data = LmData::from_corpus(&corpus, &tokenizer)?;
        lm_run::start(&cfg, &tokenizer, &data, &a.out, opts)?
    };
    report(&state, &a.out, out)
}

fn report(state: &LmState, dir: &Path, out: &mut impl Write) -> Result<()> {
    let cfg = &state.config;
    writeln!(
        out,
        "{} ({}): validation loss {} after {} steps in {:.0} s; saved in {}",
        cfg.model.encoding.kind(),
        cfg.tokenizer.describe(),
        state
            .valid_loss()
            .map_or("–".to_string(), |v| format!("{v:.4}")),
        state.step,
        state.elapsed_s,
        dir.display()
    )?;
    Ok(())
}

fn generate_text(a: GenerateArgs, out: &mut impl Write) -> Result<()> {
    let mut saved = lm_run::load(&a.model.unwrap_or_else(lm_run::shipped_model))?;
    saved.model = a.rope_scaling.apply(saved.model)?;
    let prompt = read_prompt(a.prompt)?;
    let ids = encode_strict(&saved.tokenizer, &prompt)?;
    let tokens = generate(&saved.model, &ids, a.max_tokens, a.sampling.into())?;
    writeln!(out, "{prompt}{}", decode(&saved.tokenizer, &tokens)?)?;
    Ok(())
}

/// One row of `lm eval`.
#[derive(Serialize)]
struct EvalRow {
    len: usize,
    #[serde(flatten)]
    eval: Option<posenc_train::lm_train::LengthEval>,
    perplexity: Option<f64>,
    unavailable: Option<String>,
}

fn eval(a: EvalArgs, out: &mut impl Write) -> Result<()> {
    let mut saved = lm_run::load(&a.model.unwrap_or_else(lm_run::shipped_model))?;
    saved.model = a.rope_scaling.apply(saved.model)?;
    let text = match &a.text {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        None => {
            let corpus = load_corpus(a.corpus)?;
            Corpus::stream(match a.split {
                Split::Valid => &corpus.valid,
                Split::Test => &corpus.test,
            })
        }
    };
    let ids = encode(&saved.tokenizer, &text)?;
    let context = saved.model.config().context;
    let lengths = a
        .lengths
        .unwrap_or_else(|| [1, 2, 4, 8].map(|f| f * context).to_vec());
    // Every row is computed before any is printed: a bad length prints nothing but the error.
    let mut rows = Vec::new();
    for len in lengths {
        rows.push(match saved.model.max_positions() {
            // Past a learned table there is no answer, and the row says why.
            Some(max) if len > max => EvalRow {
                len,
                eval: None,
                perplexity: None,
                unavailable: Some(format!(
                    "the encoding has max_positions = {max}: no position past it"
                )),
            },
            _ => {
                let e = evaluate(&saved.model, &ids, len, a.windows, context)?;
                EvalRow {
                    len,
                    perplexity: Some(e.perplexity()),
                    eval: Some(e),
                    unavailable: None,
                }
            }
        });
    }
    if let Format::Json = a.format {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    let kind = saved.model.config().encoding.kind();
    writeln!(
        out,
        "{kind}, trained on L = {context}

| window | windows | loss | perplexity | loss past L |
|---:|---:|---:|---:|---:|"
    )?;
    for r in rows {
        match (&r.eval, &r.unavailable) {
            (Some(e), _) => writeln!(
                out,
                "| {} | {} | {:.4} | {:.3} | {} |",
                r.len,
                e.windows,
                e.loss,
                e.perplexity(),
                e.tail_loss.map_or("–".to_string(), |t| format!("{t:.4}"))
            )?,
            (None, why) => writeln!(
                out,
                "| {} | – | n/a | n/a | n/a ({}) |",
                r.len,
                why.as_deref().unwrap_or("")
            )?,
        }
    }
    Ok(())
}

fn experiment(a: ExperimentArgs, out: &mut impl Write) -> Result<()> {
    let mut cfg = if a.quick {
        LmExperimentConfig::quick()
    } else {
        LmExperimentConfig::full()
    };
    if let Some(c) = a.context {
        cfg.base.model.context = c;
    }
    cfg.base.randomized_positions = a.randomized_positions;
    if a.encodings.is_none() && !a.quick {
        let rows = a.randomized_positions.unwrap_or(cfg.base.model.context);
        cfg.encodings = lm_experiment::default_encodings(rows);
    }
    if let Some(e) = a.encodings {
        cfg.encodings = e.0;
    }
    cfg.base.steps = a.steps.unwrap_or(cfg.base.steps);
    cfg.base.seed = a.seed.unwrap_or(cfg.base.seed);
    cfg.base.validate()?;
    let corpus = load_corpus(a.corpus)?;
    let opts = RunOptions {
        quiet: a.quiet,
        force: false,
        stop_after: None,
    };
    let result = lm_experiment::run(&cfg, &corpus, &a.out, opts)?;
    let plots = posenc_plot::lm_experiment(&result, &a.out)?;
    super::report_experiment(out, &result.table(), &a.out, &plots)
}
