//! Where the time of one training step goes: forward, backward, optimizer.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc_train::error::Result;
use posenc_transformer::{Config, Mask, Transformer};
use serde::{Deserialize, Serialize};

use crate::batch::Batch;
use crate::task::batch_loss;
use crate::vocab::PAD_ID;
use posenc_train::init::initialize;
use posenc_train::optim::{AdamW, AdamWConfig};

/// Milliseconds per phase of a training step: of one step, or medians over several.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepTiming {
    /// Forward pass and loss.
    pub forward_ms: f64,
    /// `loss.backward()`.
    pub backward_ms: f64,
    /// AdamW update.
    pub optimizer_ms: f64,
    /// The whole step.
    pub total_ms: f64,
}

impl StepTiming {
    /// The phase-wise medians of `steps` (an upper median for an even count).
    ///
    /// # Errors
    /// If `steps` is empty.
    pub fn median(steps: &[StepTiming]) -> Result<Self> {
        posenc_error::ensure!(!steps.is_empty(), "no steps were timed");
        let phase = |f: fn(&StepTiming) -> f64| median(steps.iter().map(f).collect());
        Ok(Self {
            forward_ms: phase(|s| s.forward_ms),
            backward_ms: phase(|s| s.backward_ms),
            optimizer_ms: phase(|s| s.optimizer_ms),
            total_ms: phase(|s| s.total_ms),
        })
    }
}

/// The median of `v` (the upper one for an even count); `v` must not be empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A model, its optimizer and one fixed batch, ready to take timed training steps.
pub struct StepBench {
    model: Transformer,
    opt: AdamW,
    batch: Batch,
    device: Device,
}

impl StepBench {
    /// A freshly initialised `cfg` (seed 0) with a batch of `batch` sentences of source
    /// and target length `len`, token `i` being `4 + (i·7919 + salt) mod (vocab − 4)`
    /// (salts 1, 2, 3 for source, target input and target output), as PyTorch's side of
    /// `posenc bench train` builds it, on `device`.
    ///
    /// # Errors
    /// If the model cannot be built (an invalid configuration).
    pub fn new(cfg: &Config, batch: usize, len: usize, device: &Device) -> Result<Self> {
        let varmap = VarMap::new();
        let model = Transformer::new(cfg, VarBuilder::from_varmap(&varmap, DType::F32, device))?;
        initialize(&varmap, 0)?;
        let opt = AdamW::new(&varmap, AdamWConfig::default())?;
        let ids = |vocab: usize, salt: usize| -> Result<Tensor> {
            let v: Vec<u32> = (0..batch * len)
                .map(|i| (4 + (i * 7919 + salt) % (vocab - 4)) as u32)
                .collect();
            Ok(Tensor::from_vec(v, (batch, len), device)?)
        };
        let (src, tgt_in, tgt_out) = (
            ids(cfg.src_vocab_size, 1)?,
            ids(cfg.tgt_vocab_size, 2)?,
            ids(cfg.tgt_vocab_size, 3)?,
        );
        let batch = Batch {
            src_mask: Mask::padding(&src, PAD_ID)?,
            tgt_mask: Transformer::target_mask(&tgt_in, PAD_ID)?,
            tokens: batch * len,
            src,
            tgt_in,
            tgt_out,
        };
        Ok(Self {
            model,
            opt,
            batch,
            device: device.clone(),
        })
    }

    /// One training step (label smoothing 0.1, learning rate 1e-4), timed by phase. On a
    /// GPU, which computes asynchronously, each phase ends when the device has finished it.
    ///
    /// # Errors
    /// If a tensor operation fails.
    pub fn step(&mut self) -> Result<StepTiming> {
        let done = |device: &Device| -> Result<Instant> {
            device.synchronize()?;
            Ok(Instant::now())
        };
        let t0 = done(&self.device)?;
        let loss = batch_loss(&self.model, &self.batch, 0.1)?;
        let t1 = done(&self.device)?;
        let grads = loss.backward()?;
        let t2 = done(&self.device)?;
        self.opt.step(&grads, 1e-4)?;
        let t3 = done(&self.device)?;
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        Ok(StepTiming {
            forward_ms: ms(t0, t1),
            backward_ms: ms(t1, t2),
            optimizer_ms: ms(t2, t3),
            total_ms: ms(t0, t3),
        })
    }
}

/// That `steps` is a count of steps to time: at least 1, at most 10 000.
///
/// # Errors
/// Naming the bad count.
pub fn check_steps(steps: usize) -> Result<()> {
    posenc_error::ensure!(steps >= 1, "time at least one step, got --steps 0");
    posenc::limits::check("steps", steps, 10_000)?;
    Ok(())
}

/// Times `steps` training steps (after `warmup` untimed ones) of `cfg` on `device`, on a
/// [`StepBench`] batch of `batch` sentences, source and target length `len`: the
/// phase-wise medians.
///
/// # Errors
/// If `steps` is 0 or absurdly large, or a step fails.
pub fn time_training_step(
    cfg: &Config,
    batch: usize,
    len: usize,
    warmup: usize,
    steps: usize,
    device: &Device,
) -> Result<StepTiming> {
    check_steps(steps)?;
    let mut bench = StepBench::new(cfg, batch, len, device)?;
    for _ in 0..warmup {
        bench.step()?;
    }
    let timed = (0..steps)
        .map(|_| bench.step())
        .collect::<Result<Vec<_>>>()?;
    StepTiming::median(&timed)
}
