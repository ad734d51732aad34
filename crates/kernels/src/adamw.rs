//! AdamW's update in place on the CPU in f32: the moments, then the variable, each one
//! pass over memory in parallel chunks, where the composition would allocate a tensor per
//! op for every variable.
//!
//! ```text
//! m ← β₁m + (1 − β₁)g,   v ← β₂v + (1 − β₂)g²,   θ ← decay·θ − lr·(m/c₁)/(√(v/c₂) + ε)
//! ```

use candle_core::{CpuStorage, DType, InplaceOp2, Layout, Result, Tensor};
use rayon::prelude::*;

/// One AdamW step's numbers: `c₁ = 1 − β₁ᵗ`, `c₂ = 1 − β₂ᵗ` and `decay = 1 − lr·λ`.
#[derive(Debug, Clone, Copy)]
pub struct AdamWStep {
    /// The learning rate.
    pub lr: f32,
    /// The first moment's decay.
    pub beta1: f32,
    /// The second moment's decay.
    pub beta2: f32,
    /// The first moment's bias correction, `1 − β₁ᵗ`.
    pub c1: f32,
    /// The second moment's bias correction, `1 − β₂ᵗ`.
    pub c2: f32,
    /// Added to the second moment's root.
    pub eps: f32,
    /// The decoupled weight decay's factor, `1 − lr·λ`.
    pub decay: f32,
}

/// Steps `theta` in place with gradient `grad`, updating its moments `mv (2, n)` (first
/// row m, second v) in place, where the fused kernel runs: `theta` in f32 on the CPU.
/// Returns `false`, changing nothing, elsewhere: the caller then steps with tensor ops.
///
/// # Errors
/// Sizes that differ (`mv` must hold twice `theta`'s elements, `grad` as many).
pub fn adamw_in_place(
    theta: &Tensor,
    mv: &Tensor,
    grad: &Tensor,
    step: &AdamWStep,
) -> Result<bool> {
    if theta.dtype() != DType::F32 || !theta.device().is_cpu() {
        return Ok(false);
    }
    let g = grad.flatten_all()?.contiguous()?;
    mv.inplace_op2(
        &g,
        &Moments {
            beta1: step.beta1,
            beta2: step.beta2,
        },
    )?;
    theta.inplace_op2(mv, step)?;
    Ok(true)
}

/// The f32 data of a contiguous CPU storage, or an error naming the op.
fn data<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("{op}: expected contiguous f32 data"),
    }
}

/// The mutable f32 data of a contiguous CPU storage.
fn data_mut<'a>(s: &'a mut CpuStorage, l: &Layout, op: &str) -> Result<&'a mut [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&mut v[a..b]),
        _ => candle_core::bail!("{op}: expected contiguous f32 data"),
    }
}

/// Elements per parallel task.
const CHUNK: usize = 16_384;

/// `m ← β₁m + (1 − β₁)g`, `v ← β₂v + (1 − β₂)g²` on the `(2, n)` moments, in place.
struct Moments {
    beta1: f32,
    beta2: f32,
}

impl InplaceOp2 for Moments {
    fn name(&self) -> &'static str {
        "adamw-moments"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let g = data(s2, l2, self.name())?;
        let mv = data_mut(s1, l1, self.name())?;
        if mv.len() != 2 * g.len() {
            candle_core::bail!("adamw: moments and gradient sizes differ");
        }
        let (m, v) = mv.split_at_mut(g.len());
        let (b1, b2) = (self.beta1, self.beta2);
        m.par_chunks_mut(CHUNK)
            .zip(v.par_chunks_mut(CHUNK))
            .zip(g.par_chunks(CHUNK))
            .for_each(|((m, v), g)| {
                for ((m, v), &g) in m.iter_mut().zip(v).zip(g) {
                    *m = b1 * *m + (1.0 - b1) * g;
                    *v = b2 * *v + (1.0 - b2) * g * g;
                }
            });
        Ok(())
    }
}

/// `θ ← decay·θ − lr·(m/c₁)/(√(v/c₂) + ε)` in place, from the updated `(2, n)` moments.
impl InplaceOp2 for AdamWStep {
    fn name(&self) -> &'static str {
        "adamw-update"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let mv = data(s2, l2, self.name())?;
        let theta = data_mut(s1, l1, self.name())?;
        if mv.len() != 2 * theta.len() {
            candle_core::bail!("adamw: moments and variable sizes differ");
        }
        let (m, v) = mv.split_at(theta.len());
        let AdamWStep {
            lr,
            c1,
            c2,
            eps,
            decay,
            ..
        } = *self;
        theta
            .par_chunks_mut(CHUNK)
            .zip(m.par_chunks(CHUNK).zip(v.par_chunks(CHUNK)))
            .for_each(|(t, (m, v))| {
                for ((t, &m), &v) in t.iter_mut().zip(m).zip(v) {
                    *t = decay * *t - lr * (m / c1) / ((v / c2).sqrt() + eps);
                }
            });
        Ok(())
    }
}
