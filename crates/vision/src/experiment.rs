//! `posenc vision experiment`: one run per labelled encoding and seed, each tested on the
//! trained grid and on larger ones.
//!
//! [`VisionExperimentConfig`] is an [`Experiment`]: the one driver trains each labelled
//! encoding and seed into its own directory, reusing, resuming, sharding and recording
//! divergence as it does for every task. Every run is tested on the same examples (drawn
//! from a fixed stream per grid), so encodings and seeds compare example for example.
//!
//! `results.json` holds tidy records, one per run, test grid and question kind (`all` for
//! every kind together):
//!
//! ```text
//! {"kind": "vision", "train_grid": [6, 6], "config": {…},
//!  "records": [{"label", "encoding", "seed", "grid", "trained", "question", "examples",
//!               "accuracy"}, …],
//!  "runs": [{"label", "seed", "steps", "train_s", "peak_rss_mb", "valid_accuracy",
//!            "diverged"}, …]}
//! ```
//!
//! so `pandas.DataFrame(json.load(f)["records"])` is the whole table.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::model::Vit;
use crate::scenes::{check_grid, Example, KINDS};
use crate::task::{examples, load, score, Vision, VisionConfig, VisionRecord, VisionState};
use posenc_error::{ensure, Context};
use posenc_train::error::Result;
use posenc_train::experiment::{Cell, Experiment, Grid, Outcome};
use posenc_train::job::Job;
use posenc_train::labelled::{check_seeds, check_unique, Labelled, RunKey};
use posenc_train::results::mean_sd;

/// The stream every run's test examples come from (a grid of `r × c` uses sub-stream
/// `r · 1000 + c`).
const TEST_SEED: u64 = 0x7E57_0000_0715_1000;

/// The study's lineup: no encoding, the 2-D encodings of vision Transformers, M-RoPE with
/// its time fixed, and 1-D RoPE over the patches in raster order, the naive baseline.
pub const LINEUP: [&str; 8] = [
    "none",
    "sinusoidal-2d",
    "learned-2d",
    "rope-2d",
    "rope-mixed",
    "liere",
    "mrope",
    "rope",
];

/// What to train and test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionExperimentConfig {
    /// Everything but the encoding; `base.seed` is the first seed, `base.model.grid` the
    /// trained grid.
    pub base: VisionConfig,
    /// One run per entry and seed, in this order.
    pub encodings: Vec<Labelled>,
    /// Seeds per entry: `base.seed`, `base.seed + 1`, ….
    pub seeds: usize,
    /// Grids tested, `[rows, columns]` each.
    pub test_grids: Vec<[usize; 2]>,
    /// Test examples per grid.
    pub test_examples: usize,
}

impl VisionExperimentConfig {
    /// Trained on 6 × 6 patches for 1 500 steps at a peak rate of 2e-3, tested on 6 × 6,
    /// 9 × 9 and 12 × 12 (twice the side), with [`LINEUP`], three seeds each: about two
    /// minutes a run on two cores.
    pub fn full() -> Self {
        let mut base = VisionConfig::default();
        base.model.grid = [6, 6];
        base.run.steps = 1500;
        base.run.eval_every = 500;
        base.run.save_every = 500;
        base.lr = 2e-3;
        Self {
            base,
            encodings: LINEUP
                .iter()
                .map(|k| k.parse().expect("a built-in kind"))
                .collect(),
            seeds: 3,
            test_grids: vec![[6, 6], [9, 9], [12, 12]],
            test_examples: 512,
        }
    }

    /// 300 steps on 6 × 6, tested on 6 × 6 and 9 × 9, with `none`, `sinusoidal-2d` and
    /// `rope-2d`, three seeds: a few minutes on two cores.
    pub fn quick() -> Self {
        let mut cfg = Self::full();
        cfg.base.run.steps = 300;
        cfg.base.run.warmup = 30;
        cfg.base.run.eval_every = 150;
        cfg.base.run.save_every = 300;
        cfg.base.eval_examples = 128;
        cfg.encodings = ["none", "sinusoidal-2d", "rope-2d"]
            .iter()
            .map(|k| k.parse().expect("a built-in kind"))
            .collect();
        cfg.test_grids = vec![[6, 6], [9, 9]];
        cfg.test_examples = 128;
        cfg
    }

