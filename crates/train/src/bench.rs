//! Where the time of one training step goes: forward, backward, optimizer.

use std::time::Instant;

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc_transformer::{Config, Mask, Transformer};
use serde::Serialize;

use crate::batch::Batch;
use crate::init::initialize;
use crate::optim::{AdamW, AdamWConfig};
use crate::trainer::batch_loss;
use crate::vocab::PAD_ID;

/// Milliseconds per phase of a training step (medians over the timed steps).
#[derive(Debug, Clone, Serialize)]
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `steps` training steps (after `warmup` untimed ones) of `cfg` on random batches
/// of `batch` sentences, source and target length `len`.
pub fn time_training_step(
    cfg: &Config,
    batch: usize,
    len: usize,
    warmup: usize,
    steps: usize,
) -> Result<StepTiming> {
    anyhow::ensure!(steps >= 1, "time at least one step, got --steps 0");
    posenc::limits::check("steps", steps, 10_000)?;
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Transformer::new(cfg, VarBuilder::from_varmap(&varmap, DType::F32, &device))?;
    initialize(&varmap, 0)?;
    let mut opt = AdamW::new(&varmap, AdamWConfig::default())?;
    let ids = |vocab: usize, salt: usize| -> Result<Tensor> {
        let v: Vec<u32> = (0..batch * len)
            .map(|i| (4 + (i * 7919 + salt) % (vocab - 4)) as u32)
            .collect();
        Ok(Tensor::from_vec(v, (batch, len), &device)?)
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
    let (mut f, mut b, mut o, mut t) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..warmup + steps {
        let t0 = Instant::now();
        let loss = batch_loss(&model, &batch, 0.1, true)?;
        let t1 = Instant::now();
        let grads = loss.backward()?;
        let t2 = Instant::now();
        opt.step(&grads, 1e-4)?;
        let t3 = Instant::now();
        if i >= warmup {
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            f.push(ms(t0, t1));
            b.push(ms(t1, t2));
            o.push(ms(t2, t3));
            t.push(ms(t0, t3));
        }
    }
    Ok(StepTiming {
        forward_ms: median(f),
        backward_ms: median(b),
        optimizer_ms: median(o),
        total_ms: median(t),
    })
}
