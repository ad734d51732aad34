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
//! [`ExperimentConfig::on`] a device is an [`posenc_train::experiment::Experiment`]: the
//! one driver runs it (`posenc_train::experiment::run`), training each labelled encoding
//! and seed with [`posenc_train::job::train`] into its own directory, reusing, resuming, sharding and
//! recording divergence as it does for every task.

use std::path::Path;

use candle_core::Device;
use posenc::EncodingConfig;
use posenc_error::Context;
use posenc_train::error::Result;
use serde::{Deserialize, Serialize};

use crate::data::DataConfig;
use crate::decode::DecodeConfig;
use crate::eval::{evaluate, SplitReport};
use crate::task::{Record, TrainConfig, TrainerState, Translation, Translator};
use posenc_train::experiment::{Cell, Grid, Outcome};
use posenc_train::fit::RunSchedule;
use posenc_train::job::Job;
use posenc_train::labelled::{distinct, Labelled, RunKey};
use posenc_train::results::{load_results, save_results, spread};

pub use posenc_train::results::{RESULTS_JSON, RESULTS_MD};

/// What to train: one base config, and the encodings to swap into it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentConfig {
    /// Everything but the encoding; `base.seed` is the first seed.
    pub base: TrainConfig,
    /// One run per entry and seed, in this order.
    pub encodings: Vec<Labelled>,
    /// Seeds per entry: `base.seed`, `base.seed + 1`, … (1 in results written before).
    #[serde(default = "one")]
    pub seeds: usize,
}

fn one() -> usize {
    1
}

impl ExperimentConfig {
    /// Every kind, 1000 steps each: about half an hour on two cores.
    pub fn full() -> Self {
        let mut base = Self::recipe();
        base.run.steps = 1000;
        Self {
            base,
            encodings: all_kinds(),
            seeds: 1,
        }
    }

    /// The toy model and corpus of [`TrainConfig::default`], on a gentler schedule that
    /// converges in fewer steps (Noam factor 1, 100 warm-up steps), validated every 100.
    fn recipe() -> TrainConfig {
        let defaults = TrainConfig::default();
        TrainConfig {
            lr_factor: 1.0,
            run: RunSchedule {
                warmup: 100,
                eval_every: 100,
                save_every: 500,
                ..defaults.run
            },
            ..defaults
        }
    }

    /// `none` against `sinusoidal` on a smaller budget: the documents' central claim in
    /// under four minutes.
    pub fn quick() -> Self {
        let recipe = Self::recipe();
        Self {
            base: TrainConfig {
                run: RunSchedule {
                    steps: 500,
                    ..recipe.run
                },
                eval_sentences: 100,
                data: DataConfig {
                    valid: 200,
                    test: 400,
                    test_long: 200,
                    order_swap: 200,
                    ..DataConfig::default()
                },
                ..recipe
            },
            encodings: ["none", "sinusoidal"]
                .iter()
                .map(|k| k.parse().expect("a known kind"))
                .collect(),
            seeds: 1,
        }
    }
}

/// Every registered kind at its defaults, labelled by its kind.
fn all_kinds() -> Vec<Labelled> {
    EncodingConfig::kinds()
        .into_iter()
        .filter_map(|k| EncodingConfig::from_kind(k).ok())
        .map(Labelled::new)
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

/// One run of the experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EncodingResult {
    /// The entry's label (its kind, in results written before labels).
    #[serde(alias = "kind")]
    pub label: String,
    /// The run's seed.
    #[serde(default)]
    pub seed: u64,
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
    /// Peak resident memory while it trained, MB (`RunState::peak_rss_mb`; absent in
    /// results written before it was recorded).
    #[serde(default)]
    pub peak_rss_mb: Option<f64>,
}

