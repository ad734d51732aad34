//! Experiments: the toy translation model trained once per positional encoding, with the
//! same data, seed, size and step budget, then evaluated on the same splits.
//!
//! | column | what it asks |
//! |---|---|
//! | test exact, BLEU | does the model translate unseen 1–2 clause sentences? |
//! | order swap | are both "A verb B" and "B verb A" right? A model blind to word order sees the same bag of words twice and can get at most one of them |
//! | test-long | does it carry over to 3–4 clauses, longer than anything trained on? |
//! | valid loss | the label-smoothed loss it was trained on, at the end |
//!
//! Each encoding trains into `out/<kind>/` with [`trainer::train`]. A finished run there
//! with the same config is reused, and an unfinished one (or one given more steps) resumed,
//! so an interrupted experiment continues where it stopped; a run with a different config
//! is an error rather than being overwritten. A run whose loss diverges is reported as such.

use std::path::Path;

use crate::error::Result;
use posenc::EncodingConfig;
use posenc_error::{bail, ensure, Context};
use posenc_transformer::checkpoint::write_atomic;
use serde::{Deserialize, Serialize};

use crate::data::DataConfig;
use crate::decode::DecodeConfig;
use crate::eval::{evaluate, SplitReport};
use crate::rundir::{self, Contents};
use crate::trainer::{self, Diverged, Record, RunOptions, TrainConfig, TrainerState, Translator};

/// `results.json`.
pub const RESULTS_JSON: &str = "results.json";
/// `results.md`.
pub const RESULTS_MD: &str = "results.md";

/// What to train: one base config, and the encodings to swap into it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentConfig {
    /// Everything but the encoding.
    pub base: TrainConfig,
    /// One run per encoding, in this order.
    pub encodings: Vec<EncodingConfig>,
}

impl ExperimentConfig {
    /// Every kind, 1000 steps each: about half an hour on two cores.
    pub fn full() -> Self {
        Self {
            base: TrainConfig {
                steps: 1000,
                ..Self::recipe()
            },
            encodings: all_kinds(),
        }
    }

    /// The toy model and corpus of [`TrainConfig::default`], on a gentler schedule that
    /// converges in fewer steps (Noam factor 1, 100 warm-up steps), validated every 100.
    fn recipe() -> TrainConfig {
        TrainConfig {
            lr_factor: 1.0,
            warmup: 100,
            eval_every: 100,
            save_every: 500,
            ..TrainConfig::default()
        }
    }

    /// `none` against `sinusoidal` on a smaller budget: the documents' central claim in
    /// under four minutes.
    pub fn quick() -> Self {
        Self {
            base: TrainConfig {
                steps: 500,
                eval_sentences: 100,
                data: DataConfig {
                    valid: 200,
                    test: 400,
                    test_long: 200,
                    order_swap: 200,
                    ..DataConfig::default()
                },
                ..Self::recipe()
            },
            encodings: ["none", "sinusoidal"]
                .iter()
                .map(|k| EncodingConfig::from_kind(k).expect("a known kind"))
                .collect(),
        }
    }
}

fn all_kinds() -> Vec<EncodingConfig> {
    EncodingConfig::kinds()
        .into_iter()
        .map(|k| EncodingConfig::from_kind(k).expect("a known kind"))
        .collect()
}

/// The evaluation of one trained model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Test exact match (1–2 clauses).
    pub test_exact: f64,
    /// Test corpus BLEU.
    pub test_bleu: f64,
    /// Order-swap pairs with both halves exactly right.
    pub order_swap: f64,
    /// Test-long exact match (3–4 clauses).
    pub test_long_exact: f64,
    /// Test-long corpus BLEU.
    pub test_long_bleu: f64,
    /// Exact match by number of clauses, 1 to 4 (1–2 from test, 3–4 from test-long);
    /// `None` where a split has no sentence of that length.
    pub exact_by_clauses: Vec<Option<f64>>,
    /// Validation loss at the last step.
    pub valid_loss: f64,
}

impl Metrics {
    fn from_reports(reports: &[SplitReport], history: &[Record]) -> Result<Self> {
        let get = |name: &str| {
            reports
                .iter()
                .find(|r| r.split == name)
                .with_context(|| format!("no `{name}` split was evaluated"))
        };
        let (test, long, swap) = (get("test")?, get("test-long")?, get("order-swap")?);
        let clause = |r: &SplitReport, n: usize| r.exact_by_clauses.get(n - 1).copied().flatten();
        Ok(Self {
            test_exact: test.exact,
            test_bleu: test.bleu,
            order_swap: swap.both_halves.unwrap_or(0.0),
            test_long_exact: long.exact,
            test_long_bleu: long.bleu,
            exact_by_clauses: vec![
                clause(test, 1),
                clause(test, 2),
                clause(long, 3),
                clause(long, 4),
            ],
            valid_loss: history
                .last()
                .context("the run has no validation record")?
                .valid_loss,
        })
    }
}

