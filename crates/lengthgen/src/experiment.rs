//! `posenc lengthgen`: one run per labelled encoding and seed on one problem, each tested
//! for exact answers at lengths inside and past the trained range.
//!
//! [`LengthgenExperimentConfig`] is an [`Experiment`]: the one driver trains each labelled
//! encoding and seed into its own directory, reusing, resuming, sharding and recording
//! divergence as it does for every task. Every run is tested on the same instances (drawn from a fixed stream per length, held out from
//! training at the trained lengths), so encodings and seeds compare instance for instance.
//!
//! `results.json` holds tidy records, one per run and test length:
//!
//! ```text
//! {"task": "copy", "train_lengths": [1, 20], "config": {…},
//!  "records": [{"task", "label", "encoding", "seed", "randomized_positions", "length",
//!               "trained", "instances", "accuracy", "token_accuracy"}, …],
//!  "runs": [{"label", "seed", "steps", "train_s", "peak_rss_mb", "valid_exact", "diverged"}, …]}
//! ```
//!
//! so `pandas.DataFrame(json.load(f)["records"])` is the whole table.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::problems::{Instance, Problem};
use crate::task::{
    load, score, test_instances, Lengthgen, LengthgenConfig, LengthgenRecord, LengthgenState, Score,
};
use posenc_error::{ensure, Context};
use posenc_train::error::Result;
use posenc_train::experiment::{Cell, Experiment, Grid, Outcome};
use posenc_train::job::Job;
use posenc_train::labelled::{check_seeds, check_unique, Labelled, RunKey};
use posenc_train::results::{differences, mean_sd};
use posenc_transformer::LanguageModel;

/// The stream every run's test instances come from (length `n` uses sub-stream `n`).
const TEST_SEED: u64 = 0x7E57_0000_1E46_7400;

/// The encodings Ruoss et al. 2023 train at randomized positions, as far as we ship them.
const RANDOMIZED_BY_RUOSS: [&str; 5] = ["sinusoidal", "learned", "rope", "alibi", "t5"];

/// What to train and test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LengthgenExperimentConfig {
    /// Everything but the encoding; `base.seed` is the first seed.
    pub base: LengthgenConfig,
    /// One run per entry and seed, in this order.
    pub encodings: Vec<Labelled>,
    /// Seeds per entry: `base.seed`, `base.seed + 1`, ….
    pub seeds: usize,
    /// Instance lengths tested.
    pub test_lengths: Vec<usize>,
    /// Test instances per length.
    pub test_instances: usize,
}

impl LengthgenExperimentConfig {
    /// `task` trained on lengths 1–10 for 3 000 steps, tested at 16 lengths up to 40
    /// (4×), with [`Self::default_encodings`], three seeds each: about half a minute a run
    /// on two cores.
    pub fn full(task: Problem) -> Self {
        let mut base = LengthgenConfig::default().for_task(task, [1, 10]);
        base.run.steps = 3000;
        base.run.save_every = 1000;
        let mut cfg = Self {
            base,
            encodings: Vec::new(),
            seeds: 3,
            test_lengths: default_test_lengths(10),
            test_instances: 100,
        };
        cfg.encodings = cfg.default_encodings();
        cfg
    }

    /// Lengths 1–5 for 1 000 steps, tested up to 20 (4×), with `none`, `sinusoidal`,
    /// `rope` and `alibi`, three seeds: a few minutes on two cores.
    pub fn quick(task: Problem) -> Self {
        let mut base = LengthgenConfig::default().for_task(task, [1, 5]);
        base.run.steps = 1000;
        base.run.warmup = 60;
        base.run.eval_every = 250;
        base.run.save_every = 1000;
        base.eval_instances = 64;
        Self {
            base,
            encodings: ["none", "sinusoidal", "rope", "alibi"]
                .iter()
                .map(|k| k.parse().expect("a built-in kind"))
                .collect(),
            seeds: 3,
            test_lengths: default_test_lengths(5),
            test_instances: 64,
        }
    }

    /// Every registered encoding at its defaults, a table of positions (`learned`) sized
    /// to reach the longest test; then the encodings Ruoss et al. 2023 randomize
    /// (sinusoidal, learned, RoPE, ALiBi and a relative bias, here T5's), trained at
    /// randomized positions over that same reach, labelled `kind:randomized=R`.
    pub fn default_encodings(&self) -> Vec<Labelled> {
        let reach = self.positions_needed(None);
        let entry = |kind: &str| {
            let encoding = posenc::EncodingConfig::from_kind(kind).ok()?;
            let mut entry = Labelled::new(encoding.for_positions(reach));
            entry.label = kind.to_string();
            Some(entry)
        };
        let plain = posenc::EncodingConfig::kinds()
            .into_iter()
            .filter_map(entry);
        let randomized = RANDOMIZED_BY_RUOSS.iter().filter_map(|k| {
            let mut e = entry(k)?;
            e.label = format!("{k}:randomized={reach}");
            e.randomized_positions = Some(reach);
            Some(e)
        });
        plain.chain(randomized).collect()
    }