    /// The run of `entry` with seed `seed`. An encoding that takes a `grid` (a learned
    /// table of patches) is given the trained one.
    pub fn run_config(&self, entry: &Labelled, seed: u64) -> VisionConfig {
        let mut cfg = self.base.clone();
        let grid = serde_json::json!(cfg.model.grid);
        cfg.model.encoding = entry
            .encoding
            .with_setting("grid", grid)
            .unwrap_or_else(|_| entry.encoding.clone());
        cfg.run.seed = seed;
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
            ensure!(
                entry.randomized_positions.is_none(),
                "`{}`: the vision task has no randomized positions",
                entry.label
            );
            let cfg = self.run_config(entry, self.base.run.seed);
            let model = crate::task::check(&cfg)
                .with_context(|| format!("the run of `{}`", entry.label))?;
            check_reach(&model, &self.test_grids)?;
        }
        check_tests(&self.base, &self.test_grids, self.test_examples)
    }
}

/// Checks that a run trained as `run` can be tested on `grids` with `count` examples each.
///
/// # Errors
/// No grids, a grid [`check_grid`] refuses, a count out of range, or a grid too large for
/// memory.
pub fn check_tests(run: &VisionConfig, grids: &[[usize; 2]], count: usize) -> Result<()> {
    ensure!(!grids.is_empty(), "give at least one test grid");
    for &grid in grids {
        check_grid(grid)?;
        posenc_train::memory::fits_in_memory(
            64.min(count),
            run.model.heads,
            grid[0] * grid[1],
            "a test grid's patches",
        )?;
    }
    ensure!(count > 0, "test_examples must be at least 1");
    posenc::limits::check("test_examples", count, crate::task::MAX_EXAMPLES)?;
    Ok(())
}

/// Checks that `model`'s encoding reaches every grid of `grids`: one that declares a
/// largest grid ([`posenc::Capabilities::max_grid`], a learned table that may not resample)
/// refuses those past it, by name, before anything trains.
///
/// # Errors
/// A grid past the encoding's largest.
pub fn check_reach(model: &Vit, grids: &[[usize; 2]]) -> Result<()> {
    let Some([rows, columns]) = model.encoding().capabilities().max_grid else {
        return Ok(());
    };
    for &[r, c] in grids {
        ensure!(
            r <= rows && c <= columns,
            "`{}` reaches grids of {rows} × {columns} patches at most, and a test grid is \
             {r} × {c}",
            model.encoding().kind()
        );
    }
    Ok(())
}

/// The test examples: `count` on each of `grids`, each grid from its own stream of one
/// fixed seed, so every run is tested on the same examples.
///
/// # Errors
/// A grid [`check_grid`] refuses.
pub fn test_set(grids: &[[usize; 2]], count: usize) -> Result<Vec<([usize; 2], Vec<Example>)>> {
    grids
        .iter()
        .map(|&g| {
            let mut rng = ChaCha8Rng::seed_from_u64(TEST_SEED);
            rng.set_stream((g[0] * 1000 + g[1]) as u64);
            Ok((g, examples(g, count, &mut rng)?))
        })
        .collect()
}

/// One run's accuracy on one test grid and one question kind: a tidy record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRecord {
    /// Which run: label, encoding, seed.
    #[serde(flatten)]
    pub run: RunKey,
    /// The test grid, `[rows, columns]`.
    pub grid: [usize; 2],
    /// Whether it is the trained grid.
    pub trained: bool,
    /// The question kind ([`KINDS`]), or `all`.
    pub question: String,
    /// Examples tested.
    pub examples: usize,
    /// The share answered right.
    pub accuracy: f64,
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
    /// Peak resident memory while it trained, MB.
    pub peak_rss_mb: Option<f64>,
    /// The last validation's accuracy (held-out examples of the trained grid).
    pub valid_accuracy: Option<f64>,
    /// Why the run stopped early, if its loss diverged (it then has no test records).
    pub diverged: Option<String>,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VisionExperiment {
    /// The kind of experiment: `vision`.
    pub kind: String,
    /// The trained grid.
    pub train_grid: [usize; 2],
    /// What was run.
    pub config: VisionExperimentConfig,
    /// One record per run, test grid and question kind.
    pub records: Vec<TestRecord>,
    /// One record per run.
    pub runs: Vec<RunRecord>,
}

/// What one cell leaves: its run and its test records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VisionCell {
    /// The run.
    pub run: RunRecord,
    /// Its accuracy on each tested grid (none where it diverged).
    pub records: Vec<TestRecord>,
}

