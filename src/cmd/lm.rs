//! `posenc lm train|generate|eval`: a causal language model on Shakespeare.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use posenc::EncodingConfig;
use posenc_train::corpus::{self, Corpus};
use posenc_train::lm_run;
use posenc_train::lm_train::{evaluate, train_lm, LmTrainConfig};
use posenc_train::sample::{generate, Sampling};
use posenc_train::text_tokenizer::{decode, encode, TextTokenizer};

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
    /// A new (or empty) directory for the run.
    #[arg(long)]
    out: PathBuf,
    /// A JSON training config (model, tokenizer, steps, schedule); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The positional encoding: a kind or a JSON config.
    #[arg(long)]
    encoding: Option<EncodingConfig>,
    /// The training context L.
    #[arg(long)]
    context: Option<usize>,
    /// The tokenization.
    #[arg(long, value_enum)]
    tokenizer: Option<TokenizerArg>,
    /// BPE merges (with --tokenizer bpe).
    #[arg(long, default_value_t = 2000)]
    merges: usize,
    /// Optimizer steps.
    #[arg(long)]
    steps: Option<usize>,
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
    /// The run directory.
    #[arg(long)]
    model: PathBuf,
    /// The text to continue.
    #[arg(long, default_value = "\n")]
    prompt: String,
    /// How many tokens to generate.
    #[arg(long, default_value_t = 200)]
    tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample among the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the most likely tokens holding this much probability.
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `posenc lm eval`
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The run directory.
    #[arg(long)]
    model: PathBuf,
    /// Window lengths [default: 1, 2, 4 and 8 times the trained context].
    #[arg(long, value_delimiter = ',')]
    lengths: Option<Vec<usize>>,
    /// Windows per length.
    #[arg(long, default_value_t = 64)]
    windows: usize,
    /// The split.
    #[arg(long, value_enum, default_value_t = Split::Test)]
    split: Split,
    /// The corpus directory [default: .cache/shakespeare].
    #[arg(long)]
    corpus: Option<PathBuf>,
}

/// `posenc lm …`
#[derive(Subcommand, Debug)]
pub enum LmCommand {
    /// Train a causal language model on the Shakespeare corpus into a new directory.
    Train(TrainArgs),
    /// Continue a prompt with a trained model.
    Generate(GenerateArgs),
    /// Next-token loss on windows of several lengths: how the encoding extrapolates.
    Eval(EvalArgs),
}

impl LmCommand {
    /// Runs the command, writing to `out`.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            Self::Train(a) => train(a, out),
            Self::Generate(a) => generate_text(a, out),
            Self::Eval(a) => eval(a, out),
        }
    }
}

fn load_corpus(dir: Option<PathBuf>) -> Result<Corpus> {
    Corpus::load(&dir.unwrap_or_else(corpus::default_dir))
}

fn train(a: TrainArgs, out: &mut impl Write) -> Result<()> {
    // Everything is checked before anything is written.
    lm_run::check_new(&a.out)?;
    let mut cfg = match &a.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
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
    match a.tokenizer {
        Some(TokenizerArg::Char) => cfg.tokenizer = TextTokenizer::Char,
        Some(TokenizerArg::Bpe) => cfg.tokenizer = TextTokenizer::Bpe { merges: a.merges },
        None => {}
    }
    let corpus = load_corpus(a.corpus)?;
    let text = Corpus::stream(&corpus.train);
    let tokenizer = cfg.tokenizer.train(&text)?;
    cfg.model.vocab_size = tokenizer.get_vocab_size(true);
    cfg.validate()?;
    if let Some(max) = cfg
        .model
        .encoding
        .settings::<posenc::learned::LearnedConfig>()
    {
        ensure!(
            max.max_positions >= cfg.model.context,
            "the learned table has max_positions = {} but the context is {}",
            max.max_positions,
            cfg.model.context
        );
    }
    let train_ids = encode(&tokenizer, &text)?;
    let valid_ids = encode(&tokenizer, &Corpus::stream(&corpus.valid))?;
    let quiet = a.quiet;
    let steps = cfg.steps;
    let run = train_lm(&cfg, &train_ids, |step, loss| {
        if !quiet && (step % 100 == 0 || step + 1 == steps) {
            eprintln!("step {step:>6}  loss {loss:.4}");
        }
    })?;
    let valid = evaluate(&run.model, &valid_ids, cfg.model.context, 100)?;
    lm_run::save(&a.out, &cfg, &tokenizer, &run)?;
    writeln!(
        out,
        "{} ({}): validation loss {valid:.4} after {} steps in {:.0} s; saved in {}",
        cfg.model.encoding.kind(),
        match cfg.tokenizer {
            TextTokenizer::Char => "characters".to_string(),
            TextTokenizer::Bpe { merges } => format!("BPE, {merges} merges"),
        },
        cfg.steps,
        run.elapsed_s,
        a.out.display()
    )?;
    Ok(())
}

fn generate_text(a: GenerateArgs, out: &mut impl Write) -> Result<()> {
    let saved = lm_run::load(&a.model)?;
    let prompt = encode(&saved.tokenizer, &a.prompt)?;
    let sampling = Sampling {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        seed: a.seed,
    };
    let tokens = generate(&saved.model, &prompt, a.tokens, sampling)?;
    writeln!(out, "{}{}", a.prompt, decode(&saved.tokenizer, &tokens)?)?;
    Ok(())
}

fn eval(a: EvalArgs, out: &mut impl Write) -> Result<()> {
    let saved = lm_run::load(&a.model)?;
    let corpus = load_corpus(a.corpus)?;
    let works = match a.split {
        Split::Valid => &corpus.valid,
        Split::Test => &corpus.test,
    };
    let ids = encode(&saved.tokenizer, &Corpus::stream(works))?;
    let context = saved.cfg.model.context;
    let lengths = a
        .lengths
        .unwrap_or_else(|| [1, 2, 4, 8].map(|f| f * context).to_vec());
    // Every row is computed before any is printed: a bad length prints nothing but the error.
    let mut rows = Vec::new();
    for len in lengths {
        rows.push(match evaluate(&saved.model, &ids, len, a.windows) {
            Ok(loss) => format!("| {len} | {loss:.4} |"),
            // Past a learned table there is no answer, and the table says why.
            Err(e) if saved.model.max_positions().is_some_and(|m| len > m) => {
                format!("| {len} | n/a ({}) |", super::error_text(&e))
            }
            Err(e) => return Err(e),
        });
    }
    let kind = saved.cfg.model.encoding.kind();
    writeln!(out, "| window | loss ({kind}) |\n|---:|---:|")?;
    for row in rows {
        writeln!(out, "{row}")?;
    }
    Ok(())
}