    /// Positions the longest test sequence, or training at randomized positions below
    /// `randomized`, reaches.
    fn positions_needed(&self, randomized: Option<usize>) -> usize {
        let longest = self.test_lengths.iter().max().copied().unwrap_or(0);
        (self.base.task.sequence_len(longest) - 1).max(randomized.unwrap_or(0))
    }

    /// The run of `entry` with seed `seed`.
    pub fn run_config(&self, entry: &Labelled, seed: u64) -> LengthgenConfig {
        let mut cfg = self.base.clone();
        cfg.model.encoding = entry.encoding.clone();
        cfg.run.seed = seed;
        cfg.randomized_positions = entry
            .randomized_positions
            .or(self.base.randomized_positions);
        cfg
    }

    /// Checks every setting, and that every run's model is valid, before anything runs.
    ///
    /// # Errors
    /// The setting or run at fault, named.
    pub fn validate(&self) -> Result<()> {
        check_unique(&self.encodings)?;
        check_seeds(self.base.run.seed, self.seeds)?;
        self.base.validate()?;
        for entry in &self.encodings {
            let cfg = self.run_config(entry, self.base.run.seed);
            crate::task::check(&cfg).with_context(|| format!("the run of `{}`", entry.label))?;
            check_tests(&cfg, &self.test_lengths, self.test_instances)?;
        }
        Ok(())
    }
}

/// Checks that a run trained as `run` can be tested at `lengths` with `instances` each:
/// lengths of at least 1 that its problem can pose, a count within its limit, and the
/// longest test sequence within memory.
///
/// # Errors
/// The setting at fault, named.
pub fn check_tests(run: &LengthgenConfig, lengths: &[usize], instances: usize) -> Result<()> {
    ensure!(
        !lengths.is_empty() && lengths.iter().all(|&n| n >= 1),
        "test lengths must be at least 1, got {lengths:?}"
    );
    posenc::limits::check("test_instances", instances, crate::task::MAX_INSTANCES)?;
    ensure!(instances > 0, "test_instances must be at least 1");
    let longest = lengths.iter().max().copied().unwrap_or(0);
    crate::task::check_length(run.task, "the longest test length", longest)?;
    posenc_train::memory::fits_in_memory(
        1,
        run.model.heads,
        run.task.sequence_len(longest) - 1,
        "the longest test sequence",
    )?;
    Ok(())
}

/// Sixteen test lengths spread evenly up to `4 · hi`, `hi` among them.
pub fn default_test_lengths(hi: usize) -> Vec<usize> {
    let mut lengths: Vec<usize> = (1..=16).map(|k| (k * 4 * hi).div_ceil(16).max(1)).collect();
    lengths.dedup();
    lengths
}

/// One run's accuracy at one test length: a tidy record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRecord {
    /// The problem.
    pub task: Problem,
    /// Which run: label, encoding, seed, randomized positions.
    #[serde(flatten)]
    pub run: RunKey,
    /// The instance length.
    pub length: usize,
    /// Whether the length is inside the trained range.
    pub trained: bool,
    /// Instances tested.
    pub instances: usize,
    /// Exact-match accuracy of the greedy answers.
    pub accuracy: f64,
    /// Share of answer tokens right, each given the true ones before it.
    pub token_accuracy: f64,
}

/// One run: a tidy record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The entry's label.
    pub label: String,
    /// The seed.
    pub seed: u64,
    /// Steps trained.
    pub steps: usize,
    /// Training seconds.
    pub train_s: f64,
    /// Peak resident memory while it trained, MB (`RunState::peak_rss_mb`; absent in
    /// results written before it was recorded).
    #[serde(default)]
    pub peak_rss_mb: Option<f64>,
    /// The last validation's exact match (held-out instances of the trained lengths).
    pub valid_exact: Option<f64>,
    /// Why the run stopped early, if its loss diverged (it then has no test records).
    pub diverged: Option<String>,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthgenExperiment {
    /// The kind of experiment: its task's (`posenc <kind> experiment`); absent in results
    /// written before they carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The problem.
    pub task: Problem,
    /// The trained lengths, `[lo, hi]`.
    pub train_lengths: [usize; 2],
    /// What was run.
    pub config: LengthgenExperimentConfig,
    /// One record per run and test length.
    pub records: Vec<TestRecord>,
    /// One record per run.
    pub runs: Vec<RunRecord>,
}

