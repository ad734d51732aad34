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
//! [`LmExperimentRun`] is an [`Experiment`]: the one driver trains each labelled encoding
//! and seed ([`crate::run`]) into its own directory, reusing, resuming, sharding and
//! recording divergence as it does for every task. A table of learned positions has no row
//! past its end: it shows as n/a.

use std::path::Path;

use posenc::EncodingConfig;
use posenc_error::{ensure, Context};
use posenc_train::error::Result;
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::corpus::Corpus;
use crate::run::{self, LmInputs};
use crate::task::{
    evaluate, evaluate_observed, LengthEval, LmData, LmRecord, LmState, LmTask, LmTrainConfig,
};
use crate::text_tokenizer::encode;
use posenc_train::experiment::{Cell, Experiment, Grid, Outcome};
use posenc_train::job::Job;
use posenc_train::labelled::{distinct, Labelled, RunKey};
use posenc_train::results::spread;
use posenc_transformer::Streaming;

pub use posenc_train::results::{RESULTS_JSON, RESULTS_MD};

/// What to train and how to evaluate it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LmExperimentConfig {
    /// Everything but the encoding (its `tokenizer` too); `base.seed` is the first seed.
    pub base: LmTrainConfig,
    /// One run per entry and seed, in this order.
    pub encodings: Vec<Labelled>,
    /// Seeds per entry: `base.seed`, `base.seed + 1`, … (1 in results written before).
    #[serde(default = "one")]
    pub seeds: usize,
    /// Evaluation lengths, as multiples of the trained context.
    pub factors: Vec<usize>,
    /// Windows per evaluation length (fewer where the test works hold fewer).
    pub eval_windows: usize,
    /// Also read every evaluation window through a rolling cache, once per sink count
    /// (StreamingLLM); none in results written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<StreamingEval>,
}

/// The rolling caches an experiment also reads its windows through ([`Streaming`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamingEval {
    /// Positions the cache holds, sinks included.
    pub window: usize,
    /// The sink counts, one reading each (0: the most recent tokens only).
    pub sinks: Vec<usize>,
}

impl StreamingEval {
    /// The caches, one per sink count.
    ///
    /// # Errors
    /// No sink count, or a window that does not hold more than one of them.
    pub fn caches(&self) -> Result<Vec<Streaming>> {
        ensure!(!self.sinks.is_empty(), "give at least one sink count");
        Ok(self
            .sinks
            .iter()
            .map(|&s| Streaming::new(s, self.window))
            .collect::<std::result::Result<_, _>>()?)
    }
}

fn one() -> usize {
    1
}

impl LmExperimentConfig {
    /// nanoGPT's shape and budget (2 000 steps), every registered encoding, evaluated at
    /// 1, 2, 4 and 8 × 64, one seed: about four minutes per encoding on two cores.
    pub fn full() -> Self {
        let base = LmTrainConfig::default();
        let context = base.model.context;
        Self {
            encodings: default_encodings(context),
            base,
            seeds: 1,
            factors: vec![1, 2, 4, 8],
            eval_windows: 64,
            streaming: None,
        }
    }

    /// `none`, `sinusoidal`, `rope` and `alibi` at 300 steps: the shape of the figure in
    /// a few minutes.
    pub fn quick() -> Self {
        let mut cfg = Self::full();
        cfg.base.run.steps = 300;
        cfg.base.run.warmup = 30;
        cfg.eval_windows = 16;
        cfg.encodings = ["none", "sinusoidal", "rope", "alibi"]
            .iter()
            .map(|k| k.parse().expect("a built-in kind"))
            .collect();
        cfg
    }

    /// The run of `entry` with seed `seed`, its vocabulary that of `tokenizer`.
    fn run_config(&self, entry: &Labelled, seed: u64, tokenizer: &Tokenizer) -> LmTrainConfig {
        let mut c = self.base.clone();
        c.model.encoding = entry.encoding.clone();
        c.model.vocab_size = tokenizer.get_vocab_size(true);
        c.run.seed = seed;
        c.randomized_positions = entry
            .randomized_positions
            .or(self.base.randomized_positions);
        c
    }
}

