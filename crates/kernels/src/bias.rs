//! Adding a bias to every row, with a backward that sums columns in one pass.
//!
//! ```text
//! y = x + b (b broadcast over rows),   ∂L/∂x = g,   ∂L/∂b = Σ_rows g
//! ```
//!
//! candle's `broadcast_add` computes `∂L/∂b` with a strided reduction over the leading
//! dimension, the largest non-GEMM cost of a training step's backward; here it is one
//! contiguous pass, parallel over blocks of rows.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::par_output;
use super::simd::vectorized;
use super::softmax::{contiguous_f32, rows_per_task};

/// `x + b` for `x (…, d)` and `b (d,)`, f32. Differentiable in both.
///
/// # Errors
/// If the dtypes are not f32 or `b` does not match the last dimension of `x`.
pub fn add_bias(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    let d = x.dim(candle_core::D::Minus1)?;
    if x.dtype() != DType::F32 || b.dtype() != DType::F32 {
        candle_core::bail!(
            "add_bias takes f32 tensors, got {:?} and {:?}",
            x.dtype(),
            b.dtype()
        );
    }
    if b.dims() != [d] {
        candle_core::bail!("add_bias: the bias {:?} must be ({d},)", b.dims());
    }
    x.contiguous()?.apply_op2(&b.contiguous()?, AddBias)
}

struct AddBias;

impl CustomOp2 for AddBias {
    fn name(&self) -> &'static str {
        "add-bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(s1, l1, "add-bias")?;
        let b = contiguous_f32(s2, l2, "add-bias")?;
        let d = b.len().max(1);
        let chunk = d * rows_per_task(d);
        let y = par_output(x.len(), chunk, |task, y| {
            let x = &x[task * chunk..][..y.len()];
            vectorized(
                #[inline(always)]
                || {
                    for (y, x) in y.chunks_mut(d).zip(x.chunks(d)) {
                        for ((y, x), b) in y.iter_mut().zip(x).zip(b) {
                            *y = x + b;
                        }
                    }
                },
            )
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let gb = grad
            .contiguous()?
            .apply_op1_no_bwd(&ColumnSums { d: b.dim(0)? })?;
        Ok((Some(grad.clone()), Some(gb)))
    }
}

/// `Σ_rows g` of a contiguous `(…, d)` tensor, as `(d,)`.
struct ColumnSums {
    d: usize,
}

impl candle_core::CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "column-sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = contiguous_f32(s, l, self.name())?;
        let d = self.d.max(1);
        Ok((CpuStorage::F32(column_sums(g, d)), Shape::from(d)))
    }
}

/// `Σ_rows g` of a row-major `(rows, d)` slice. Fixed blocks of rows are summed in
/// parallel, then the blocks in order: repeatable bit for bit, however the blocks were
/// scheduled.
pub(crate) fn column_sums(g: &[f32], d: usize) -> Vec<f32> {
    let partials: Vec<Vec<f32>> = g
        .par_chunks(d * rows_per_task(d))
        .map(|block| {
            let mut acc = vec![0f32; d];
            vectorized(
                #[inline(always)]
                || {
                    for row in block.chunks(d) {
                        acc.iter_mut().zip(row).for_each(|(a, g)| *a += g);
                    }
                },
            );
            acc
        })
        .collect();
    let mut sums = vec![0f32; d];
    for p in &partials {
        sums.iter_mut().zip(p).for_each(|(a, b)| *a += b);
    }
    sums
}