/// A vision experiment ready to run on a device: an [`Experiment`].
#[derive(Debug, Clone, Copy)]
pub struct VisionExperimentRun<'a> {
    /// The settings.
    pub config: &'a VisionExperimentConfig,
    /// Where to train and evaluate.
    pub device: &'a Device,
}

impl VisionExperimentConfig {
    /// This experiment, to run on `device`.
    pub fn on<'a>(&'a self, device: &'a Device) -> VisionExperimentRun<'a> {
        VisionExperimentRun {
            config: self,
            device,
        }
    }
}

/// `model`'s records on each of `tests`, for the run `key`: all questions, then each kind.
///
/// # Errors
/// A grid the encoding refuses; a grid too large for memory.
pub fn evaluate(
    model: &Vit,
    key: &RunKey,
    tests: &[([usize; 2], Vec<Example>)],
) -> Result<Vec<TestRecord>> {
    let trained = model.config().grid;
    let mut out = Vec::new();
    for (grid, examples) in tests {
        let s = score(model, examples)?;
        let record = |question: &str, examples: usize, accuracy: f64| TestRecord {
            run: key.clone(),
            grid: *grid,
            trained: *grid == trained,
            question: question.to_string(),
            examples,
            accuracy,
        };
        out.push(record("all", s.examples, s.accuracy));
        for (kind, (n, accuracy)) in KINDS.iter().zip(s.by_kind) {
            out.push(record(kind, n, accuracy));
        }
    }
    Ok(out)
}

impl Experiment for VisionExperimentRun<'_> {
    const KIND: &'static str = "a vision experiment";
    type Config = VisionExperimentConfig;
    type Run = VisionConfig;
    type Record = VisionRecord;
    type Data = Vec<([usize; 2], Vec<Example>)>;
    type Facts = ();
    type Cell = VisionCell;
    type Results = VisionExperiment;

    fn config(&self) -> &VisionExperimentConfig {
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
    /// As [`VisionExperimentConfig::validate`].
    fn prepare(&self) -> Result<(Self::Data, ())> {
        self.config.validate()?;
        Ok((
            test_set(&self.config.test_grids, self.config.test_examples)?,
            (),
        ))
    }

    fn run_config(&self, _: &Self::Data, entry: &Labelled, seed: u64) -> VisionConfig {
        self.config.run_config(entry, seed)
    }

    type Job<'d> = Vision;

    fn inputs<'d>(&self, _: &'d Self::Data) -> &'d <Self::Job<'d> as Job<'d>>::Inputs {
        &()
    }

    fn device(&self) -> &Device {
        self.device
    }

    fn record(
        &self,
        tests: &Self::Data,
        cell: &Cell<'_, VisionConfig>,
        outcome: Outcome<VisionState>,
    ) -> Result<VisionCell> {
        let (label, seed) = (cell.entry.label.clone(), cell.seed);
        let state = match outcome {
            Outcome::Trained(state) => state,
            Outcome::Diverged(why, _) => {
                return Ok(VisionCell {
                    run: RunRecord {
                        label,
                        seed,
                        steps: why.step,
                        train_s: 0.0,
                        peak_rss_mb: None,
                        valid_accuracy: None,
                        diverged: Some(why.to_string()),
                    },
                    records: Vec::new(),
                })
            }
        };
        let (_, model) = load(&cell.dir, self.device)?;
        let key = RunKey::new(&label, &cell.run.model.encoding, seed, None);
        Ok(VisionCell {
            records: evaluate(&model, &key, tests)?,
            run: RunRecord {
                label,
                seed,
                steps: state.step,
                train_s: state.elapsed_s,
                peak_rss_mb: state.peak_rss_mb,
                valid_accuracy: state.history.last().map(|r| r.valid_accuracy),
                diverged: None,
            },
        })
    }

    fn results(&self, _: &(), cells: Vec<VisionCell>) -> VisionExperiment {
        let (runs, records) = cells
            .into_iter()
            .map(|c| (c.run, c.records))
            .unzip::<_, _, Vec<_>, Vec<_>>();
        VisionExperiment {
            kind: Vision::KIND.to_string(),
            train_grid: self.config.base.model.grid,
            config: self.config.clone(),
            records: records.into_iter().flatten().collect(),
            runs,
        }
    }

    fn markdown(results: &VisionExperiment) -> String {
        results.markdown()
    }
}

