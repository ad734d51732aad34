//! The length-extrapolation experiment (Press et al. 2022, Figure 1): one causal language
//! model per encoding, with the same data, seed, size and step budget, trained at context
//! `L` and evaluated on the test works at `L`, `2L`, `4L` and `8L`.
//!
//! | column | what it asks |
//! |---|---|
//! | valid loss | how well it learned, at the trained length |
//! | loss at kL | the mean next-token loss over non-overlapping windows of kL tokens |
//! | past L | the loss of the positions at or past `L` only, where extrapolation shows |
//!
//! Each encoding trains into `out/<kind>/` ([`crate::lm_run`]). A finished run there with
//! the same settings is reused and an unfinished one resumed, so an interrupted experiment
//! continues where it stopped; a run with other settings is an error, never overwritten.
//! A table of learned positions has no row past its end: it shows as n/a.

use std::path::Path;

use crate::error::Result;
use posenc::EncodingConfig;
use posenc_error::{bail, ensure, Context};
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::corpus::Corpus;
use crate::lm_run;
use crate::lm_train::{evaluate, LengthEval, LmData, LmState, LmTrainConfig};
use crate::rundir::{self, Contents};
use crate::text_tokenizer::encode;
use crate::trainer::RunOptions;

pub use crate::experiment::{RESULTS_JSON, RESULTS_MD};

/// What to train and how to evaluate it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LmExperimentConfig {
    /// Everything but the encoding (its `tokenizer` too).
    pub base: LmTrainConfig,
    /// One run per encoding, in this order.
    pub encodings: Vec<EncodingConfig>,
    /// Evaluation lengths, as multiples of the trained context.
    pub factors: Vec<usize>,
    /// Windows per evaluation length (fewer where the test works hold fewer).
    pub eval_windows: usize,
}

impl LmExperimentConfig {
    /// nanoGPT's shape and budget (2 000 steps), the literature's six encodings, evaluated
    /// at 1, 2, 4 and 8 × 64: about 25 minutes on two cores.
    pub fn full() -> Self {
        let base = LmTrainConfig::default();
        let context = base.model.context;
        Self {
            encodings: default_encodings(context),
            base,
            factors: vec![1, 2, 4, 8],
            eval_windows: 64,
        }
    }

    /// `none`, `sinusoidal`, `rope` and `alibi` at 300 steps: the shape of the figure in
    /// a few minutes.
    pub fn quick() -> Self {
        let mut cfg = Self::full();
        cfg.base.steps = 300;
        cfg.base.warmup = 30;
        cfg.eval_windows = 16;
        cfg.encodings = ["none", "sinusoidal", "rope", "alibi"]
            .iter()
            .map(|k| k.parse().expect("a built-in kind"))
            .collect();
        cfg
    }
}

/// The literature's encodings; the learned table has `rows` rows: the trained context, so
/// it has no answer past it (its defaults would leave rows no step ever trained), or the
/// range of randomized positions, all of which training reaches.
pub fn default_encodings(rows: usize) -> Vec<EncodingConfig> {
    [
        "none".to_string(),
        "sinusoidal".to_string(),
        format!(r#"{{"kind": "learned", "max_positions": {rows}}}"#),
        "rope".to_string(),
        "alibi".to_string(),
        "t5".to_string(),
    ]
    .iter()
    .map(|k| k.parse().expect("a built-in kind"))
    .collect()
}

/// One evaluation length of one encoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthRow {
    /// The window length.
    pub len: usize,
    /// The evaluation, or why there is none (a table too short).
    pub eval: std::result::Result<LengthEval, String>,
}

/// One trained and evaluated encoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmEncodingResult {
    /// The encoding's kind.
    pub kind: String,
    /// Its settings.
    pub encoding: EncodingConfig,
    /// The run's progress and validation history.
    pub state: LmState,
    /// Test loss at each evaluation length.
    pub lengths: Vec<LengthRow>,
}

impl LmEncodingResult {
    /// The evaluation at the longest length that has one.
    pub fn longest(&self) -> Option<&LengthEval> {
        self.lengths.iter().rev().find_map(|r| r.eval.as_ref().ok())
    }
}

/// A whole experiment: `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmExperiment {
    /// What was run.
    pub config: LmExperimentConfig,
    /// Tokens in the train, valid and test streams.
    pub sizes: [usize; 3],
    /// One row per encoding, in the config's order.
    pub results: Vec<LmEncodingResult>,
}

