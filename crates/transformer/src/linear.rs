//! Position-wise linear maps `x Wᵀ + b` as one matrix product, over dense or quantized
//! weights.
//!
//! `candle_nn::Linear` on a `(batch, seq, d)` input broadcasts its weight to
//! `(batch, d, out)` and runs `batch` small products; the backward pass then forms a
//! weight gradient per batch entry and sums them. In f32 on the CPU a dense projection is
//! [`kernels::linear`] instead: one GEMM over `(batch·seq, d)`, the bias (and a following
//! ReLU) in the same op, one node in the backward graph; at inference a following GELU
//! joins it too ([`kernels::linear_gelu`]).
//!
//! A [`Proj`] may instead hold a quantized weight (GGUF's Q4/Q8 blocks), multiplied
//! without being expanded to f32: how a pretrained model generates fast. Q4_0, Q4_1,
//! Q8_0, Q4_K and Q6_K run on this project's SIMD kernels ([`kernels::quantized`]); other
//! formats (Q5_0, Q5_K, …) on candle's [`QMatMul`]; a layer's projections of one input share one
//! product ([`Proj::forward_fused`]). For many rows at once (a prompt) the weight is
//! dequantized for that one product and multiplied by the f32 GEMM instead, as llama.cpp
//! hands batches of 32 or more to BLAS: a quantized kernel runs a dot product per row and
//! output.

use std::ops::Range;
use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Module, Result, Tensor};
use candle_nn::{Linear, VarBuilder};

use posenc_kernels as kernels;

/// `x Wᵀ + b` for `x` of any rank, applied to the last dimension.
pub fn apply(linear: &Linear, x: &Tensor) -> Result<Tensor> {
    kernels::linear(x, linear.weight(), linear.bias(), false)
}

/// Applies `f` to `x` flattened to `(rows, d)` and restores the leading dimensions.
fn flat(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let dims = x.dims();
    if dims.len() <= 2 {
        return f(x);
    }
    let y = f(&x.reshape(((), dims[dims.len() - 1]))?)?;
    let mut out = dims[..dims.len() - 1].to_vec();
    out.push(y.dim(1)?);
    y.reshape(out)
}

/// A projection `x Wᵀ (+ b)` with `W (out, in)`: dense, or quantized after loading
/// ([`Proj::quantize`]).
#[derive(Debug, Clone)]
pub struct Proj {
    weight: Weight,
    bias: Option<Tensor>,
    packed: Option<Packed>,
}

/// The packed weight and bias whose rows `rows` a dense projection's are.
#[derive(Debug, Clone)]
struct Packed {
    weight: Tensor,
    bias: Option<Tensor>,
    rows: Range<usize>,
}

#[derive(Debug, Clone)]
enum Weight {
    Dense(Linear),
    Quantized(QMatMul, Arc<QTensor>),
}

/// From this many rows on, a quantized product dequantizes its weight and runs the GEMM.
pub const DEQUANTIZE_FROM_ROWS: usize = 128;

