//! The task: its settings, the training loop's [`Task`] and [`Job`], and the exact-match
//! score of a model at any length ([`score`]).

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use posenc::Positions;
use posenc_error::ensure;
use posenc_transformer::{LanguageModel, LmConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::problems::{Instance, Problem, PAD};
use crate::Result;
use posenc_train::fit::{RunSchedule, RunState, StepLoss, Task, Validation};
use posenc_train::job::{self, Begun, Job};
use posenc_train::optim::AdamWConfig;
use posenc_train::rundir::FixedFiles;
use posenc_train::schedule::Cosine;

/// Mixed into the seed of the generator of validation instances.
const VALID_STREAM: u64 = 0x7A11_D000_0000_0001;

/// The most instances one validation or test length takes.
pub(crate) const MAX_INSTANCES: usize = 1 << 16;

/// The longest instance length.
const MAX_LENGTH: usize = 1 << 12;

/// The settings of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LengthgenConfig {
    /// The problem.
    pub task: Problem,
    /// The model (its `vocab_size` is the problem's vocabulary; its `context` the longest
    /// training sequence).
    pub model: LmConfig,
    /// Instance lengths trained on, `[lo, hi]`, drawn uniformly.
    pub train_lengths: [usize; 2],
    /// Seed (of the weights, the training instances and the dropout masks), steps,
    /// instances per step, linear warm-up steps, AdamW, and how often to validate and
    /// save.
    #[serde(
        flatten,
        deserialize_with = "RunSchedule::or_defaults_of::<LengthgenConfig, _>"
    )]
    pub run: RunSchedule,
    /// Peak learning rate (linear warm-up, cosine decay to `min_lr`).
    pub lr: f64,
    /// The floor of the cosine decay.
    pub min_lr: f64,
    /// Held-out instances validation decodes, spread over the trained lengths.
    pub eval_instances: usize,
    /// Randomized positions (Ruoss et al. 2023): each step's sequences sit at a sorted
    /// random subset of `0..range`. `None`: consecutive positions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub randomized_positions: Option<usize>,
}

impl Default for LengthgenConfig {
    fn default() -> Self {
        let train_lengths = [1, 20];
        Self {
            task: Problem::Copy,
            model: LmConfig {
                vocab_size: Problem::Copy.vocab_size(),
                d_model: 64,
                heads: 4,
                d_ff: 256,
                layers: 3,
                context: Problem::Copy.sequence_len(train_lengths[1]) - 1,
                encoding: posenc::EncodingConfig::from_kind("none").expect("a built-in kind"),
                ..LmConfig::default()
            },
            train_lengths,
            run: RunSchedule {
                seed: 1,
                steps: 2000,
                batch_size: 32,
                warmup: 100,
                adam: AdamWConfig::nanogpt(),
                eval_every: 500,
                save_every: 500,
            },
            lr: 1e-3,
            min_lr: 1e-4,
            eval_instances: 200,
            randomized_positions: None,
        }
    }
}

impl LengthgenConfig {
    /// The same settings for `task` trained on lengths `lo..=hi`, the model's vocabulary
    /// set to the task's and its `context` to the longest training sequence.
    pub fn for_task(self, task: Problem, [lo, hi]: [usize; 2]) -> Self {
        let mut cfg = Self {
            task,
            train_lengths: [lo, hi],
            ..self
        };
        cfg.model.vocab_size = task.vocab_size();
        cfg.model.context = task.sequence_len(hi).saturating_sub(1);
        cfg
    }

    /// Checks every setting before anything is generated, allocated or written.
    ///
    /// # Errors
    /// A setting out of range, named.
    pub fn validate(&self) -> Result<()> {
        let [lo, hi] = self.train_lengths;
        ensure!(
            lo >= 1 && lo <= hi,
            "train_lengths must be 1 ≤ lo ≤ hi, got [{lo}, {hi}]"
        );
        check_length(self.task, "the longest training length", hi)?;
        ensure!(
            self.model.vocab_size == self.task.vocab_size(),
            "the model's vocab_size must be the {} problem's {}, got {}",
            self.task,
            self.task.vocab_size(),
            self.model.vocab_size
        );
        ensure!(
            self.model.context == self.task.sequence_len(hi) - 1,
            "the model's context must be the longest training sequence, {} tokens, got {}",
            self.task.sequence_len(hi) - 1,
            self.model.context
        );
        self.model.validate()?;
        self.run.validate()?;
        ensure!(self.eval_instances > 0, "eval_instances must be at least 1");
        posenc::limits::check("eval_instances", self.eval_instances, MAX_INSTANCES)?;
        posenc_train::memory::fits_in_memory(
            self.run.batch_size,
            self.model.heads,
            self.model.context,
            "the longest training sequence",
        )?;
        self.schedule().validate()?;
        if let Some(range) = self.randomized_positions {
            posenc_train::randomized::check(range, self.model.context, None)?;
        }
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

/// Checks that `task` can write instances of length `n` ([`MAX_LENGTH`], and the task's own
/// bound), naming `what`.
pub(crate) fn check_length(task: Problem, what: &'static str, n: usize) -> Result<()> {
    posenc::limits::check(what, n, MAX_LENGTH)?;
    if let Some(max) = task.max_length() {
        ensure!(
            n <= max,
            "{what} is {n}, but {task} writes instances of at most {max} digits"
        );
    }
    Ok(())
}

posenc_train::settings!(LengthgenConfig, |cfg, step| cfg.schedule().lr(step - 1));

/// One validation record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthgenRecord {
    /// Step.
    pub step: usize,
    /// Mean training loss (answer tokens) since the previous record.
    pub train_loss: f64,
    /// Exact-match accuracy on held-out instances of the trained lengths.
    pub valid_exact: f64,
    /// Seconds trained so far.
    pub elapsed_s: f64,
}

impl Validation for LengthgenRecord {
    fn step(&self) -> usize {
        self.step
    }
    fn summary(&self) -> String {
        format!(
            "train loss {:.4}  valid exact {:.1}%",
            self.train_loss,
            100.0 * self.valid_exact
        )
    }
    fn scalars(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("train/loss_mean", self.train_loss),
            ("valid/exact", self.valid_exact),
        ]
    }
}