/// One run's evaluation: a tidy record (fractions; `None` where the run diverged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranslationRecord {
    /// Which run: label, encoding, seed, randomized positions.
    #[serde(flatten)]
    pub run: RunKey,
    /// Test exact match (1–2 clauses).
    pub test_exact: Option<f64>,
    /// Test corpus BLEU.
    pub test_bleu: Option<f64>,
    /// Order-swap pairs with both halves right.
    pub order_swap: Option<f64>,
    /// Test-long exact match (3–4 clauses).
    pub test_long_exact: Option<f64>,
    /// Test-long corpus BLEU.
    pub test_long_bleu: Option<f64>,
    /// Exact match of 1-clause sentences.
    pub exact_1_clause: Option<f64>,
    /// … of 2 clauses.
    pub exact_2_clauses: Option<f64>,
    /// … of 3 clauses (longer than any trained on).
    pub exact_3_clauses: Option<f64>,
    /// … of 4 clauses.
    pub exact_4_clauses: Option<f64>,
    /// Validation loss at the last step.
    pub valid_loss: Option<f64>,
    /// Training seconds.
    pub train_s: f64,
    /// Peak resident memory while it trained, MB.
    pub peak_rss_mb: Option<f64>,
    /// Why the run has no evaluation.
    pub diverged: Option<String>,
}

/// A finished experiment: `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// The kind of experiment: its task's (`posenc <kind> experiment`); absent in results
    /// written before they carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What was run.
    pub config: ExperimentConfig,
    /// One row per run, in the config's order (entries, then seeds).
    pub results: Vec<EncodingResult>,
    /// One tidy record per run (`pandas.DataFrame(results["records"])`); derived from
    /// `results`.
    #[serde(default)]
    pub records: Vec<TranslationRecord>,
}

/// A translation experiment ready to run: its settings and the device. It is an
/// [`Experiment`](posenc_train::experiment::Experiment), which the one driver
/// (`posenc_train::experiment::run`) trains and evaluates.
#[derive(Debug, Clone, Copy)]
pub struct ExperimentRun<'a> {
    /// The settings.
    pub config: &'a ExperimentConfig,
    /// Where to train and evaluate.
    pub device: &'a Device,
}

impl ExperimentConfig {
    /// This experiment, to run on `device`.
    pub fn on<'a>(&'a self, device: &'a Device) -> ExperimentRun<'a> {
        ExperimentRun {
            config: self,
            device,
        }
    }
}

impl posenc_train::experiment::Experiment for ExperimentRun<'_> {
    const KIND: &'static str = "a translation experiment";
    type Config = ExperimentConfig;
    type Run = TrainConfig;
    type Record = Record;
    type Data = ();
    type Facts = ();
    type Cell = EncodingResult;
    type Results = Experiment;

    fn config(&self) -> &ExperimentConfig {
        self.config
    }

    fn grid(&self) -> Grid<'_> {
        Grid::new(
            &self.config.encodings,
            self.config.base.run.seed,
            self.config.seeds,
        )
    }

    fn prepare(&self) -> Result<((), ())> {
        Ok(((), ()))
    }

    fn run_config(&self, _: &(), entry: &Labelled, seed: u64) -> TrainConfig {
        TrainConfig {
            model: posenc_transformer::Config {
                encoding: entry.encoding.clone().into(),
                ..self.config.base.model.clone()
            },
            run: RunSchedule {
                seed,
                ..self.config.base.run
            },
            randomized_positions: entry
                .randomized_positions
                .or(self.config.base.randomized_positions),
            ..self.config.base.clone()
        }
    }

    fn differences(&self, previous: &TrainConfig, wanted: &TrainConfig) -> Vec<String> {
        previous.differences(wanted)
    }

    type Job<'d> = Translation;

    fn inputs<'d>(&self, _: &'d Self::Data) -> &'d <Self::Job<'d> as Job<'d>>::Inputs {
        &()
    }

    fn device(&self) -> &Device {
        self.device
    }

    fn record(
        &self,
        _: &(),
        cell: &Cell<'_, TrainConfig>,
        outcome: Outcome<TrainerState>,
    ) -> Result<EncodingResult> {
        let (metrics, diverged, state) = match outcome {
            Outcome::Trained(state) => {
                let translator = Translator::load(&cell.dir, self.device)?;
                let reports = evaluate(
                    &translator,
                    &self.config.base.data,
                    &DecodeConfig::default(),
                    0,
                )?;
                let metrics = Metrics::from_reports(&reports, &state.history)?;
                (Some(metrics), None, Some(state))
            }
            Outcome::Diverged(diverged, state) => (None, Some(diverged.to_string()), state),
        };
        Ok(EncodingResult {
            label: cell.entry.label.clone(),
            seed: cell.seed,
            encoding: cell.entry.encoding.clone(),
            metrics,
            diverged,
            history: state
                .as_ref()
                .map(|s| s.history.clone())
                .unwrap_or_default(),
            train_s: state.as_ref().map_or(0.0, |s| s.elapsed_s),
            tokens_per_s: state.as_ref().map_or(0.0, |s| s.tokens_per_second()),
            peak_rss_mb: state.as_ref().and_then(|s| s.peak_rss_mb),
        })
    }

    fn results(&self, _: &(), cells: Vec<EncodingResult>) -> Experiment {
        let mut experiment = Experiment {
            kind: Some(Translation::KIND.to_string()),
            config: self.config.clone(),
            results: cells,
            records: Vec::new(),
        };
        experiment.records = experiment.tidy();
        experiment
    }

    fn markdown(results: &Experiment) -> String {
        results.markdown()
    }
}

