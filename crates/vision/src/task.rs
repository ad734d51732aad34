//! The task: its settings, the training loop's [`Task`] and [`Job`], and the accuracy of a
//! model on any grid ([`score`]).

use std::path::Path;

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use posenc_error::ensure;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::model::{Vit, VitConfig};
use crate::scenes::{check_grid, Example, KINDS, PATCH_VALUES};
use crate::Result;
use posenc_train::fit::{RunSchedule, RunState, StepLoss, Task, Validation};
use posenc_train::job::{self, Begun, Job};
use posenc_train::optim::AdamWConfig;
use posenc_train::rundir::FixedFiles;
use posenc_train::schedule::Cosine;

/// Mixed into the seed of the generator of validation examples.
const VALID_STREAM: u64 = 0x715_1000_0000_0001;

/// The most examples one validation or test grid takes.
pub(crate) const MAX_EXAMPLES: usize = 1 << 16;

/// Examples scored in one forward.
const SCORE_BATCH: usize = 64;

/// The settings of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VisionConfig {
    /// The model; its `grid` is the grid of patches trained on.
    pub model: VitConfig,
    /// Seed (of the weights, the training examples and the dropout masks), steps,
    /// examples per step, linear warm-up steps, AdamW, and how often to validate and save.
    #[serde(
        flatten,
        deserialize_with = "RunSchedule::or_defaults_of::<VisionConfig, _>"
    )]
    pub run: RunSchedule,
    /// Peak learning rate (linear warm-up, cosine decay to `min_lr`).
    pub lr: f64,
    /// The floor of the cosine decay.
    pub min_lr: f64,
    /// Held-out examples validation scores, on the trained grid.
    pub eval_examples: usize,
}

impl Default for VisionConfig {
    fn default() -> Self {
        Self {
            model: VitConfig::default(),
            run: RunSchedule {
                seed: 1,
                steps: 3000,
                batch_size: 64,
                warmup: 150,
                adam: AdamWConfig::nanogpt(),
                eval_every: 500,
                save_every: 1000,
            },
            lr: 1e-3,
            min_lr: 1e-4,
            eval_examples: 512,
        }
    }
}

impl VisionConfig {
    /// Checks every setting before anything is drawn, allocated or written.
    ///
    /// # Errors
    /// A setting out of range, named.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        self.run.validate()?;
        ensure!(self.eval_examples > 0, "eval_examples must be at least 1");
        posenc::limits::check("eval_examples", self.eval_examples, MAX_EXAMPLES)?;
        let [rows, columns] = self.model.grid;
        posenc_train::memory::fits_in_memory(
            self.run.batch_size,
            self.model.heads,
            rows * columns,
            "the trained grid's patches",
        )?;
        self.schedule().validate()?;
        Ok(())
    }

    fn schedule(&self) -> Cosine {
        Cosine {
            lr: self.lr,
            min_lr: self.min_lr,
            warmup: self.run.warmup,
            steps: self.run.steps,
        }
    }
}

posenc_train::settings!(VisionConfig, |cfg, step| cfg.schedule().lr(step - 1));

/// One validation record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VisionRecord {
    /// Step.
    pub step: usize,
    /// Mean training loss since the previous record.
    pub train_loss: f64,
    /// Accuracy on held-out examples of the trained grid.
    pub valid_accuracy: f64,
    /// Seconds trained so far.
    pub elapsed_s: f64,
}

impl Validation for VisionRecord {
    fn step(&self) -> usize {
        self.step
    }
    fn summary(&self) -> String {
        format!(
            "train loss {:.4}  valid accuracy {:.1}%",
            self.train_loss,
            100.0 * self.valid_accuracy
        )
    }
    fn scalars(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("train/loss_mean", self.train_loss),
            ("valid/accuracy", self.valid_accuracy),
        ]
    }
}

/// A run's config and progress (`trainer.json`).
pub type VisionState = RunState<VisionConfig, VisionRecord>;

/// Accuracy on a set of examples, all of them and by question kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Examples scored.
    pub examples: usize,
    /// The share answered right.
    pub accuracy: f64,
    /// Each question kind's (in [`KINDS`]' order): examples, share right.
    pub by_kind: Vec<(usize, f64)>,
}

/// `count` examples on `grid`, from `rng`.
///
/// # Errors
/// A grid [`check_grid`] refuses.
pub fn examples(grid: [usize; 2], count: usize, rng: &mut ChaCha8Rng) -> Result<Vec<Example>> {
    (0..count).map(|_| Example::random(grid, rng)).collect()
}

/// The inputs of examples on one grid: patches `(b, n, PATCH_VALUES)`, question ids
/// `(b, 3)`, and the answers `(b)`.
fn batch(examples: &[Example], device: &Device) -> Result<(Tensor, Tensor, Tensor)> {
    let b = examples.len();
    let n = examples
        .first()
        .map_or(0, |e| e.scene.grid[0] * e.scene.grid[1]);
    let patches: Vec<f32> = examples.iter().flat_map(|e| e.scene.patches()).collect();
    let questions: Vec<u32> = examples.iter().flat_map(|e| e.question.ids()).collect();
    let answers: Vec<u32> = examples.iter().map(|e| e.answer).collect();
    Ok((
        Tensor::from_vec(patches, (b, n, PATCH_VALUES), device)?,
        Tensor::from_vec(questions, (b, 3), device)?,
        Tensor::from_vec(answers, b, device)?,
    ))
}

