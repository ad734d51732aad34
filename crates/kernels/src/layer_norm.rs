//! LayerNorm in one pass per row, with its own backward (Ba et al. 2016).
//!
//! ```text
//! μ = mean(x),  r = 1/√(var(x) + ε),  x̂ = (x − μ)·r,   y = x̂ ⊙ w + b
//! ∂L/∂x = r · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂)),  ĝ = g ⊙ w
//! ∂L/∂w = Σ_rows g ⊙ x̂,   ∂L/∂b = Σ_rows g
//! ```
//!
//! It replaces candle-nn's `layer_norm_slow` composition (nine element-wise and reduction
//! nodes, each a pass over memory with its own backward) by one pass forward and one
//! backward, parallel over rows. Statistics are computed in f32 with a two-pass variance,
//! like PyTorch's CPU kernel.

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::par_output;
use super::simd::{self, vectorized};
use super::softmax::{contiguous_f32, rows_per_task};
use super::with_grad;

/// `LayerNorm(x)` over the last dimension with weight `w` and bias `b` (both `(d,)`), on any
/// device, differentiable:
/// - f32 on the CPU: the fused kernel ([`crate::cpu::layer_norm`]), with its own backward;
/// - elsewhere, when a gradient flows: candle-nn's kernel with [`with_grad`]'s backward on a
///   GPU, the composition `layer_norm_slow` on the CPU (f64);
/// - elsewhere at inference: candle-nn's kernel.
///
/// # Errors
/// Shapes that do not fit: `w`, `b` not `(d,)` for `x (…, d)`.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
    let tracked = x.track_op() || w.track_op() || b.track_op();
    if x.dtype() == DType::F32 && x.device().is_cpu() {
        // Parallel over rows and vectorised: twice as fast as candle's kernel at MiniLM's
        // sizes, so it serves inference too.
        layer_norm_cpu(x, w, b, eps)
    } else if tracked && !x.device().is_cpu() {
        with_grad::layer_norm(x, w, b, eps)
    } else if tracked {
        // candle-nn's kernel is not there on the CPU in f64: the composition runs.
        candle_nn::ops::layer_norm_slow(x, w, b, eps)
    } else {
        candle_nn::ops::layer_norm(&x.contiguous()?, w, b, eps)
    }
}

/// `LayerNorm(x + y)`, the post-norm residual: one fused pass in f32 on the CPU
/// ([`crate::cpu::add_layer_norm`]), else the sum and then [`layer_norm`].
///
/// # Shapes
/// `x`, `y`: `(…, d)`, the same; `w`, `b`: `(d,)`.
///
/// # Errors
/// As [`layer_norm`], and if `x` and `y` differ in shape.
pub fn add_layer_norm(x: &Tensor, y: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
    if x.dtype() == DType::F32 && x.device().is_cpu() {
        add_layer_norm_cpu(x, y, w, b, eps)
    } else {
        layer_norm(&(x + y)?, w, b, eps)
    }
}

/// `RMSNorm(x)` over the last dimension with weight `w (d,)`, on any device,
/// differentiable: when a gradient flows, candle-nn's kernel with [`with_grad`]'s backward
/// on a GPU and the composition `rms_norm_slow` on the CPU; at inference candle-nn's kernel.
///
/// # Errors
/// Shapes that do not fit: `w` not `(d,)` for `x (…, d)`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let tracked = x.track_op() || w.track_op();
    if tracked && !x.device().is_cpu() {
        with_grad::rms_norm(x, w, eps)
    } else if tracked {
        candle_nn::ops::rms_norm_slow(x, w, eps)
    } else {
        candle_nn::ops::rms_norm(&x.contiguous()?, w, eps)
    }
}