/// Every registered encoding at its defaults, labelled by its kind; a table of positions
/// (`learned`) has `rows` rows: the trained context, so it has no answer past it (its
/// defaults would leave rows no step ever trained), or the range of randomized positions,
/// all of which training reaches.
pub fn default_encodings(rows: usize) -> Vec<Labelled> {
    EncodingConfig::kinds()
        .into_iter()
        .filter_map(|k| EncodingConfig::from_kind(k).ok())
        .map(|e| Labelled {
            label: e.kind().to_string(),
            encoding: e.for_positions(rows),
            randomized_positions: None,
        })
        .collect()
}

/// One evaluation length of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "LengthRowFile")]
pub struct LengthRow {
    /// The window length.
    pub len: usize,
    /// The evaluation, if the model reaches this length.
    pub eval: Option<LengthEval>,
    /// Why there is none (a table too short).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// The rolling cache the window was read through, if it was ([`StreamingEval`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling: Option<Rolling>,
}

/// A rolling cache's window and sinks, as a record gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rolling {
    /// Positions the cache holds, sinks included.
    pub window: usize,
    /// Tokens kept from the start.
    pub sinks: usize,
}

/// A [`LengthRow`] as written now, or before (`"eval": {"Ok": …}` or `{"Err": …}`).
#[derive(Deserialize)]
#[serde(untagged)]
enum LengthRowFile {
    Now {
        len: usize,
        eval: Option<LengthEval>,
        #[serde(default)]
        missing: Option<String>,
        #[serde(default)]
        rolling: Option<Rolling>,
    },
    Before {
        len: usize,
        eval: std::result::Result<LengthEval, String>,
    },
}

impl From<LengthRowFile> for LengthRow {
    fn from(f: LengthRowFile) -> Self {
        match f {
            LengthRowFile::Now {
                len,
                eval,
                missing,
                rolling,
            } => Self {
                len,
                eval,
                missing,
                rolling,
            },
            LengthRowFile::Before { len, eval } => Self {
                len,
                missing: eval.as_ref().err().cloned(),
                eval: eval.ok(),
                rolling: None,
            },
        }
    }
}

/// One trained and evaluated run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmEncodingResult {
    /// The entry's label (its kind, in results written before labels).
    #[serde(alias = "kind")]
    pub label: String,
    /// Its settings.
    pub encoding: EncodingConfig,
    /// The run's progress and validation history (its seed in `state.config.seed`); at
    /// step 0 for a run that diverged before its first checkpoint.
    pub state: LmState,
    /// Test loss at each evaluation length (none where the run diverged).
    pub lengths: Vec<LengthRow>,
    /// Why the run stopped early, if its loss diverged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged: Option<String>,
}

impl LmEncodingResult {
    /// The evaluation at the longest length that has one, read whole.
    pub fn longest(&self) -> Option<&LengthEval> {
        let whole = self.lengths.iter().filter(|r| r.rolling.is_none());
        whole.rev().find_map(|r| r.eval.as_ref())
    }
}

/// One run at one evaluation length: a tidy record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmLengthRecord {
    /// Which run: label, encoding, seed, randomized positions.
    #[serde(flatten)]
    pub run: RunKey,
    /// The trained context.
    pub context: usize,
    /// The window length.
    pub length: usize,
    /// The rolling cache's window, when the window was read through one (null: whole).
    pub cache_window: Option<usize>,
    /// The rolling cache's sinks (null: read whole).
    pub sinks: Option<usize>,
    /// Windows evaluated (none where the model does not reach the length).
    pub windows: Option<usize>,
    /// Mean next-token loss, nats.
    pub loss: Option<f64>,
    /// `exp(loss)`.
    pub perplexity: Option<f64>,
    /// Mean loss at the positions at or past the trained context.
    pub loss_past_context: Option<f64>,
    /// The run's last validation loss.
    pub valid_loss: Option<f64>,
    /// Training seconds.
    pub train_s: f64,
    /// Peak resident memory while it trained, MB (`RunState::peak_rss_mb`).
    pub peak_rss_mb: Option<f64>,
}

/// A whole experiment: `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmExperiment {
    /// The kind of experiment: its task's (`posenc <kind> experiment`); absent in results
    /// written before they carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What was run.
    pub config: LmExperimentConfig,
    /// Tokens in the train, valid and test streams.
    pub sizes: [usize; 3],
    /// One row per run, in the config's order (entries, then seeds).
    pub results: Vec<LmEncodingResult>,
    /// One tidy record per run and length (`pandas.DataFrame(results["records"])`);
    /// derived from `results`.
    #[serde(default)]
    pub records: Vec<LmLengthRecord>,
}

