//! Training a [`LanguageModel`] on a token stream: random windows, AdamW with nanoGPT's
//! schedule (linear warm-up, cosine decay to a floor), cross-entropy of every next token.
//!
//! ```text
//! lr(t) = lr · t/warmup                                        t < warmup
//!       = min_lr + ½(1 + cos(π (t − warmup)/(steps − warmup)))(lr − min_lr)   after
//! ```
//!
//! [`evaluate`] measures the loss over windows of any length, which is how the encodings'
//! behaviour past the trained context is measured.

use std::time::Instant;

use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc_transformer::{LanguageModel, LmConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::loss::label_smoothed_cross_entropy;
use crate::optim::{AdamW, AdamWConfig};
use crate::text_tokenizer::TextTokenizer;

/// The settings of one run. The defaults are nanoGPT's documented CPU run on
/// `shakespeare_char` (4 layers, 4 heads, width 128, context 64, batch 12, 2 000 steps,
/// lr 1e-3 → 1e-4, warm-up 100, β₂ 0.99, dropout 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LmTrainConfig {
    /// The model (its `context` is the training window).
    pub model: LmConfig,
    /// How text becomes tokens.
    pub tokenizer: TextTokenizer,
    /// Optimizer steps.
    pub steps: usize,
    /// Windows per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// The floor the cosine decays to.
    pub min_lr: f64,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// AdamW settings.
    pub adam: AdamWConfig,
    /// Seed of the weights and of the windows drawn.
    pub seed: u64,
}

impl Default for LmTrainConfig {
    fn default() -> Self {
        Self {
            model: LmConfig::default(),
            tokenizer: TextTokenizer::Char,
            steps: 2000,
            batch_size: 12,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            adam: AdamWConfig {
                beta1: 0.9,
                beta2: 0.99,
                eps: 1e-8,
                weight_decay: 0.1,
            },
            seed: 1337,
        }
    }
}

impl LmTrainConfig {
    /// The learning rate at step `t` (0-based).
    pub fn lr(&self, t: usize) -> f64 {
        if t < self.warmup {
            return self.lr * (t + 1) as f64 / self.warmup as f64;
        }
        let span = self.steps.saturating_sub(self.warmup).max(1);
        let progress = ((t - self.warmup) as f64 / span as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.min_lr + cosine * (self.lr - self.min_lr)
    }

    /// Checks the settings, and that a step's attention scores fit in memory.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        fits_in_memory(
            self.batch_size,
            self.model.heads,
            self.model.context,
            "context",
        )?;
        self.adam.validate()?;
        ensure!(self.batch_size > 0, "batch_size must be at least 1");
        ensure!(
            self.lr.is_finite() && self.lr > 0.0 && self.min_lr >= 0.0 && self.min_lr <= self.lr,
            "need 0 ≤ min_lr ≤ lr and lr > 0, got lr = {}, min_lr = {}",
            self.lr,
            self.min_lr
        );
        Ok(())
    }
}

/// The most attention scores (f32) one forward may hold: 4 GB.
const MAX_SCORES: u128 = 1 << 30;

/// Checks that `rows` sequences of `len` positions over `heads` heads have attention scores
/// within [`MAX_SCORES`], naming `what` (the flag that set `len`) otherwise.
fn fits_in_memory(rows: usize, heads: usize, len: usize, what: &str) -> Result<()> {
    let scores = rows as u128 * heads as u128 * len as u128 * len as u128;
    ensure!(
        scores <= MAX_SCORES,
        "{what} = {len} is too long: {rows} sequences × {heads} heads × {len}² attention scores would pass the limit of {MAX_SCORES}"
    );
    Ok(())
}

/// A trained model and what training saw.
pub struct LmRun {
    /// The trained model, its weights detached from `varmap` (for inference).
    pub model: LanguageModel,
    /// Its weights.
    pub varmap: VarMap,
    /// Training loss at every step.
    pub losses: Vec<f64>,
    /// Wall-clock seconds of training.
    pub elapsed_s: f64,
}