/// `LayerNorm(x)` over the last dimension with weight `w` and bias `b` (both `(d,)`), in
/// f32. Differentiable in all three.
///
/// # Errors
/// If the dtypes are not f32 or `w`, `b` do not match the last dimension of `x`.
pub fn layer_norm_cpu(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
    let d = x.dim(candle_core::D::Minus1)?;
    for t in [x, w, b] {
        if t.dtype() != DType::F32 {
            candle_core::bail!("layer_norm takes f32 tensors, got {:?}", t.dtype());
        }
    }
    if w.dims() != [d] || b.dims() != [d] {
        candle_core::bail!(
            "layer_norm: weight {:?} and bias {:?} must be ({d},)",
            w.dims(),
            b.dims()
        );
    }
    x.contiguous()?.apply_op3(
        &w.contiguous()?,
        &b.contiguous()?,
        LayerNorm {
            eps,
            residual: false,
        },
    )
}

/// `LayerNorm(x + y)`, the residual connection's sum and norm in one pass, at inference:
/// when no gradient can flow (f32 on the CPU, no input tracked) the sum is formed row by
/// row in the output and normalised there while it is in cache, instead of a pass writing
/// `x + y` and another reading it back; otherwise it is `layer_norm(x + y, w, b)`.
/// Differentiable either way.
///
/// # Shapes
/// `x`, `y`: `(…, d)`, the same; `w`, `b`: `(d,)`.
///
/// # Errors
/// As [`layer_norm_cpu`], and if `x` and `y` differ in shape.
pub fn add_layer_norm_cpu(
    x: &Tensor,
    y: &Tensor,
    w: &Tensor,
    b: &Tensor,
    eps: f32,
) -> Result<Tensor> {
    let tracked = [x, y, w, b].iter().any(|t| t.track_op());
    let cpu = [x, y, w, b].iter().all(|t| t.device().is_cpu());
    if tracked || !cpu || x.dtype() != DType::F32 || x.dims() != y.dims() {
        return layer_norm_cpu(&(x + y)?, w, b, eps);
    }
    let (d, dims) = (x.dim(candle_core::D::Minus1)?, x.dims());
    if w.dims() != [d] || b.dims() != [d] {
        candle_core::bail!(
            "add_layer_norm: weight {:?} and bias {:?} must be ({d},) for input {dims:?}",
            w.dims(),
            b.dims()
        );
    }
    let wb = Tensor::stack(&[w, b], 0)?;
    x.contiguous()?.apply_op3_no_bwd(
        &y.contiguous()?,
        &wb,
        &LayerNorm {
            eps,
            residual: true,
        },
    )
}

/// The op, on `(x, w, b)`; with `residual`, on `(x, y, [w; b])` (`[w; b]` stacked as
/// `(2, d)`) for `LayerNorm(x + y)`, at inference only.
#[derive(Debug, Clone, Copy)]
struct LayerNorm {
    eps: f32,
    residual: bool,
}

/// `LayerNorm(x (+ residual))` of every row of `x` (`(rows · d)`, `d = w.len()`), in
/// parallel over blocks of rows. A row with a residual is summed into a one-row buffer
/// (in L1) and normalised from there; one without is read where it is.
fn normalize_rows(x: &[f32], residual: Option<&[f32]>, w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    let d = w.len().max(1);
    let chunk = d * rows_per_task(d);
    par_output(x.len(), chunk, |task, y| {
        let x = &x[task * chunk..][..y.len()];
        let r = residual.map(|r| &r[task * chunk..][..y.len()]);
        let mut sum = vec![0f32; if r.is_some() { d } else { 0 }];
        vectorized(
            #[inline(always)]
            || {
                for (i, y) in y.chunks_mut(d).enumerate() {
                    let x = &x[i * d..][..y.len()];
                    let x = match r {
                        Some(r) => {
                            let r = &r[i * d..][..y.len()];
                            sum.iter_mut()
                                .zip(x)
                                .zip(r)
                                .for_each(|((s, x), r)| *s = x + r);
                            &sum[..y.len()]
                        }
                        None => x,
                    };
                    let (mean, r) = stats(x, eps);
                    for (((y, x), w), b) in y.iter_mut().zip(x).zip(w).zip(b) {
                        *y = (x - mean) * r * w + b;
                    }
                }
            },
        )
    })
}