/// One row of the experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EncodingResult {
    /// The encoding's kind.
    pub kind: String,
    /// Its full config.
    pub encoding: EncodingConfig,
    /// The evaluation, or `None` if training diverged.
    pub metrics: Option<Metrics>,
    /// Why there are no metrics.
    pub diverged: Option<String>,
    /// Validation records every `eval_every` steps.
    pub history: Vec<Record>,
    /// Seconds of training (not evaluation).
    pub train_s: f64,
    /// Training throughput.
    pub tokens_per_s: f64,
}

/// A finished experiment: `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// What was run.
    pub config: ExperimentConfig,
    /// One row per encoding, in the config's order.
    pub results: Vec<EncodingResult>,
}

/// Trains and evaluates every encoding of `cfg` under `out`, writing `results.json` and
/// `results.md` after each one (so an interrupted experiment still shows its rows).
pub fn run(cfg: &ExperimentConfig, out: &Path, opts: RunOptions) -> Result<Experiment> {
    ensure!(!cfg.encodings.is_empty(), "no encodings to compare");
    let mut kinds: Vec<&str> = cfg.encodings.iter().map(|e| e.kind()).collect();
    kinds.sort_unstable();
    if let Some(w) = kinds.windows(2).find(|w| w[0] == w[1]) {
        bail!(
            "the encoding `{}` is listed twice: each kind trains into its own directory",
            w[0]
        );
    }
    check_out_dir::<Experiment>(out, "a translation experiment")?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut experiment = Experiment {
        config: cfg.clone(),
        results: Vec::new(),
    };
    for encoding in &cfg.encodings {
        let kind = encoding.kind();
        if !opts.quiet {
            crate::log(&format!("== {kind} =="));
        }
        let train_cfg = TrainConfig {
            model: posenc_transformer::Config {
                encoding: encoding.clone().into(),
                ..cfg.base.model.clone()
            },
            ..cfg.base.clone()
        };
        let dir = out.join(kind);
        let result = match train_or_reuse(train_cfg, &dir, opts)? {
            Ok(state) => {
                let translator = Translator::load(&dir)?;
                let reports = evaluate(&translator, &cfg.base.data, &DecodeConfig::default())?;
                EncodingResult {
                    kind: kind.to_string(),
                    encoding: encoding.clone(),
                    metrics: Some(Metrics::from_reports(&reports, &state.history)?),
                    diverged: None,
                    history: state.history.clone(),
                    train_s: state.elapsed_s,
                    tokens_per_s: state.tokens_per_second(),
                }
            }
            Err((diverged, state)) => EncodingResult {
                kind: kind.to_string(),
                encoding: encoding.clone(),
                metrics: None,
                diverged: Some(diverged.to_string()),
                history: state
                    .as_ref()
                    .map(|s| s.history.clone())
                    .unwrap_or_default(),
                train_s: state.as_ref().map_or(0.0, |s| s.elapsed_s),
                tokens_per_s: state.as_ref().map_or(0.0, |s| s.tokens_per_second()),
            },
        };
        experiment.results.push(result);
        experiment.save(out)?;
    }
    Ok(experiment)
}

/// Trains `cfg` into `dir`, or reuses/resumes the run already there. A divergence comes
/// back as the inner error, with the state of the last checkpoint if there is one.
#[allow(clippy::type_complexity)]
fn train_or_reuse(
    cfg: TrainConfig,
    dir: &Path,
    opts: RunOptions,
) -> Result<std::result::Result<TrainerState, (Diverged, Option<TrainerState>)>> {
    let outcome = match rundir::inspect(dir)? {
        Contents::Run => {
            // trainer.json may lag the last checkpoint by one save after a kill; resuming
            // reads the checkpoint itself.
            let previous = TrainerState::load(dir)?;
            let diff = previous.config.differences(&cfg);
            ensure!(
                diff.is_empty(),
                "{} holds a run with a different config (it differs in {}); choose another --out or remove it",
                dir.display(),
                diff.join(", ")
            );
            check_budget(dir, previous.step, cfg.steps)?;
            if previous.step == cfg.steps && dir.join(crate::trainer::STATE_FILE).exists() {
                return Ok(Ok(previous));
            }
            trainer::resume(dir, Some(cfg.steps), opts)
        }
        Contents::Empty | Contents::Unfinished { weights: false } => trainer::train(cfg, dir, opts),
        Contents::Unfinished { weights: true } | Contents::Foreign(_) => bail!(
            "{} holds files that are not a run of this experiment; remove it or choose another --out",
            dir.display()
        ),
    };
    match outcome {
        Ok(state) => Ok(Ok(state)),
        Err(e) => match e.diverged() {
            Some(d) => Ok(Err((d, TrainerState::load(dir).ok()))),
            None => Err(e),
        },
    }
}

fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// Checks that the run in `dir`, at step `done`, has not gone past the `steps` asked for.
pub(crate) fn check_budget(dir: &Path, done: usize, steps: usize) -> Result<()> {
    ensure!(
        done <= steps,
        "{} holds a run of {done} steps, more than the {steps} asked for; choose another --out",
        dir.display()
    );
    Ok(())
}

/// Reads an experiment's `results.json`.
pub(crate) fn load_results<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?)
}

/// Checks, before anything is written, that `out` can hold an experiment of the kind whose
/// results are `T` (`what` names it): not a training run, and no `results.json` of another
/// kind of experiment.
pub(crate) fn check_out_dir<T: serde::de::DeserializeOwned>(out: &Path, what: &str) -> Result<()> {
    use crate::rundir::Contents;
    match crate::rundir::inspect(out)? {
        Contents::Run | Contents::Unfinished { .. } => bail!(
            "{} holds a training run, not an experiment: an experiment writes its runs into a \
             directory of its own; choose another --out",
            out.display()
        ),
        Contents::Empty | Contents::Foreign(_) => {}
    }
    let results = out.join(RESULTS_JSON);
    if results.exists() && load_results::<T>(&results).is_err() {
        bail!(
            "{} holds results that are not {what}'s (another kind of experiment?); choose \
             another --out",
            results.display()
        );
    }
    Ok(())
}

/// Writes an experiment's `results.json` and `results.md` into `out`, atomically.
pub(crate) fn save_results(out: &Path, results: &impl Serialize, markdown: &str) -> Result<()> {
    let json = serde_json::to_string_pretty(results)?;
    write_atomic(&out.join(RESULTS_JSON), json.as_bytes())?;
    write_atomic(&out.join(RESULTS_MD), markdown.as_bytes())?;
    Ok(())
}

impl Experiment {
    /// Reads `results.json`.
    pub fn load(path: &Path) -> Result<Self> {
        load_results(path)
    }

    /// Writes `results.json` and `results.md` into `out`.
    pub fn save(&self, out: &Path) -> Result<()> {
        save_results(out, self, &self.markdown())
    }

    /// The results table: one row per encoding. It depends only on the config and seed.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| encoding | test exact | test BLEU | order swap (both right) | test-long exact | test-long BLEU | valid loss |\n\
             |---|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.results {
            match &r.metrics {
                Some(m) => {
                    s += &format!(
                        "| {} | {} | {:.2} | {} | {} | {:.2} | {:.4} |\n",
                        r.kind,
                        percent(m.test_exact),
                        m.test_bleu,
                        percent(m.order_swap),
                        percent(m.test_long_exact),
                        m.test_long_bleu,
                        m.valid_loss
                    )
                }
                None => {
                    s += &format!(
                        "| {} | {} | | | | | |\n",
                        r.kind,
                        r.diverged.as_deref().unwrap_or("no result")
                    )
                }
            }
        }
        s
    }

    /// Exact match by number of clauses, one row per encoding.
    pub fn clauses_table(&self) -> String {
        let mut s = String::from(
            "| encoding | 1 clause | 2 clauses | 3 clauses | 4 clauses |\n|---|---:|---:|---:|---:|\n",
        );
        for r in &self.results {
            let cells: Vec<String> = match &r.metrics {
                Some(m) => m
                    .exact_by_clauses
                    .iter()
                    .map(|x| x.map_or("–".to_string(), percent))
                    .collect(),
                None => vec!["".to_string(); 4],
            };
            s += &format!("| {} | {} |\n", r.kind, cells.join(" | "));
        }
        s
    }

    /// `results.md`: the config, the results table, exact match by length, and time.
    pub fn markdown(&self) -> String {
        let b = &self.config.base;
        let m = &b.model;
        let mut s = format!(
            "# Positional encodings on the English → Kotoba toy task\n\n\
             Each row is the same model (d_model {}, {} heads, d_ff {}, {}+{} layers, dropout {}) \
             trained for {} steps of {} sentences with seed {} on {} pairs, with only the \
             positional encoding swapped. Greedy decoding.\n\n## Results\n\n{}\n\
             ## Exact match by number of clauses\n\n\
             1–2 clauses are the test split; 3–4 clauses (test-long) are longer than anything \
             trained on.\n\n{}\n## Time\n\n| encoding | training | tokens/s |\n|---|---:|---:|\n",
            m.d_model,
            m.heads,
            m.d_ff,
            m.encoder_layers,
            m.decoder_layers,
            m.dropout,
            b.steps,
            b.batch_size,
            b.seed,
            b.data.train,
            self.table(),
            self.clauses_table()
        );
        for r in &self.results {
            s += &format!(
                "| {} | {:.0} s | {:.0} |\n",
                r.kind, r.train_s, r.tokens_per_s
            );
        }
        s
    }
}
