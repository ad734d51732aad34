//! Label-smoothed cross-entropy fused with its log-softmax, on the CPU in f32: one pass
//! per row computes the log-sum-exp and the loss, and one pass the gradient
//! `(softmax(z) − q)/count`, never forming the `(n, V)` log-probabilities.
//!
//! ```text
//! ℓ_i = (1 − ε)·(−log p_i[y_i]) + ε·mean_c(−log p_i[c]),     loss = Σ_{y_i ≠ pad} ℓ_i / #{y_i ≠ pad}
//! ```

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// The mean label-smoothed cross-entropy of `logits (n, V)` against `targets (n)` over
/// the targets that are not `pad`, as one fused op in f32 on the CPU; `None` elsewhere
/// (another dtype or device), where the caller composes the same loss from candle's ops.
/// Differentiable in `logits`.
///
/// # Shapes
/// `logits (n, V)`, `targets (n)`: the caller checks them, and `smoothing ∈ [0, 1)`.
///
/// # Errors
/// Targets that are all `pad`.
pub fn smoothed_cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    smoothing: f64,
    pad: u32,
) -> Result<Option<Tensor>> {
    if logits.dtype() != DType::F32 || !logits.device().is_cpu() {
        return Ok(None);
    }
    let targets = targets.to_dtype(DType::U32)?.contiguous()?;
    let count = targets
        .to_vec1::<u32>()?
        .iter()
        .filter(|&&t| t != pad)
        .count();
    if count == 0 {
        candle_core::bail!("every target is padding: nothing to learn from");
    }
    let op = SmoothedCrossEntropy {
        smoothing: smoothing as f32,
        pad,
        count: count as f32,
        scale: 1.0,
    };
    Some(logits.contiguous()?.apply_op2(&targets, op)).transpose()
}

/// The fused loss; with `scale`, its gradient (`scale` is `∂L/∂loss`).
#[derive(Debug, Clone, Copy)]
struct SmoothedCrossEntropy {
    smoothing: f32,
    pad: u32,
    count: f32,
    scale: f32,
}

fn storage<'a>(
    s1: &'a CpuStorage,
    l1: &Layout,
    s2: &'a CpuStorage,
    l2: &Layout,
) -> Result<(&'a [f32], &'a [u32], usize)> {
    match (s1, l1.contiguous_offsets(), s2, l2.contiguous_offsets()) {
        (CpuStorage::F32(z), Some((a, b)), CpuStorage::U32(t), Some((c, d))) => {
            Ok((&z[a..b], &t[c..d], l1.dims()[1]))
        }
        _ => candle_core::bail!("the fused loss takes contiguous f32 logits and u32 targets"),
    }
}

/// `(max, log Σ exp(z − max))` of one row.
fn log_sum_exp(z: &[f32]) -> (f32, f32) {
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = z.iter().map(|v| (v - max).exp()).sum();
    (max, sum.ln())
}

impl CustomOp2 for SmoothedCrossEntropy {
    fn name(&self) -> &'static str {
        "label-smoothed-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (z, t, v) = storage(s1, l1, s2, l2)?;
        let eps = self.smoothing;
        // Rows in fixed blocks, the blocks' sums added in order: repeatable bit for bit.
        const ROWS: usize = 64;
        let partials: Vec<f64> = z
            .par_chunks(v * ROWS)
            .zip(t.par_chunks(ROWS))
            .map(|(z, t)| {
                z.chunks(v)
                    .zip(t)
                    .filter(|(_, &t)| t != self.pad)
                    .map(|(z, &t)| {
                        let (max, lse) = log_sum_exp(z);
                        let log_z = max + lse;
                        let nll = log_z - z[t as usize];
                        let uniform = log_z - z.iter().sum::<f32>() / v as f32;
                        f64::from((1.0 - eps) * nll + eps * uniform)
                    })
                    .sum::<f64>()
            })
            .collect();
        let total: f64 = partials.iter().sum();
        let loss = (total / f64::from(self.count)) as f32;
        Ok((CpuStorage::F32(vec![loss]), Shape::from(())))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        _loss: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let op = Self {
            scale: grad.to_dtype(DType::F32)?.to_scalar::<f32>()?,
            ..*self
        };
        let g = logits.apply_op2_no_bwd(targets, &Gradient(op))?;
        Ok((Some(g), None))
    }
}

/// `scale · (softmax(z) − q) / count` for rows whose target is not `pad`, 0 for the rest.
struct Gradient(SmoothedCrossEntropy);

impl CustomOp2 for Gradient {
    fn name(&self) -> &'static str {
        "label-smoothed-cross-entropy-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (z, t, v) = storage(s1, l1, s2, l2)?;
        let op = self.0;
        let k = op.scale / op.count;
        let uniform = op.smoothing / v as f32;
        let mut g = vec![0f32; z.len()];
        g.par_chunks_mut(v)
            .zip(z.par_chunks(v).zip(t.par_iter()))
            .filter(|(_, (_, &t))| t != op.pad)
            .for_each(|(g, (z, &t))| {
                let (max, lse) = log_sum_exp(z);
                for (g, z) in g.iter_mut().zip(z) {
                    *g = k * ((z - max - lse).exp() - uniform);
                }
                g[t as usize] -= k * (1.0 - op.smoothing);
            });
        Ok((CpuStorage::F32(g), l1.shape().clone()))
    }
}