/// `count` windows of `len + 1` tokens starting at random offsets of `stream`: the inputs
/// `(count, len)` and the next tokens `(count · len)`.
pub fn random_windows(
    stream: &[u32],
    len: usize,
    count: usize,
    rng: &mut impl Rng,
) -> Result<(Tensor, Tensor)> {
    ensure!(
        stream.len() > len + 1,
        "a stream of {} tokens has no window of {} + 1",
        stream.len(),
        len
    );
    let starts: Vec<usize> = (0..count)
        .map(|_| rng.random_range(0..stream.len() - len - 1))
        .collect();
    windows(stream, len, &starts)
}

fn windows(stream: &[u32], len: usize, starts: &[usize]) -> Result<(Tensor, Tensor)> {
    let device = Device::Cpu;
    let inputs: Vec<u32> = starts
        .iter()
        .flat_map(|&s| stream[s..s + len].iter().copied())
        .collect();
    let targets: Vec<u32> = starts
        .iter()
        .flat_map(|&s| stream[s + 1..s + len + 1].iter().copied())
        .collect();
    Ok((
        Tensor::from_vec(inputs, (starts.len(), len), &device)?,
        Tensor::from_vec(targets, starts.len() * len, &device)?,
    ))
}

/// Mean cross-entropy of the next token at every position of `inputs (batch, len)`.
pub fn loss(
    model: &LanguageModel,
    inputs: &Tensor,
    targets: &Tensor,
    train: bool,
) -> Result<Tensor> {
    let logits = model.logits(inputs, train)?;
    let (b, t, v) = logits.dims3()?;
    // No token is padding in a stream: u32::MAX matches none.
    label_smoothed_cross_entropy(&logits.reshape((b * t, v))?, targets, 0.0, u32::MAX)
}

/// Windows evaluated in one forward.
const EVAL_BATCH: usize = 8;

/// Mean next-token loss (nats) over `windows` windows of `len` tokens spread evenly over
/// `stream`, every position counted: at `len` past the trained context this measures
/// extrapolation.
///
/// # Errors
/// A stream shorter than one window, or positions past a learned encoding's table.
pub fn evaluate(model: &LanguageModel, stream: &[u32], len: usize, windows_: usize) -> Result<f64> {
    ensure!(windows_ > 0, "evaluate at least one window");
    posenc::limits::check("windows", windows_, posenc::limits::MAX_POSITIONS)?;
    ensure!(len > 0, "a window must hold at least one token");
    fits_in_memory(EVAL_BATCH, model.config().heads, len, "the window length")?;
    ensure!(
        stream.len() > len + 1,
        "a stream of {} tokens has no window of {len} + 1",
        stream.len()
    );
    let room = stream.len() - len - 1;
    let starts: Vec<usize> = (0..windows_).map(|i| i * room / windows_).collect();
    let mut total = 0.0;
    for chunk in starts.chunks(EVAL_BATCH) {
        let (x, y) = windows(stream, len, chunk)?;
        let l = loss(model, &x, &y, false)?.to_scalar::<f32>()?;
        total += f64::from(l) * chunk.len() as f64;
    }
    Ok(total / windows_ as f64)
}

/// Trains a fresh model on `train`, calling `progress(step, loss)` after every step.
pub fn train_lm(
    cfg: &LmTrainConfig,
    train: &[u32],
    mut progress: impl FnMut(usize, f64),
) -> Result<LmRun> {
    cfg.validate()?;
    let device = Device::Cpu;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let varmap = VarMap::new();
    let model = LanguageModel::new(
        &cfg.model,
        VarBuilder::from_varmap(&varmap, DType::F32, &device),
    )?;
    crate::init::initialize(&varmap, cfg.seed)?;
    let mut opt = AdamW::new(&varmap, cfg.adam)?;
    let start = Instant::now();
    let mut losses = Vec::with_capacity(cfg.steps);
    for step in 0..cfg.steps {
        let (x, y) = random_windows(train, cfg.model.context, cfg.batch_size, &mut rng)?;
        let l = loss(&model, &x, &y, true)?;
        let value = f64::from(l.to_scalar::<f32>()?);
        ensure!(
            value.is_finite(),
            "the loss diverged at step {step}: {value}"
        );
        opt.step(&l.backward()?, cfg.lr(step))?;
        losses.push(value);
        progress(step, value);
    }
    drop(model);
    let model = LanguageModel::frozen(&cfg.model, &varmap, &device)?;
    Ok(LmRun {
        model,
        varmap,
        losses,
        elapsed_s: start.elapsed().as_secs_f64(),
    })
}