/// The accuracy of `model` on `examples`, all on one grid.
///
/// # Errors
/// No examples, or examples on several grids; a grid the encoding refuses; too many
/// patches to fit in memory.
pub fn score(model: &Vit, examples: &[Example]) -> Result<Score> {
    ensure!(!examples.is_empty(), "no examples to score");
    let grid = examples[0].scene.grid;
    ensure!(
        examples.iter().all(|e| e.scene.grid == grid),
        "examples on several grids: score each grid alone"
    );
    posenc_train::memory::fits_in_memory(
        SCORE_BATCH.min(examples.len()),
        model.config().heads,
        grid[0] * grid[1],
        "a test grid's patches",
    )?;
    let device = model.device().clone();
    let mut right = vec![(0usize, 0usize); KINDS.len()];
    for chunk in examples.chunks(SCORE_BATCH) {
        let (patches, questions, _) = batch(chunk, &device)?;
        let predicted = model.predict(&patches, &questions, grid)?;
        for (e, p) in chunk.iter().zip(predicted) {
            let k = &mut right[e.question.kind()];
            k.0 += 1;
            k.1 += usize::from(p == e.answer);
        }
    }
    let total: usize = right.iter().map(|k| k.1).sum();
    Ok(Score {
        examples: examples.len(),
        accuracy: total as f64 / examples.len() as f64,
        by_kind: right
            .iter()
            .map(|&(n, r)| (n, r as f64 / n.max(1) as f64))
            .collect(),
    })
}

/// The task the loop trains: a model, and the held-out examples it validates on.
pub struct Vision {
    varmap: VarMap,
    model: Vit,
    valid: Vec<Example>,
    device: Device,
}

/// Checks `cfg`, and returns its model, built (not trained).
///
/// # Errors
/// As [`VisionConfig::validate`] and [`Vit::new`].
pub(crate) fn check(cfg: &VisionConfig) -> Result<Vit> {
    cfg.validate()?;
    let varmap = VarMap::new();
    Vit::new(
        &cfg.model,
        posenc_train::init::seeded(&varmap, 0, &Device::Cpu),
    )
}

impl Vision {
    fn new(cfg: &VisionConfig, device: &Device) -> Result<Self> {
        cfg.validate()?;
        check_grid(cfg.model.grid)?;
        let varmap = VarMap::new();
        // Every weight starts as its module asks (the encoding's own among them), from
        // the run's seed.
        let model = Vit::new(
            &cfg.model,
            posenc_train::init::seeded(&varmap, cfg.run.seed, device),
        )?;
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.run.seed ^ VALID_STREAM);
        let valid = examples(cfg.model.grid, cfg.eval_examples, &mut rng)?;
        Ok(Self {
            varmap,
            model,
            valid,
            device: device.clone(),
        })
    }
}

impl Task for Vision {
    type Config = VisionConfig;
    type Record = VisionRecord;

    fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// `batch_size` examples on the trained grid from the generator of stream `step`.
    fn loss(&mut self, cfg: &VisionConfig, step: usize) -> Result<StepLoss> {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.run.seed);
        rng.set_stream(step as u64);
        let batch_examples = examples(cfg.model.grid, cfg.run.batch_size, &mut rng)?;
        let (patches, questions, answers) = batch(&batch_examples, &self.device)?;
        let logits = self.model.forward(&patches, &questions, cfg.model.grid)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &answers)?;
        Ok(StepLoss {
            loss,
            tokens: batch_examples.len() * cfg.model.grid[0] * cfg.model.grid[1],
        })
    }

    fn validate(
        &mut self,
        cfg: &VisionConfig,
        step: usize,
        train_loss: f64,
        elapsed_s: f64,
    ) -> Result<Option<VisionRecord>> {
        let view = Vit::frozen(&cfg.model, &self.varmap, &self.device)?;
        Ok(Some(VisionRecord {
            step,
            train_loss,
            valid_accuracy: score(&view, &self.valid)?.accuracy,
            elapsed_s,
        }))
    }
}

impl Job<'_> for Vision {
    const KIND: &'static str = "vision";
    type Inputs = ();

    fn begin(cfg: VisionConfig, (): &(), device: &Device) -> Result<Begun<Self>> {
        let task = Vision::new(&cfg, device)?;
        let fixed = FixedFiles::new(
            serde_json::to_string_pretty(&cfg.model)?.into_bytes(),
            Vec::new(),
        )?;
        Ok(Begun {
            task,
            config: cfg,
            fixed,
        })
    }

    fn reopen(_: &Path, cfg: &VisionConfig, (): &(), device: &Device) -> Result<Self> {
        Vision::new(cfg, device)
    }

    /// The weights were drawn from the run's seed as the model was built
    /// ([`posenc_train::init::seeded`]): each as its module asks.
    fn initialize(_: &VarMap, _: &VisionConfig) -> Result<()> {
        Ok(())
    }
}

/// The run in `dir` (its last checkpoint): its state, and the model for inference on
/// `device`.
///
/// # Errors
/// A directory that is not a complete run of this task, or weights that do not fit.
pub fn load(dir: &Path, device: &Device) -> Result<(VisionState, Vit)> {
    let varmap = VarMap::new();
    let state: VisionState = job::load_run(
        dir,
        Vision::KIND,
        "vision run",
        &varmap,
        |s: &VisionState| {
            let vb = posenc_train::init::seeded(&varmap, 0, device);
            Vit::new(&s.config.model, vb).map(|_| ())
        },
    )?;
    let model = Vit::frozen(&state.config.model, &varmap, device)?;
    Ok((state, model))
}
