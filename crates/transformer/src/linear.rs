//! Position-wise linear maps as one matrix product.
//!
//! `candle_nn::Linear` on a `(batch, seq, d)` input broadcasts its weight to
//! `(batch, d, out)` and runs `batch` small products; the backward pass then forms a
//! weight gradient per batch entry and sums them. Flattening to `(batch·seq, d)` makes
//! both passes a single large GEMM. In f32 the bias is added by [`ops::add_bias`], whose
//! backward sums the bias gradient in one pass instead of a strided reduction.

use candle_core::{DType, Result, Tensor};

use crate::ops;
use candle_nn::{Linear, Module};

/// `x W^T + b` for `x` of any rank, applied to the last dimension.
pub fn apply(linear: &Linear, x: &Tensor) -> Result<Tensor> {
    let dims = x.dims();
    let d = dims[dims.len() - 1];
    let flat = if dims.len() > 2 {
        &x.reshape(((), d))?
    } else {
        x
    };
    let y = match linear.bias() {
        Some(b) if x.dtype() == DType::F32 && flat.rank() == 2 => {
            ops::add_bias(&flat.matmul(&linear.weight().t()?)?, b)?
        }
        _ => linear.forward(flat)?,
    };
    if dims.len() <= 2 {
        return Ok(y);
    }
    let mut out = dims[..dims.len() - 1].to_vec();
    out.push(y.dim(1)?);
    y.reshape(out)
}