/// What one cell of a lengthgen experiment leaves: its run and its test records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthgenCell {
    /// The run.
    pub run: RunRecord,
    /// Its accuracy at each tested length (none where it diverged).
    pub records: Vec<TestRecord>,
}

/// A lengthgen experiment ready to run: its settings and the device. It is an
/// [`Experiment`], which the one driver (`posenc_train::experiment::run`) trains and
/// evaluates.
#[derive(Debug, Clone, Copy)]
pub struct LengthgenExperimentRun<'a> {
    /// The settings.
    pub config: &'a LengthgenExperimentConfig,
    /// Where to train and evaluate.
    pub device: &'a Device,
}

impl LengthgenExperimentConfig {
    /// This experiment, to run on `device`.
    pub fn on<'a>(&'a self, device: &'a Device) -> LengthgenExperimentRun<'a> {
        LengthgenExperimentRun {
            config: self,
            device,
        }
    }
}

impl Experiment for LengthgenExperimentRun<'_> {
    const KIND: &'static str = "a lengthgen experiment";
    type Config = LengthgenExperimentConfig;
    type Run = LengthgenConfig;
    type Record = LengthgenRecord;
    type Data = Vec<(usize, Vec<Instance>)>;
    type Facts = ();
    type Cell = LengthgenCell;
    type Results = LengthgenExperiment;

    fn config(&self) -> &LengthgenExperimentConfig {
        self.config
    }

    fn grid(&self) -> Grid<'_> {
        Grid::new(
            &self.config.encodings,
            self.config.base.run.seed,
            self.config.seeds,
        )
    }

    /// # Errors
    /// As [`LengthgenExperimentConfig::validate`].
    fn prepare(&self) -> Result<(Self::Data, ())> {
        self.config.validate()?;
        let hi = self.config.base.train_lengths[1];
        let tests = test_set(
            self.config.base.task,
            hi,
            &self.config.test_lengths,
            self.config.test_instances,
        );
        Ok((tests, ()))
    }

    fn run_config(&self, _: &Self::Data, entry: &Labelled, seed: u64) -> LengthgenConfig {
        self.config.run_config(entry, seed)
    }

    type Job<'d> = Lengthgen;

    fn inputs<'d>(&self, _: &'d Self::Data) -> &'d <Self::Job<'d> as Job<'d>>::Inputs {
        &()
    }

    fn device(&self) -> &Device {
        self.device
    }

    fn record(
        &self,
        tests: &Self::Data,
        cell: &Cell<'_, LengthgenConfig>,
        outcome: Outcome<LengthgenState>,
    ) -> Result<LengthgenCell> {
        let (label, seed) = (cell.entry.label.clone(), cell.seed);
        let state = match outcome {
            Outcome::Trained(state) => state,
            Outcome::Diverged(why, _) => {
                return Ok(LengthgenCell {
                    run: RunRecord {
                        label,
                        seed,
                        steps: why.step,
                        train_s: 0.0,
                        peak_rss_mb: None,
                        valid_exact: None,
                        diverged: Some(why.to_string()),
                    },
                    records: Vec::new(),
                })
            }
        };
        let (_, model) = load(&cell.dir, self.device)?;
        let key = RunKey::new(
            &label,
            &cell.entry.encoding,
            seed,
            cell.run.randomized_positions,
        );
        let records = evaluate(&model, &cell.run, tests)?
            .into_iter()
            .map(|t| TestRecord {
                task: self.config.base.task,
                run: key.clone(),
                length: t.length,
                trained: t.trained,
                instances: t.score.instances,
                accuracy: t.score.exact,
                token_accuracy: t.score.token,
            })
            .collect();
        Ok(LengthgenCell {
            run: RunRecord {
                label,
                seed,
                steps: state.step,
                train_s: state.elapsed_s,
                peak_rss_mb: state.peak_rss_mb,
                valid_exact: state.history.last().map(|r| r.valid_exact),
                diverged: None,
            },
            records,
        })
    }

    fn results(&self, _: &(), cells: Vec<LengthgenCell>) -> LengthgenExperiment {
        let (runs, records) = cells
            .into_iter()
            .map(|c| (c.run, c.records))
            .unzip::<_, _, Vec<_>, Vec<_>>();
        LengthgenExperiment {
            kind: Some(Lengthgen::KIND.to_string()),
            task: self.config.base.task,
            train_lengths: self.config.base.train_lengths,
            config: self.config.clone(),
            records: records.into_iter().flatten().collect(),
            runs,
        }
    }

    fn markdown(results: &LengthgenExperiment) -> String {
        results.markdown()
    }
}