/// An LM experiment ready to run: its settings, the corpus and the device. It is an
/// [`Experiment`], which the one driver (`posenc_train::experiment::run`) trains and
/// evaluates.
#[derive(Debug, Clone, Copy)]
pub struct LmExperimentRun<'a> {
    /// The settings.
    pub config: &'a LmExperimentConfig,
    /// The corpus every run trains and is tested on.
    pub corpus: &'a Corpus,
    /// Where to train and evaluate.
    pub device: &'a candle_core::Device,
}

/// What every run of an LM experiment shares: the tokenizer, its token streams and the
/// test works.
pub struct LmExperimentData {
    inputs: LmInputs,
    test: Vec<u32>,
}

impl Experiment for LmExperimentRun<'_> {
    const KIND: &'static str = "a language-model experiment";
    type Config = LmExperimentConfig;
    type Run = LmTrainConfig;
    type Record = LmRecord;
    type Data = LmExperimentData;
    type Facts = [usize; 3];
    type Cell = LmEncodingResult;
    type Results = LmExperiment;

    fn config(&self) -> &LmExperimentConfig {
        self.config
    }

    fn grid(&self) -> Grid<'_> {
        let c = self.config;
        Grid::new(&c.encodings, c.base.run.seed, c.seeds)
    }

    /// # Errors
    /// Bad settings or evaluation factors, a factor past the test works, a tokenizer that
    /// cannot be trained.
    fn prepare(&self) -> Result<(LmExperimentData, [usize; 3])> {
        let cfg = self.config;
        ensure!(
            !cfg.factors.is_empty() && cfg.factors.iter().all(|&f| f > 0),
            "evaluation factors must be at least 1, got {:?}",
            cfg.factors
        );
        ensure!(
            cfg.factors.windows(2).all(|w| w[0] < w[1]),
            "evaluation factors must increase, each once, got {:?}",
            cfg.factors
        );
        let tokenizer = cfg
            .base
            .tokenizer
            .train(&Corpus::stream(&self.corpus.train))?;
        let data = LmData::from_corpus(self.corpus, &tokenizer)?;
        let test = encode(&tokenizer, &Corpus::stream(&self.corpus.test))?;
        for f in &cfg.factors {
            let context = cfg.base.model.context;
            let len = f.checked_mul(context).filter(|&len| len < test.len());
            ensure!(
                len.is_some(),
                "evaluation factor {f} asks for windows of {f} × {context} tokens, but the test works hold {} tokens",
                test.len()
            );
        }
        if let Some(streaming) = &cfg.streaming {
            streaming.caches()?;
        }
        for entry in &cfg.encodings {
            cfg.run_config(entry, cfg.base.run.seed, &tokenizer)
                .validate()
                .with_context(|| format!("the run of `{}`", entry.label))?;
        }
        let sizes = [data.train.len(), data.valid.len(), test.len()];
        Ok((
            LmExperimentData {
                inputs: LmInputs { tokenizer, data },
                test,
            },
            sizes,
        ))
    }

    fn run_config(&self, data: &LmExperimentData, entry: &Labelled, seed: u64) -> LmTrainConfig {
        self.config.run_config(entry, seed, &data.inputs.tokenizer)
    }

    type Job<'d> = LmTask<'d>;

    fn inputs<'d>(&self, data: &'d Self::Data) -> &'d <Self::Job<'d> as Job<'d>>::Inputs {
        &data.inputs
    }

    fn device(&self) -> &candle_core::Device {
        self.device
    }

    fn record(
        &self,
        data: &LmExperimentData,
        cell: &Cell<'_, LmTrainConfig>,
        outcome: Outcome<LmState>,
    ) -> Result<LmEncodingResult> {
        let (state, diverged) = match outcome {
            Outcome::Trained(state) => (state, None),
            Outcome::Diverged(why, state) => (
                state.unwrap_or_else(|| LmState::new(String::new(), cell.run.clone())),
                Some(why.to_string()),
            ),
        };
        let mut lengths = Vec::new();
        if diverged.is_none() {
            let model = run::load(&cell.dir, self.device)?.model;
            let context = cell.run.model.context;
            for f in &self.config.factors {
                let len = f * context;
                lengths.push(match model.max_positions() {
                    Some(max) if len > max => LengthRow {
                        len,
                        eval: None,
                        missing: Some(format!("no positions past {max}")),
                        rolling: None,
                    },
                    _ => LengthRow {
                        len,
                        eval: Some(evaluate(
                            &model,
                            &data.test,
                            len,
                            self.config.eval_windows,
                            context,
                        )?),
                        missing: None,
                        rolling: None,
                    },
                });
            }
            let caches = match &self.config.streaming {
                Some(s) => s.caches()?,
                None => Vec::new(),
            };
            for cache in caches {
                for f in &self.config.factors {
                    let len = f * context;
                    let windows = self.config.eval_windows;
                    let e = evaluate_observed(
                        &model,
                        &data.test,
                        len,
                        windows,
                        context,
                        Some(cache),
                        |_| {},
                    )?;
                    lengths.push(LengthRow {
                        len,
                        eval: Some(e),
                        missing: None,
                        rolling: Some(Rolling {
                            window: cache.window(),
                            sinks: cache.sinks(),
                        }),
                    });
                }
            }
        }
        Ok(LmEncodingResult {
            label: cell.entry.label.clone(),
            encoding: cell.entry.encoding.clone(),
            state,
            lengths,
            diverged,
        })
    }

    fn results(&self, sizes: &[usize; 3], cells: Vec<LmEncodingResult>) -> LmExperiment {
        let mut experiment = LmExperiment {
            kind: Some(LmTask::KIND.to_string()),
            config: self.config.clone(),
            sizes: *sizes,
            results: cells,
            records: Vec::new(),
        };
        experiment.records = experiment.tidy();
        experiment
    }

    fn markdown(results: &LmExperiment) -> String {
        results.markdown()
    }
}