impl Experiment {
    /// Reads `results.json` (one written before labels, seeds and tidy records too).
    pub fn load(path: &Path) -> Result<Self> {
        let mut exp: Self = load_results(path)?;
        if exp.config.seeds == 1 {
            let seed = exp.config.base.run.seed;
            exp.results.iter_mut().for_each(|r| r.seed = seed);
        }
        exp.records = exp.tidy();
        Ok(exp)
    }

    /// Writes `results.json` and `results.md` into `out`.
    pub fn save(&self, out: &Path) -> Result<()> {
        save_results(out, self, &self.markdown())
    }

    /// The tidy records of [`Self::results`]: one per run.
    pub fn tidy(&self) -> Vec<TranslationRecord> {
        self.results
            .iter()
            .map(|r| {
                let m = r.metrics.as_ref();
                let clause =
                    |i: usize| m.and_then(|m| m.exact_by_clauses.get(i).copied().flatten());
                let randomized = self
                    .config
                    .encodings
                    .iter()
                    .find(|e| e.label == r.label)
                    .and_then(|e| e.randomized_positions)
                    .or(self.config.base.randomized_positions);
                TranslationRecord {
                    run: RunKey::new(&r.label, &r.encoding, r.seed, randomized),
                    test_exact: m.map(|m| m.test_exact),
                    test_bleu: m.map(|m| m.test_bleu),
                    order_swap: m.map(|m| m.order_swap),
                    test_long_exact: m.map(|m| m.test_long_exact),
                    test_long_bleu: m.map(|m| m.test_long_bleu),
                    exact_1_clause: clause(0),
                    exact_2_clauses: clause(1),
                    exact_3_clauses: clause(2),
                    exact_4_clauses: clause(3),
                    valid_loss: m.map(|m| m.valid_loss),
                    train_s: r.train_s,
                    peak_rss_mb: r.peak_rss_mb,
                    diverged: r.diverged.clone(),
                }
            })
            .collect()
    }

    /// The labels in the order they were run.
    pub fn labels(&self) -> Vec<String> {
        distinct(self.results.iter().map(|r| r.label.as_str()))
    }

    /// One column of the records of `label`: the values of the runs that have one.
    fn column(&self, label: &str, f: impl Fn(&TranslationRecord) -> Option<f64>) -> Vec<f64> {
        self.records
            .iter()
            .filter(|r| r.run.label == label)
            .filter_map(f)
            .collect()
    }