/// Trains and evaluates every encoding of `cfg` on `corpus` under `out`, writing
/// `results.json` and `results.md` after each one.
///
/// # Errors
/// Bad settings (before anything is written), two runs of one kind, a run directory
/// holding other settings or foreign files, a loss that diverges, or a failed write.
pub fn run(
    cfg: &LmExperimentConfig,
    corpus: &Corpus,
    out: &Path,
    opts: RunOptions,
) -> Result<LmExperiment> {
    ensure!(!cfg.encodings.is_empty(), "no encodings to compare");
    ensure!(
        !cfg.factors.is_empty() && cfg.factors.iter().all(|&f| f > 0),
        "evaluation factors must be at least 1, got {:?}",
        cfg.factors
    );
    let mut kinds: Vec<&str> = cfg.encodings.iter().map(|e| e.kind()).collect();
    kinds.sort_unstable();
    if let Some(w) = kinds.windows(2).find(|w| w[0] == w[1]) {
        bail!("encoding {} is listed twice", w[0]);
    }
    crate::experiment::check_out_dir::<LmExperiment>(out, "a language-model experiment")?;
    let tokenizer = cfg.base.tokenizer.train(&Corpus::stream(&corpus.train))?;
    let data = LmData::from_corpus(corpus, &tokenizer)?;
    let test = encode(&tokenizer, &Corpus::stream(&corpus.test))?;
    let runs: Vec<LmTrainConfig> = cfg
        .encodings
        .iter()
        .map(|e| {
            let mut c = cfg.base.clone();
            c.model.encoding = e.clone();
            c.model.vocab_size = tokenizer.get_vocab_size(true);
            c.validate().map(|()| c)
        })
        .collect::<Result<_>>()?;
    let mut experiment = LmExperiment {
        config: cfg.clone(),
        sizes: [data.train.len(), data.valid.len(), test.len()],
        results: Vec::new(),
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (encoding, run_cfg) in cfg.encodings.iter().zip(runs) {
        let kind = encoding.kind();
        if !opts.quiet {
            crate::log(&format!("── {kind} ──"));
        }
        let dir = out.join(kind);
        let state = train_or_reuse(&run_cfg, &tokenizer, &data, &dir, opts)?;
        let model = lm_run::load(&dir)?.model;
        let context = run_cfg.model.context;
        let mut lengths = Vec::new();
        for f in &cfg.factors {
            let len = f * context;
            let eval = match model.max_positions() {
                Some(max) if len > max => Err(format!("no positions past {max}")),
                _ => Ok(evaluate(&model, &test, len, cfg.eval_windows, context)?),
            };
            lengths.push(LengthRow { len, eval });
        }
        experiment.results.push(LmEncodingResult {
            kind: kind.to_string(),
            encoding: encoding.clone(),
            state,
            lengths,
        });
        experiment.save(out)?;
    }
    Ok(experiment)
}

/// Trains `cfg` into `dir`, or reuses or resumes the run already there.
fn train_or_reuse(
    cfg: &LmTrainConfig,
    tokenizer: &Tokenizer,
    data: &LmData,
    dir: &Path,
    opts: RunOptions,
) -> Result<LmState> {
    match rundir::inspect(dir)? {
        Contents::Run => {
            let previous = lm_run::state(dir)?;
            let same_but_steps = LmTrainConfig {
                steps: cfg.steps,
                ..previous.config.clone()
            };
            ensure!(
                &same_but_steps == cfg,
                "{} holds a run with other settings; choose another --out or remove it",
                dir.display()
            );
            crate::experiment::check_budget(dir, previous.step, cfg.steps)?;
            if previous.step == cfg.steps {
                return Ok(previous);
            }
            lm_run::resume(dir, Some(cfg.steps), |_, _| Ok(data.clone()), opts)
        }
        Contents::Empty | Contents::Unfinished { weights: false } => {
            lm_run::start(cfg, tokenizer, data, dir, opts)
        }
        Contents::Unfinished { weights: true } | Contents::Foreign(_) => bail!(
            "{} holds files that are not a run of this experiment; remove it or choose another --out",
            dir.display()
        ),
    }
}

impl LmExperiment {
    /// Reads `results.json`.
    ///
    /// # Errors
    /// A missing or malformed file.
    pub fn load(path: &Path) -> Result<Self> {
        crate::experiment::load_results(path)
    }

    /// Writes `results.json` and `results.md` into `out`.
    ///
    /// # Errors
    /// A failed write.
    pub fn save(&self, out: &Path) -> Result<()> {
        crate::experiment::save_results(out, self, &self.markdown())
    }

    /// The results: test perplexity at every length, the loss past the trained context,
    /// and training time.
    pub fn table(&self) -> String {
        let context = self.config.base.model.context;
        let lens: Vec<usize> = self.config.factors.iter().map(|f| f * context).collect();
        let mut s = String::from("| encoding | valid loss |");
        for l in &lens {
            s += &format!(" ppl @ {l} |");
        }
        for l in lens.iter().filter(|&&l| l > context) {
            s += &format!(" loss past {context} @ {l} |");
        }
        s += " train s |\n|---|---:|";
        s += &"---:|".repeat(lens.len() + lens.iter().filter(|&&l| l > context).count() + 1);
        s += "\n";
        for r in &self.results {
            s += &format!(
                "| {} | {} |",
                r.kind,
                r.state
                    .valid_loss()
                    .map_or("–".to_string(), |v| format!("{v:.4}"))
            );
            for row in &r.lengths {
                s += &match &row.eval {
                    Ok(e) => format!(" {:.2} |", e.perplexity()),
                    Err(_) => " n/a |".to_string(),
                };
            }
            for row in r.lengths.iter().filter(|row| row.len > context) {
                s += &match &row.eval {
                    Ok(e) => format!(" {:.3} |", e.tail_loss.unwrap_or(f64::NAN)),
                    Err(_) => " n/a |".to_string(),
                };
            }
            s += &format!(" {:.0} |\n", r.state.elapsed_s);
        }
        s
    }

    /// `results.md`: the settings, the data and the table.
    pub fn markdown(&self) -> String {
        let b = &self.config.base;
        let m = &b.model;
        format!(
            "# Length extrapolation of a causal language model\n\n\
             {} layers, {} heads, width {}, context L = {}, batch {}, {} steps, seed {}, {}{}.\n\
             Tokens: train {}, valid {}, test {}. Test perplexity over up to {} \
             non-overlapping windows of each length; \"loss past {}\" averages only the \
             positions at or past the trained context.\n\n{}",
            m.layers,
            m.heads,
            m.d_model,
            m.context,
            b.batch_size,
            b.steps,
            b.seed,
            b.tokenizer.describe(),
            b.randomized_positions.map_or(String::new(), |r| format!(
                ", randomized positions (a sorted random subset of 0..{r} per step)"
            )),
            self.sizes[0],
            self.sizes[1],
            self.sizes[2],
            self.config.eval_windows,
            m.context,
            self.table()
        )
    }
}