/// The test instances of an experiment, or of `posenc lengthgen eval`: `count` at each of
/// `lengths`, held out at trained lengths (up to `hi`), each length from its own stream of
/// one fixed seed, so every run is tested on the same instances.
pub fn test_set(
    task: Problem,
    hi: usize,
    lengths: &[usize],
    count: usize,
) -> Vec<(usize, Vec<Instance>)> {
    lengths
        .iter()
        .map(|&n| {
            let mut rng = ChaCha8Rng::seed_from_u64(TEST_SEED);
            rng.set_stream(n as u64);
            (n, test_instances(task, n, hi, count, &mut rng))
        })
        .collect()
}

/// A run's score at one tested length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthScore {
    /// The instances' length.
    pub length: usize,
    /// Whether the run trained at that length.
    pub trained: bool,
    /// Exact and token accuracy.
    pub score: Score,
}

/// `model` (trained as `cfg`) scored at each length of `tests` that has instances and that
/// its table of positions reaches, if it has one (lengths past it have no answer).
///
/// # Errors
/// Sequences too long to fit in memory.
pub fn evaluate(
    model: &LanguageModel,
    cfg: &LengthgenConfig,
    tests: &[(usize, Vec<Instance>)],
) -> Result<Vec<LengthScore>> {
    let [lo, hi] = cfg.train_lengths;
    let reaches = |n: usize| {
        model
            .max_positions()
            .is_none_or(|max| cfg.task.sequence_len(n) - 1 <= max)
    };
    tests
        .iter()
        .filter(|(n, i)| !i.is_empty() && reaches(*n))
        .map(|(n, instances)| {
            Ok(LengthScore {
                length: *n,
                trained: *n <= hi && *n >= lo,
                score: score(model, instances)?,
            })
        })
        .collect()
}

/// Accuracy over seeds at one length of one entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The instance length.
    pub length: usize,
    /// Mean exact-match accuracy over seeds.
    pub mean: f64,
    /// Sample standard deviation over seeds (0 for one seed).
    pub sd: f64,
    /// Each seed's, in the order of the records (as many as the seeds).
    pub values: Vec<f64>,
}

impl LengthgenExperiment {
    /// Reads `results.json`.
    ///
    /// # Errors
    /// A missing or malformed file.
    pub fn load(path: &Path) -> Result<Self> {
        posenc_train::results::load_results(path)
    }

    /// Writes `results.json` and `results.md` into `out`.
    ///
    /// # Errors
    /// A failed write.
    pub fn save(&self, out: &Path) -> Result<()> {
        posenc_train::results::save_results(out, self, &self.markdown())
    }

    /// Pools experiments of one setting into one, for a figure or table over all their
    /// runs: more encodings, or more seeds of the same ones (an entry in several keeps
    /// every seed's records). Entries keep the order they first appear in; the tested
    /// lengths are all of theirs.
    ///
    /// # Errors
    /// No experiment; experiments that differ in anything but their encodings, seeds and
    /// tested lengths (the task, the trained lengths, the model, the training, the test
    /// instances per length); one label naming two encodings; one run, a label and seed,
    /// in two of them.
    pub fn merge(parts: Vec<LengthgenExperiment>) -> Result<Self> {
        let mut parts = parts.into_iter();
        let Some(mut merged) = parts.next() else {
            posenc_error::bail!("no experiments to merge");
        };
        // The first seed is not part of the setting: pooled experiments differ in it.
        let unseeded = |c: &LengthgenExperimentConfig| {
            let mut base = c.base.clone();
            base.run.seed = 0;
            base
        };
        for (i, part) in parts.enumerate() {
            let (a, b) = (unseeded(&merged.config), unseeded(&part.config));
            let mut differ = differences(&a, &b);
            // `differences` ignores the step budget, which a resumed run may raise; runs
            // pooled into one mean must share it.
            if a.run.steps != b.run.steps {
                differ.push("steps".into());
            }
            if merged.config.test_instances != part.config.test_instances {
                differ.push("test_instances".into());
            }
            posenc_train::labelled::join_entries(
                i + 2,
                &differ,
                &mut merged.config.encodings,
                part.config.encodings,
            )?;
            for run in part.runs {
                ensure!(
                    !merged
                        .runs
                        .iter()
                        .any(|r| r.label == run.label && r.seed == run.seed),
                    "seed {} of `{}` is in two of the experiments",
                    run.seed,
                    run.label
                );
                merged.runs.push(run);
            }
            merged.records.extend(part.records);
            merged.config.test_lengths.extend(part.config.test_lengths);
        }
        merged.config.test_lengths.sort_unstable();
        merged.config.test_lengths.dedup();
        merged.config.seeds = merged
            .config
            .encodings
            .iter()
            .map(|e| merged.runs.iter().filter(|r| r.label == e.label).count())
            .max()
            .unwrap_or(merged.config.seeds);
        Ok(merged)
    }