    /// Percent of a column, mean ± standard deviation over seeds.
    fn percents(&self, label: &str, f: impl Fn(&TranslationRecord) -> Option<f64>) -> String {
        let xs: Vec<f64> = self.column(label, f).iter().map(|x| 100.0 * x).collect();
        match xs.is_empty() {
            true => "–".to_string(),
            false => format!("{}%", spread(&xs, 1)),
        }
    }

    /// The results table: one row per label, mean ± standard deviation over its seeds.
    /// It depends only on the config and seeds.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| encoding | seeds | test exact | test BLEU | order swap (both right) | test-long exact | test-long BLEU | valid loss |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for label in self.labels() {
            let runs = self.records.iter().filter(|r| r.run.label == label).count();
            let diverged: Vec<&str> = self
                .records
                .iter()
                .filter(|r| r.run.label == label)
                .filter_map(|r| r.diverged.as_deref())
                .collect();
            if diverged.len() == runs {
                s += &format!("| {label} | {runs} | {} | | | | | |\n", diverged.join("; "));
                continue;
            }
            s += &format!(
                "| {label} | {runs} | {} | {} | {} | {} | {} | {} |\n",
                self.percents(&label, |r| r.test_exact),
                spread(&self.column(&label, |r| r.test_bleu), 2),
                self.percents(&label, |r| r.order_swap),
                self.percents(&label, |r| r.test_long_exact),
                spread(&self.column(&label, |r| r.test_long_bleu), 2),
                spread(&self.column(&label, |r| r.valid_loss), 4),
            );
        }
        s
    }

    /// Exact match by number of clauses, one row per label.
    pub fn clauses_table(&self) -> String {
        let mut s = String::from(
            "| encoding | 1 clause | 2 clauses | 3 clauses | 4 clauses |\n|---|---:|---:|---:|---:|\n",
        );
        for label in self.labels() {
            s += &format!(
                "| {label} | {} | {} | {} | {} |\n",
                self.percents(&label, |r| r.exact_1_clause),
                self.percents(&label, |r| r.exact_2_clauses),
                self.percents(&label, |r| r.exact_3_clauses),
                self.percents(&label, |r| r.exact_4_clauses),
            );
        }
        s
    }

    /// `results.md`: the config, the results table, exact match by length, and time.
    pub fn markdown(&self) -> String {
        let b = &self.config.base;
        let m = &b.model;
        let seeds = match self.config.seeds {
            1 => format!("seed {}", b.run.seed),
            n => format!(
                "seeds {}–{} (mean ± standard deviation over them)",
                b.run.seed,
                b.run.seed + n as u64 - 1
            ),
        };
        let mut s = format!(
            "# Positional encodings on the English → Kotoba toy task\n\n\
             Each row is the same model (d_model {}, {} heads, d_ff {}, {}+{} layers, dropout {}) \
             trained for {} steps of {} sentences with {} on {} pairs{}, with only the \
             positional encoding swapped. Greedy decoding.\n\n## Results\n\n{}\n\
             ## Exact match by number of clauses\n\n\
             1–2 clauses are the test split; 3–4 clauses (test-long) are longer than anything \
             trained on.\n\n{}\n## Time\n\n| encoding | seed | training | tokens/s | peak memory |\n|---|---:|---:|---:|---:|\n",
            m.d_model,
            m.heads,
            m.d_ff,
            m.encoder_layers,
            m.decoder_layers,
            m.dropout,
            b.run.steps,
            b.run.batch_size,
            seeds,
            b.data.train,
            b.randomized_positions.map_or(String::new(), |r| format!(
                " at randomized positions (a sorted random subset of 0..{r} per step)"
            )),
            self.table(),
            self.clauses_table()
        );
        for r in &self.results {
            s += &format!(
                "| {} | {} | {:.0} s | {:.0} | {} |\n",
                r.label,
                r.seed,
                r.train_s,
                r.tokens_per_s,
                r.peak_rss_mb.map_or("n/a".into(), |m| format!("{m:.0} MB"))
            );
        }
        s
    }
}
