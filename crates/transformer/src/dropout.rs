//! Dropout (Srivastava et al. 2014; "Attention Is All You Need" §5.4), and the one rule
//! that says when a model is training.
//!
//! A model trains exactly when gradients flow through it: its weights are candle `Var`s
//! (built over a `VarMap`), so every activation tracks the ops that made it. Then dropout
//! acts. A model built over plain tensors ([`crate::Transformer::frozen`],
//! [`crate::LanguageModel::frozen`], any loaded checkpoint) is in evaluation, and dropout
//! is the identity. This is the only place the mode is decided: no forward function takes
//! a `train` flag. (burn's `Dropout` decides the same way, from its autodiff backend.)
//!
//! Which units drop is drawn from a generator of this thread that [`seed`] sets: a training
//! loop seeds it from its run's seed and the step before each step, so the same seed drops
//! the same units, and a resumed run draws exactly what an uninterrupted one does (candle's
//! own `Tensor::rand` cannot be seeded on the CPU).

use candle_core::{Device, Shape, Tensor};
use posenc::draws::Stream;

/// Keeps dropout's draws apart from the other streams a run draws from the same seed
/// (batch order, randomized positions, the encodings').
const DROPOUT: Stream = Stream(0xD80F_0D80_F0D8_0F0D);

/// Seeds this thread's dropout generator for `step` of a run seeded `seed` (one ChaCha8
/// stream per step; a thread never seeded draws as `seed(0, 0)`), and the encodings'
/// ([`posenc::draws`]) the same way.
pub fn seed(seed: u64, step: u64) {
    posenc::draws::seed(seed, step);
    DROPOUT.seed(seed, step);
}

/// A uniform sample in `[0, 1)` of `shape`, drawn from this thread's dropout generator.
///
/// # Errors
/// From candle, moving the sample to `device`.
pub fn uniform(shape: impl Into<Shape>, device: &Device) -> candle_core::Result<Tensor> {
    let shape = shape.into();
    let mut bits = vec![0u32; shape.elem_count()];
    DROPOUT.fill(&mut bits[..]);
    // The top 24 bits: every f32 in [0, 1) this gives is exact, and 1 is never reached.
    let u: Vec<f32> = bits
        .into_iter()
        .map(|b| (b >> 8) as f32 * (1.0 / (1u32 << 24) as f32))
        .collect();
    Tensor::from_vec(u, shape, &Device::Cpu)?.to_device(device)
}

/// Whether dropout with probability `p` acts on `x`: `p > 0` and `x` tracks gradients.
pub fn active(x: &Tensor, p: f32) -> bool {
    p > 0.0 && x.track_op()
}

/// Dropout with probability `p` while training ([`active`]), the identity otherwise: each
/// unit is zeroed where the [`uniform`] sample is below `p`, the rest scaled by
/// `1 / (1 − p)`.
///
/// # Errors
/// `p` outside `[0, 1)`.
pub fn dropout(x: &Tensor, p: f32) -> candle_core::Result<Tensor> {
    if !active(x, p) {
        return Ok(x.clone());
    }
    if !(0.0..1.0).contains(&p) {
        candle_core::bail!("dropout probability has to be in [0, 1), got {p}")
    }
    let keep = uniform(x.shape(), x.device())?.ge(f64::from(p))?;
    let scale = 1.0 / (1.0 - f64::from(p));
    x * (keep.to_dtype(x.dtype())? * scale)?
}