    /// Each label's accuracy by length over its seeds, labels in the config's order.
    pub fn summaries(&self) -> Vec<(String, Vec<Summary>)> {
        self.config
            .encodings
            .iter()
            .filter_map(|e| {
                let mut by_len: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
                for r in self.records.iter().filter(|r| r.run.label == e.label) {
                    by_len.entry(r.length).or_default().push(r.accuracy);
                }
                let rows: Vec<Summary> = by_len
                    .into_iter()
                    .map(|(length, xs)| {
                        let (mean, sd) = mean_sd(&xs);
                        Summary {
                            length,
                            mean,
                            sd,
                            values: xs,
                        }
                    })
                    .collect();
                (!rows.is_empty()).then(|| (e.label.clone(), rows))
            })
            .collect()
    }

    /// Exact-match accuracy (%) by length, mean ± standard deviation over seeds; trained
    /// lengths marked `*`; then the mean over the trained lengths tested and over the
    /// lengths past them (each seed's mean, then mean ± standard deviation over seeds).
    pub fn table(&self) -> String {
        let [lo, hi] = self.train_lengths;
        let lengths = &self.config.test_lengths;
        let mut s = String::from("| encoding | seeds |");
        for &n in lengths {
            let mark = if (lo..=hi).contains(&n) { "*" } else { "" };
            s += &format!(" {n}{mark} |");
        }
        s += &format!(" ≤ {hi} | > {hi} | diverged |\n|---|---:|");
        s += &"---:|".repeat(lengths.len() + 3);
        s += "\n";
        for (label, rows) in self.summaries() {
            let seeds = rows.iter().map(|r| r.values.len()).max().unwrap_or(0);
            s += &format!("| {label} | {seeds} |");
            for &n in lengths {
                s += &match rows.iter().find(|r| r.length == n) {
                    Some(r) => format!(" {:.0} ± {:.0} |", 100.0 * r.mean, 100.0 * r.sd),
                    None => " – |".to_string(),
                };
            }
            for trained in [true, false] {
                let (mean, sd) = mean_sd(&self.seed_means(&label, trained));
                s += &match mean.is_finite() {
                    true => format!(" {:.1} ± {:.1} |", 100.0 * mean, 100.0 * sd),
                    false => " – |".to_string(),
                };
            }
            let diverged = self
                .runs
                .iter()
                .filter(|r| r.label == label && r.diverged.is_some())
                .count();
            s += &format!(" {diverged} |\n");
        }
        s
    }

    /// Each seed's mean accuracy of `label` over the trained lengths tested (`trained`) or
    /// over the lengths past them.
    pub fn seed_means(&self, label: &str, trained: bool) -> Vec<f64> {
        let mut by_seed: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in self
            .records
            .iter()
            .filter(|r| r.run.label == label && r.trained == trained)
        {
            by_seed.entry(r.run.seed).or_default().push(r.accuracy);
        }
        by_seed
            .values()
            .map(|xs| xs.iter().sum::<f64>() / xs.len() as f64)
            .collect()
    }

    /// `results.md`: the settings and the table.
    pub fn markdown(&self) -> String {
        let b = &self.config.base;
        let m = &b.model;
        let [lo, hi] = self.train_lengths;
        format!(
            "# Length generalization: {}\n\n\
             Decoder-only, {} layers, {} heads, width {}; trained on lengths {lo}–{hi} \
             ({} steps of {} instances){}. Exact-match accuracy (%) of greedy answers on \
             {} fresh instances per length (held out from training at the trained lengths, \
             the same for every run), mean ± standard deviation over seeds; `*` marks the \
             trained lengths.\n\n{}",
            self.task,
            m.layers,
            m.heads,
            m.d_model,
            b.run.steps,
            b.run.batch_size,
            b.randomized_positions.map_or(String::new(), |r| format!(
                ", randomized positions below {r}"
            )),
            self.config.test_instances,
            self.table()
        )
    }
}