/// A run's config and progress (`trainer.json`).
pub type LengthgenState = RunState<LengthgenConfig, LengthgenRecord>;

/// Accuracy on a set of instances.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Instances scored.
    pub instances: usize,
    /// The share whose greedy answer is exactly right.
    pub exact: f64,
    /// The share of answer tokens (end token included) predicted right, each given the
    /// true ones before it.
    pub token: f64,
}

/// `count` instances of length `n`: held out ones at trained lengths (`n ≤ hi`), any past
/// them, from `rng`. Fewer where a length has fewer held-out prompts than a thousand draws
/// find, none where it has none.
pub fn test_instances(
    task: Problem,
    n: usize,
    hi: usize,
    count: usize,
    rng: &mut impl Rng,
) -> Vec<Instance> {
    (0..count)
        .map_while(|_| match n <= hi {
            true => task.sample(n, true, rng),
            false => Some(task.random(n, rng)),
        })
        .collect()
}

/// The inputs `(b, len − 1)` of instances of one length `len`, right-padded, and their
/// targets `(b · (len − 1))`: the next token on the answer, [`PAD`] (no loss) elsewhere.
fn batch(instances: &[&Instance], device: &Device) -> Result<(Tensor, Tensor)> {
    let t = instances.iter().map(|i| i.len()).max().unwrap_or(1) - 1;
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for i in instances {
        let seq = i.sequence();
        let from = i.answer_start();
        for p in 0..t {
            inputs.push(seq.get(p).copied().unwrap_or(PAD));
            let next = seq.get(p + 1).copied().unwrap_or(PAD);
            targets.push(if p + 1 >= from { next } else { PAD });
        }
    }
    let b = instances.len();
    Ok((
        Tensor::from_vec(inputs, (b, t), device)?,
        Tensor::from_vec(targets, b * t, device)?,
    ))
}

/// The exact-match and token accuracy of `model`'s greedy answers to `instances` (any
/// lengths), at consecutive positions from 0.
///
/// # Errors
/// Sequences past a learned encoding's table, or too long to fit in memory.
pub fn score(model: &LanguageModel, instances: &[Instance]) -> Result<Score> {
    let mut by_len: Vec<&Instance> = instances.iter().collect();
    by_len.sort_by_key(|i| i.len());
    let (mut exact, mut right, mut tokens) = (0usize, 0usize, 0usize);
    for group in by_len.chunk_by(|a, b| a.len() == b.len()) {
        let len = group[0].len() - 1;
        let rows = (64usize << 10).div_ceil(len * len).clamp(1, 64);
        for chunk in group.chunks(rows) {
            posenc_train::memory::fits_in_memory(
                chunk.len(),
                model.config().heads,
                len,
                "a test sequence",
            )?;
            let (x, y) = batch(chunk, &model.device())?;
            let predicted = model.logits(&x)?.argmax(D::Minus1)?.flatten_all()?;
            let y = y.to_vec1::<u32>()?;
            let predicted = predicted.to_vec1::<u32>()?;
            for (row, want) in predicted.chunks(len).zip(y.chunks(len)) {
                let checked: Vec<bool> = row
                    .iter()
                    .zip(want)
                    .filter(|(_, &w)| w != PAD)
                    .map(|(p, w)| p == w)
                    .collect();
                right += checked.iter().filter(|&&c| c).count();
                tokens += checked.len();
                exact += usize::from(checked.iter().all(|&c| c));
            }
        }
    }
    ensure!(!instances.is_empty(), "no instances to score");
    Ok(Score {
        instances: instances.len(),
        exact: exact as f64 / instances.len() as f64,
        token: right as f64 / tokens.max(1) as f64,
    })
}

/// The task the loop trains: a model, and the held-out instances it validates on. Its runs
/// start, continue and open through [`posenc_train::job`]: `job::train::<Lengthgen>(cfg,
/// &(), out, opts, device)`.
pub struct Lengthgen {
    varmap: VarMap,
    model: LanguageModel,
    valid: Vec<Instance>,
}