/// A grid as `r×c`.
pub fn grid_name([rows, columns]: [usize; 2]) -> String {
    format!("{rows}×{columns}")
}

impl VisionExperiment {
    /// Reads `results.json`.
    ///
    /// # Errors
    /// A missing or malformed file.
    pub fn load(path: &Path) -> Result<Self> {
        posenc_train::results::load_results(path)
    }

    /// Each seed's accuracy of `label` on `grid` for `question` (`all`, or a kind), in the
    /// order of the records.
    pub fn values(&self, label: &str, grid: [usize; 2], question: &str) -> Vec<f64> {
        self.records
            .iter()
            .filter(|r| r.run.label == label && r.grid == grid && r.question == question)
            .map(|r| r.accuracy)
            .collect()
    }

    /// Accuracy (%) on every question by test grid, mean ± standard deviation over seeds,
    /// the trained grid marked `*`, and the mean training seconds and peak memory of a run. Then one table per question kind on the largest grid.
    pub fn table(&self) -> String {
        let grids = &self.config.test_grids;
        let labels: Vec<&str> = self
            .config
            .encodings
            .iter()
            .map(|e| e.label.as_str())
            .collect();
        let cell = |xs: Vec<f64>| match xs.is_empty() {
            true => " – |".to_string(),
            false => {
                let (m, sd) = mean_sd(&xs);
                format!(" {:.1} ± {:.1} |", 100.0 * m, 100.0 * sd)
            }
        };
        let mut s = String::from("| encoding | seeds |");
        for &g in grids {
            let mark = if g == self.train_grid { "*" } else { "" };
            s += &format!(" {}{mark} |", grid_name(g));
        }
        s += &format!(
            " train s | peak MB |\n|---|---:|{}\n",
            "---:|".repeat(grids.len() + 2)
        );
        for label in &labels {
            let runs: Vec<&RunRecord> = self.runs.iter().filter(|r| &r.label == label).collect();
            s += &format!("| {label} | {} |", runs.len());
            for &g in grids {
                s += &cell(self.values(label, g, "all"));
            }
            let mean = |xs: Vec<f64>| match xs.is_empty() {
                true => " – |".to_string(),
                false => format!(" {:.0} |", xs.iter().sum::<f64>() / xs.len() as f64),
            };
            s += &mean(runs.iter().map(|r| r.train_s).collect());
            s += &mean(runs.iter().filter_map(|r| r.peak_rss_mb).collect());
            s += "\n";
        }
        let Some(&largest) = grids.iter().max_by_key(|g| g[0] * g[1]) else {
            return s;
        };
        s += &format!(
            "\nBy question, on {} (accuracy %, mean ± standard deviation):\n\n| encoding |",
            grid_name(largest)
        );
        for k in KINDS {
            s += &format!(" {k} |");
        }
        s += &format!("\n|---|{}\n", "---:|".repeat(KINDS.len()));
        for label in &labels {
            s += &format!("| {label} |");
            for k in KINDS {
                s += &cell(self.values(label, largest, k));
            }
            s += "\n";
        }
        s
    }

    /// The labels whose runs diverged, with how many.
    fn diverged(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for r in self.runs.iter().filter(|r| r.diverged.is_some()) {
            *out.entry(r.label.as_str()).or_default() += 1;
        }
        out
    }

    /// `results.md`: the settings and the tables.
    pub fn markdown(&self) -> String {
        let b = &self.config.base;
        let m = &b.model;
        let diverged = self.diverged();
        let diverged = match diverged.is_empty() {
            true => String::new(),
            false => format!(
                " Diverged: {}.",
                diverged
                    .iter()
                    .map(|(l, n)| format!("{l} ({n})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "# Vision: questions about shapes, past the trained resolution\n\n\
             A ViT of {} layers, {} heads, width {}, mean-pooled; trained on {} patches of \
             {px} × {px} pixels ({} steps of {} examples). Accuracy (%) on {} fresh \
             examples per grid (the same for every run), mean ± standard deviation over \
             seeds; `*` marks the trained grid.{diverged}\n\n{}",
            m.layers,
            m.heads,
            m.d_model,
            grid_name(self.train_grid),
            b.run.steps,
            b.run.batch_size,
            self.config.test_examples,
            self.table(),
            px = crate::scenes::PATCH,
        )
    }
}