impl LmExperiment {
    /// Reads `results.json` (one written before labels and tidy records too).
    ///
    /// # Errors
    /// A missing or malformed file.
    pub fn load(path: &Path) -> Result<Self> {
        let mut exp: Self = posenc_train::results::load_results(path)?;
        exp.records = exp.tidy();
        Ok(exp)
    }

    /// Writes `results.json` and `results.md` into `out`.
    ///
    /// # Errors
    /// A failed write.
    pub fn save(&self, out: &Path) -> Result<()> {
        posenc_train::results::save_results(out, self, &self.markdown())
    }

    /// Reads several `results.json` and pools them ([`Self::pool`]); one is read as it is.
    ///
    /// # Errors
    /// A file that is missing or malformed (named), or experiments that cannot be pooled.
    pub fn load_pooled(paths: &[impl AsRef<Path>]) -> Result<Self> {
        let parts = paths
            .iter()
            .map(|p| Self::load(p.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<String> = paths
            .iter()
            .map(|p| p.as_ref().display().to_string())
            .collect();
        Ok(Self::pool(parts).with_context(|| format!("pooling {}", names.join(", ")))?)
    }

    /// Pools experiments of one setting into one, as one process running all their runs
    /// would have written it: more encodings, or more seeds of the same ones (runs made in
    /// several calls or on several machines). Labels keep the order they first appear in;
    /// each label's runs are in the order of their seeds, and the first seed is the
    /// smallest. A run found in two of them (a label and seed) is counted once if both
    /// evaluated it the same; its training time may differ.
    ///
    /// # Errors
    /// No experiment; experiments that differ in anything but their encodings and seeds
    /// (the model, the training and its steps, the data, the evaluation lengths or windows);
    /// one label naming two encodings; one run evaluated differently in two of them.
    pub fn pool(parts: Vec<LmExperiment>) -> Result<Self> {
        let mut parts = parts.into_iter();
        let Some(mut pooled) = parts.next() else {
            posenc_error::bail!("no experiments to pool");
        };
        // The first seed and the entries are not part of the setting: pooled ones differ.
        let setting = |e: &LmExperiment| {
            let mut c = e.config.clone();
            c.base.run.seed = 0;
            c.encodings.clear();
            c.seeds = 0;
            serde_json::json!({"config": c, "sizes": e.sizes})
        };
        for (i, part) in parts.enumerate() {
            let differ =
                posenc_train::results::value_differences(&setting(&pooled), &setting(&part));
            posenc_train::labelled::join_entries(
                i + 2,
                &differ,
                &mut pooled.config.encodings,
                part.config.encodings,
            )?;
            for run in part.results {
                let seed = run.state.config.run.seed;
                match pooled
                    .results
                    .iter()
                    .find(|r| r.label == run.label && r.state.config.run.seed == seed)
                {
                    Some(same) => ensure!(
                        same.lengths == run.lengths && same.diverged == run.diverged,
                        "seed {seed} of `{}` is in two of the experiments with different \
                         results: pool each run once",
                        run.label
                    ),
                    None => pooled.results.push(run),
                }
            }
        }
        let order = |label: &str| {
            pooled
                .config
                .encodings
                .iter()
                .position(|e| e.label == label)
        };
        let mut results = std::mem::take(&mut pooled.results);
        results.sort_by_key(|r| (order(&r.label), r.state.config.run.seed));
        pooled.results = results;
        if let Some(first) = pooled.results.iter().map(|r| r.state.config.run.seed).min() {
            pooled.config.base.run.seed = first;
        }
        pooled.config.seeds = pooled
            .labels()
            .iter()
            .map(|l| pooled.results.iter().filter(|r| &r.label == l).count())
            .max()
            .unwrap_or(pooled.config.seeds);
        pooled.records = pooled.tidy();
        Ok(pooled)
    }

    /// The tidy records of [`Self::results`]: one per run and length.
    pub fn tidy(&self) -> Vec<LmLengthRecord> {
        let context = self.config.base.model.context;
        self.results
            .iter()
            .flat_map(|r| {
                r.lengths.iter().map(move |row| LmLengthRecord {
                    run: RunKey::new(
                        &r.label,
                        &r.encoding,
                        r.state.config.run.seed,
                        r.state.config.randomized_positions,
                    ),
                    context,
                    length: row.len,
                    cache_window: row.rolling.map(|r| r.window),
                    sinks: row.rolling.map(|r| r.sinks),
                    windows: row.eval.as_ref().map(|e| e.windows),
                    loss: row.eval.as_ref().map(|e| e.loss),
                    perplexity: row.eval.as_ref().map(|e| e.perplexity()),
                    loss_past_context: row.eval.as_ref().and_then(|e| e.tail_loss),
                    valid_loss: crate::task::valid_loss(&r.state),
                    train_s: r.state.elapsed_s,
                    peak_rss_mb: r.state.peak_rss_mb,
                })
            })
            .collect()
    }

    /// The labels in the order they were run.
    pub fn labels(&self) -> Vec<String> {
        distinct(self.results.iter().map(|r| r.label.as_str()))
    }

    /// The results: test perplexity at every length, the loss past the trained context,
    /// and training time; with several seeds, mean ± standard deviation over them.
    pub fn table(&self) -> String {
        let context = self.config.base.model.context;
        let lens: Vec<usize> = self.config.factors.iter().map(|f| f * context).collect();
        let past: Vec<usize> = lens.iter().copied().filter(|&l| l > context).collect();
        let mut s = String::from("| encoding | seeds | valid loss |");
        for l in &lens {
            s += &format!(" ppl @ {l} |");
        }
        for l in &past {
            s += &format!(" loss past {context} @ {l} |");
        }
        s += " train s | peak MB |\n|---|---:|---:|";
        s += &"---:|".repeat(lens.len() + past.len() + 2);
        s += "\n";
        for label in self.labels() {
            let records: Vec<&LmLengthRecord> = self
                .records
                .iter()
                .filter(|r| r.run.label == label)
                .collect();
            let runs: Vec<&LmEncodingResult> =
                self.results.iter().filter(|r| r.label == label).collect();
            let valid: Vec<f64> = runs
                .iter()
                .filter_map(|r| crate::task::valid_loss(&r.state))
                .collect();
            s += &format!("| {label} | {} | {} |", runs.len(), spread(&valid, 4));
            let at = |len: usize, f: fn(&LmLengthRecord) -> Option<f64>| -> Vec<f64> {
                records
                    .iter()
                    .filter(|r| r.length == len && r.sinks.is_none())
                    .filter_map(|r| f(r))
                    .collect()
            };
            for &l in &lens {
                s += &format!(" {} |", spread(&at(l, |r| r.perplexity), 2));
            }
            for &l in &past {
                s += &format!(" {} |", spread(&at(l, |r| r.loss_past_context), 3));
            }
            let train: Vec<f64> = runs.iter().map(|r| r.state.elapsed_s).collect();
            let peak: Vec<f64> = runs.iter().filter_map(|r| r.state.peak_rss_mb).collect();
            s += &format!(" {} | {} |\n", spread(&train, 0), spread(&peak, 0));
        }
        s
    }

    /// Each entry's perplexity with its windows read whole and through each rolling cache
    /// ([`StreamingEval`]), a row per reading; empty without rolling caches.
    pub fn streaming_table(&self) -> String {
        let Some(streaming) = &self.config.streaming else {
            return String::new();
        };
        let context = self.config.base.model.context;
        let lens: Vec<usize> = self.config.factors.iter().map(|f| f * context).collect();
        let mut s = format!(
            "\n## Read through a rolling cache\n\nEach window read again a token at a time \
             through a key/value cache of {} positions that keeps its first tokens (the sinks) \
             and the most recent ones, each at its place within the cache (StreamingLLM, Xiao \
             et al. 2024): memory stays at {} positions however long the window.\n\n\
             | encoding | read | seeds |",
            streaming.window, streaming.window
        );
        for l in &lens {
            s += &format!(" ppl @ {l} |");
        }
        s += "\n|---|---|---:|";
        s += &"---:|".repeat(lens.len());
        s += "\n";
        let readings = std::iter::once(None).chain(streaming.sinks.iter().map(|&n| Some(n)));
        let readings: Vec<Option<usize>> = readings.collect();
        for label in self.labels() {
            for &sinks in &readings {
                let records: Vec<&LmLengthRecord> = self
                    .records
                    .iter()
                    .filter(|r| r.run.label == label && r.sinks == sinks)
                    .collect();
                let mut seeds: Vec<u64> = records.iter().map(|r| r.run.seed).collect();
                seeds.dedup();
                let read = match sinks {
                    None => "whole".to_string(),
                    Some(n) => format!("rolling, {n} sinks"),
                };
                s += &format!("| {label} | {read} | {} |", seeds.len());
                for &l in &lens {
                    let ppl: Vec<f64> = records
                        .iter()
                        .filter(|r| r.length == l)
                        .filter_map(|r| r.perplexity)
                        .collect();
                    s += &format!(" {} |", spread(&ppl, 2));
                }
                s += "\n";
            }
        }
        s
    }

    /// `results.md`: the settings, the data and the table.
    pub fn markdown(&self) -> String {
        let b = &self.config.base;
        let m = &b.model;
        format!(
            "# Length extrapolation of a causal language model\n\n\
             {} layers, {} heads, width {}, context L = {}, batch {}, {} steps, {}, {}{}.\n\
             Tokens: train {}, valid {}, test {}. Test perplexity over up to {} \
             non-overlapping windows of each length; \"loss past {}\" averages only the \
             positions at or past the trained context.\n\n{}",
            m.layers,
            m.heads,
            m.d_model,
            m.context,
            b.run.batch_size,
            b.run.steps,
            match self.config.seeds {
                1 => format!("seed {}", b.run.seed),
                n => format!(
                    "seeds {}–{} (mean ± standard deviation over them)",
                    b.run.seed,
                    b.run.seed + n as u64 - 1
                ),
            },
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
        ) + &self.streaming_table()
            + &self.diverged_note()
    }

    /// A line per run whose loss diverged (it has no evaluation), or nothing.
    fn diverged_note(&self) -> String {
        let lines: Vec<String> = self
            .results
            .iter()
            .filter_map(|r| {
                let why = r.diverged.as_ref()?;
                Some(format!(
                    "- `{}` seed {}: {why}\n",
                    r.label, r.state.config.run.seed
                ))
            })
            .collect();
        match lines.is_empty() {
            true => String::new(),
            false => format!("\nDiverged, so not evaluated:\n\n{}", lines.concat()),
        }
    }
}