/// Checks `cfg`, and that its model (built, not trained) has positions for training.
///
/// # Errors
/// As [`LengthgenConfig::validate`], or an encoding whose table training runs past.
pub(crate) fn check(cfg: &LengthgenConfig) -> Result<()> {
    Lengthgen::build(cfg, &Device::Cpu).map(|_| ())
}

impl Lengthgen {
    /// The model of `cfg` on `device`, checked.
    fn build(cfg: &LengthgenConfig, device: &Device) -> Result<(VarMap, LanguageModel)> {
        cfg.validate()?;
        let varmap = VarMap::new();
        let model = LanguageModel::new(
            &cfg.model,
            VarBuilder::from_varmap(&varmap, DType::F32, device),
        )?;
        if let Some(max) = model.max_positions() {
            let needed = cfg.randomized_positions.unwrap_or(cfg.model.context);
            ensure!(
                max >= needed,
                "the encoding has max_positions = {max}, but training reaches position {needed}"
            );
        }
        Ok((varmap, model))
    }

    fn new(cfg: &LengthgenConfig, device: &Device) -> Result<Self> {
        let (varmap, model) = Self::build(cfg, device)?;
        let [lo, hi] = cfg.train_lengths;
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.run.seed ^ VALID_STREAM);
        let per_length = cfg.eval_instances.div_ceil(hi - lo + 1);
        let valid = (lo..=hi)
            .flat_map(|n| test_instances(cfg.task, n, hi, per_length, &mut rng))
            .collect();
        Ok(Self {
            varmap,
            model,
            valid,
        })
    }
}

impl Task for Lengthgen {
    type Config = LengthgenConfig;
    type Record = LengthgenRecord;

    fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// `batch_size` training instances (never held-out ones) of lengths drawn uniformly
    /// from the trained range, and the randomized positions if any, all from the generator
    /// of stream `step`.
    fn loss(&mut self, cfg: &LengthgenConfig, step: usize) -> Result<StepLoss> {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.run.seed);
        rng.set_stream(step as u64);
        let [lo, hi] = cfg.train_lengths;
        let instances: Vec<Instance> = (0..cfg.run.batch_size)
            .map(|_| {
                let n = rng.random_range(lo..=hi);
                cfg.task
                    .sample(n, false, &mut rng)
                    .unwrap_or_else(|| cfg.task.random(n, &mut rng))
            })
            .collect();
        let (x, y) = batch(&instances.iter().collect::<Vec<_>>(), &self.model.device())?;
        let positions = cfg
            .randomized_positions
            .map(|range| posenc_train::randomized::draw(&mut rng, x.dim(1)?, range))
            .transpose()?;
        let at = positions
            .as_deref()
            .map_or(Positions::From(0), Positions::At);
        let logits = self.model.logits_at(&x, at)?;
        let (b, t, v) = logits.dims3()?;
        let loss = posenc_train::loss::label_smoothed_cross_entropy(
            &logits.reshape((b * t, v))?,
            &y,
            0.0,
            PAD,
        )?;
        Ok(StepLoss {
            loss,
            tokens: b * t,
        })
    }

    fn validate(
        &mut self,
        cfg: &LengthgenConfig,
        step: usize,
        train_loss: f64,
        elapsed_s: f64,
    ) -> Result<Option<LengthgenRecord>> {
        if self.valid.is_empty() {
            return Ok(None);
        }
        let view = LanguageModel::frozen(&cfg.model, &self.varmap, &self.model.device())?;
        Ok(Some(LengthgenRecord {
            step,
            train_loss,
            valid_exact: score(&view, &self.valid)?.exact,
            elapsed_s,
        }))
    }
}

impl Job<'_> for Lengthgen {
    const KIND: &'static str = "lengthgen";
    type Inputs = ();

    fn begin(cfg: LengthgenConfig, (): &(), device: &Device) -> Result<Begun<Self>> {
        let task = Lengthgen::new(&cfg, device)?;
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

    fn reopen(_: &Path, cfg: &LengthgenConfig, (): &(), device: &Device) -> Result<Self> {
        Lengthgen::new(cfg, device)
    }
}

/// The run in `dir` (its last checkpoint): its state, and the model for inference on
/// `device`.
///
/// # Errors
/// A directory that is not a complete run of this task, or weights that do not fit.
pub fn load(dir: &Path, device: &Device) -> Result<(LengthgenState, LanguageModel)> {
    let varmap = VarMap::new();
    let state: LengthgenState = job::load_run(
        dir,
        Lengthgen::KIND,
        "lengthgen run",
        &varmap,
        |s: &LengthgenState| {
            let vb = VarBuilder::from_varmap(&varmap, DType::F32, device);
            LanguageModel::new(&s.config.model, vb).map(|_| ())?;
            Ok(())
        },
    )?;
    let model = LanguageModel::frozen(&state.config.model, &varmap, device)?;
    Ok((state, model))
}