/// Mean and reciprocal standard deviation of one row.
#[inline(always)]
fn stats(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len() as f32;
    let mean = simd::sum(x) / n;
    let var = simd::sum_sq_dev(x, mean) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(s1, l1, self.name())?;
        let second = contiguous_f32(s2, l2, self.name())?;
        let third = contiguous_f32(s3, l3, self.name())?;
        let y = match self.residual {
            true => {
                let (w, b) = third.split_at(third.len() / 2);
                normalize_rows(x, Some(second), w, b, self.eps)
            }
            false => normalize_rows(x, None, second, third, self.eps),
        };
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        if self.residual {
            candle_core::bail!("add_layer_norm's fused op has no backward: it is for inference");
        }
        let d = w.dim(0)?;
        let rows = x.elem_count() / d.max(1);
        // One pass: rows 0..n hold ∂L/∂x, row n ∂L/∂w and row n + 1 ∂L/∂b.
        let packed =
            x.apply_op3_no_bwd(w, &grad.contiguous()?, &LayerNormBackward { eps: self.eps })?;
        let gx = packed.narrow(0, 0, rows)?.reshape(x.shape())?;
        let gw = packed.get(rows)?;
        let gb = packed.get(rows + 1)?;
        Ok((Some(gx), Some(gw), Some(gb)))
    }
}

/// The three gradients of [`LayerNorm`] from `x`, `w` and the incoming `g`, packed as
/// `(rows + 2, d)`.
struct LayerNormBackward {
    eps: f32,
}

impl CustomOp3 for LayerNormBackward {
    fn name(&self) -> &'static str {
        "layer-norm-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(s1, l1, self.name())?;
        let w = contiguous_f32(s2, l2, self.name())?;
        let g = contiguous_f32(s3, l3, self.name())?;
        let d = w.len().max(1);
        let rows = x.len() / d;
        let mut out = vec![0f32; x.len() + 2 * d];
        let (gx, sums) = out.split_at_mut(x.len());
        // Fixed blocks of rows, each with its own ∂w, ∂b partial sums, added in order: the
        // result does not depend on how the blocks were scheduled (bit-for-bit repeatable).
        let rows_per_block = rows_per_task(d);
        let partials: Vec<(Vec<f32>, Vec<f32>)> = gx
            .par_chunks_mut(d * rows_per_block)
            .zip(
                x.par_chunks(d * rows_per_block)
                    .zip(g.par_chunks(d * rows_per_block)),
            )
            .map(|(gx, (x, g))| {
                let (mut gw, mut gb, mut xh) = (vec![0f32; d], vec![0f32; d], vec![0f32; d]);
                vectorized(
                    #[inline(always)]
                    || {
                        for (gx, (x, g)) in gx.chunks_mut(d).zip(x.chunks(d).zip(g.chunks(d))) {
                            let (mean, r) = stats(x, self.eps);
                            xh.iter_mut()
                                .zip(x)
                                .for_each(|(xh, x)| *xh = (x - mean) * r);
                            // `gx` holds ĝ = g ⊙ w until the last line overwrites it.
                            gx.iter_mut()
                                .zip(g)
                                .zip(w)
                                .for_each(|((gh, g), w)| *gh = g * w);
                            let mean_gh = simd::sum(gx) / d as f32;
                            let mean_ghx = simd::dot(gx, &xh) / d as f32;
                            for (((gw, gb), g), xh) in gw.iter_mut().zip(&mut gb).zip(g).zip(&xh) {
                                *gw += g * xh;
                                *gb += g;
                            }
                            for (gx, xh) in gx.iter_mut().zip(&xh) {
                                *gx = r * (*gx - mean_gh - xh * mean_ghx);
                            }
                        }
                    },
                );
                (gw, gb)
            })
            .collect();
        let (mut gw, mut gb) = (vec![0f32; d], vec![0f32; d]);
        for (pw, pb) in &partials {
            gw.iter_mut().zip(pw).for_each(|(a, b)| *a += b);
            gb.iter_mut().zip(pb).for_each(|(a, b)| *a += b);
        }
        sums[..d].copy_from_slice(&gw);
        sums[d..].copy_from_slice(&gb);
        Ok((CpuStorage::F32(out), Shape::from((rows + 2, d))))
    }
}
