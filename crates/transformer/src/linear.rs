//! Position-wise linear maps as one matrix product.
//!
//! `candle_nn::Linear` on a `(batch, seq, d)` input broadcasts its weight to
//! `(batch, d, out)` and runs `batch` small products; the backward pass then forms a
//! weight gradient per batch entry and sums them. Flattening to `(batch·seq, d)` makes
//! both passes a single large GEMM.

use candle_core::{Result, Tensor};
use candle_nn::{Linear, Module};

/// `x W^T + b` for `x` of any rank, applied to the last dimension.
pub fn apply(linear: &Linear, x: &Tensor) -> Result<Tensor> {
    let dims = x.dims();
    if dims.len() <= 2 {
        return linear.forward(x);
    }
    let d = dims[dims.len() - 1];
    let y = linear.forward(&x.reshape(((), d))?)?;
    let mut out = dims[..dims.len() - 1].to_vec();
    out.push(y.dim(1)?);
    y.reshape(out)
}