impl Proj {
    /// Wraps a dense `(out, in)` weight and an optional `(out,)` bias.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self {
            weight: Weight::Dense(Linear::new(weight, bias.clone())),
            bias,
            packed: None,
        }
    }

    /// The projection whose weight and bias are the rows `rows` of the packed `weight
    /// (packed, in)` and `bias (packed,)`: views of them, and trained as rows of them
    /// ([`kernels::linear_rows`]).
    ///
    /// # Errors
    /// `rows` past the packed tensors.
    pub fn rows_of(weight: &Tensor, bias: Option<&Tensor>, rows: Range<usize>) -> Result<Self> {
        let part = |t: &Tensor| t.narrow(0, rows.start, rows.len());
        let mut proj = Self::new(part(weight)?, bias.map(part).transpose()?);
        proj.packed = Some(Packed {
            weight: weight.clone(),
            bias: bias.cloned(),
            rows,
        });
        Ok(proj)
    }

    /// Loads or creates `weight (out, in)` and, with `bias`, `bias (out,)` under `vb`,
    /// initialised as PyTorch's `nn.Linear`.
    pub fn load(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let dense = if bias {
            candle_nn::linear(in_dim, out_dim, vb)?
        } else {
            candle_nn::linear_no_bias(in_dim, out_dim, vb)?
        };
        Ok(Self::new(dense.weight().clone(), dense.bias().cloned()))
    }

    /// The dense weight `(out, in)`; `None` once quantized.
    pub fn weight(&self) -> Option<&Tensor> {
        match &self.weight {
            Weight::Dense(linear) => Some(linear.weight()),
            Weight::Quantized(..) => None,
        }
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Multiplies by the quantized `weight` from now on, in place of the dense one (which
    /// is dropped); the bias stays.
    ///
    /// # Errors
    /// A weight of another shape than the dense one, naming both; a projection already
    /// quantized.
    pub fn quantize(&mut self, weight: impl Into<Arc<QTensor>>) -> Result<()> {
        let weight = weight.into();
        let Some(dense) = self.weight() else {
            candle_core::bail!("this projection is already quantized")
        };
        if weight.shape().dims() != dense.dims() {
            candle_core::bail!(
                "a quantized weight of shape {:?} cannot replace one of shape {:?}",
                weight.shape().dims(),
                dense.dims()
            );
        }
        self.weight = Weight::Quantized(QMatMul::from_arc(weight.clone())?, weight);
        self.packed = None;
        Ok(())
    }

    /// `x Wᵀ + b` over the last dimension of `x`.
    ///
    /// # Shapes
    /// - `x`: `(..., in)`
    /// - output: `(..., out)`
    ///
    /// # Errors
    /// `x` whose last dimension is not `in`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, false)
    }

    /// `x Wᵢᵀ + bᵢ` for several projections of the same `x`: with quantized weights that all
    /// have a kernel here and a short `x` (a decode step), one product that quantizes `x`
    /// once and spreads all their rows over the cores ([`kernels::quantized`]); otherwise one
    /// [`Proj::forward`] each. The same values either way.
    ///
    /// # Errors
    /// As [`Proj::forward`].
    pub fn forward_fused<const N: usize>(projs: [&Proj; N], x: &Tensor) -> Result<[Tensor; N]> {
        let weights: Vec<Arc<QTensor>> = projs
            .iter()
            .filter_map(|p| match &p.weight {
                Weight::Quantized(_, w) => Some(w.clone()),
                Weight::Dense(_) => None,
            })
            .collect();
        let d = x.dim(candle_core::D::Minus1)?;
        let rows = x.elem_count() / d.max(1);
        let mut out = Vec::with_capacity(N);
        if weights.len() == N && rows < DEQUANTIZE_FROM_ROWS {
            let x2 = x.reshape((rows, d))?;
            if let Some(y) = kernels::quantized::quantized_matmul_fused(&x2, &weights)? {
                let lead = &x.dims()[..x.rank() - 1];
                let mut start = 0;
                for (p, w) in projs.iter().zip(&weights) {
                    let n = w.shape().dims()[0];
                    let part = y.narrow(1, start, n)?;
                    start += n;
                    let part = match &p.bias {
                        Some(b) => part.broadcast_add(b)?,
                        None => part,
                    };
                    out.push(part.reshape([lead, &[n]].concat())?);
                }
            }
        }
        if out.is_empty() {
            for p in projs {
                out.push(p.forward(x)?);
            }
        }
        out.try_into()
            .map_err(|_| candle_core::Error::Msg("a fused product lost an output".into()))
    }

    /// `ReLU(x Wᵀ + b)`: for a dense f32 weight, one op with the product.
    pub fn forward_relu(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, true)
    }

    /// `GELU(x Wᵀ + b)` (erf form): at inference with a dense f32 weight, one op with the
    /// product ([`kernels::linear_gelu`]).
    pub fn forward_gelu(&self, x: &Tensor) -> Result<Tensor> {
        match &self.weight {
            Weight::Dense(linear) => kernels::linear_gelu(x, linear.weight(), self.bias()),
            Weight::Quantized(..) => kernels::gelu(&self.forward(x)?),
        }
    }

    fn forward_with(&self, x: &Tensor, relu: bool) -> Result<Tensor> {
        let y = match &self.weight {
            Weight::Dense(linear) => {
                return match &self.packed {
                    Some(p) => {
                        kernels::linear_rows(x, &p.weight, p.bias.as_ref(), p.rows.clone(), relu)
                    }
                    None => kernels::linear(x, linear.weight(), self.bias(), relu),
                }
            }
            Weight::Quantized(q, w) => {
                let y = flat(x, |x| {
                    if x.dim(0)? >= DEQUANTIZE_FROM_ROWS {
                        return kernels::matmul(x, &w.dequantize(x.device())?.t()?);
                    }
                    match kernels::quantized::quantized_matmul(x, w)? {
                        Some(y) => Ok(y),
                        None => q.forward(x),
                    }
                })?;
                match &self.bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                }
            }
        };
        if relu {
            y.relu()
        } else {
            Ok(y)
        }
    }
}
