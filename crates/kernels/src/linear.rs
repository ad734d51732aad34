//! A linear layer `y = act(x Wᵀ + b)` as one op, with its own backward.
//!
//! ```text
//! y = act(x Wᵀ + b),  act = identity or ReLU
//! g' = g ⊙ act'(y)    (ReLU: g where y > 0, else 0)
//! ∂L/∂x = g' W,   ∂L/∂W = g'ᵀ x,   ∂L/∂b = Σ_rows g'
//! ```
//!
//! As candle ops this is a transposed-weight view, a product, a bias add and the
//! activation: four graph nodes, and candle's backward gives each node's gradient a
//! freshly zeroed tensor to add into, the activation's as large as the hidden layer
//! (candle's ReLU backward alone is four passes). Here it is one node; the bias and the
//! ReLU are applied in one pass over the product, and the backward is two products and
//! a column sum.
//!
//! At inference [`linear_gelu`] applies GELU in that same pass, while the row is in cache,
//! instead of a second pass writing a second tensor as large as the hidden layer. It has
//! no backward (GELU's needs the pre-activation, which the op does not keep): when a
//! gradient is needed it is [`super::gelu`] of [`linear`].

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::bias::column_sums;
use super::gelu::gelu_scalar;
use super::matmul::{all_threads, gemm_into, Mat, MatMul};
use super::par_output;
use super::simd::vectorized;
use super::softmax::{contiguous_f32, rows_per_task};

/// `x Wᵀ + b`, then ReLU if `relu`, over the last dimension of `x (…, in)` with
/// `w (out, in)` and `b (out,)`. Differentiable in all three. Other dtypes and devices
/// take candle's ops, as one node with the same backward ([`super::with_grad`]).
///
/// # Errors
/// If the shapes do not fit together.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, relu: bool) -> Result<Tensor> {
    check_shapes(x, w, b)?;
    if !all_cpu_f32(x, w, b) {
        return super::with_grad::linear(x, (w, b), 0..w.dim(0)?, relu);
    }
    // The op reads `x` as `(rows, in)` whatever its rank, so no reshape enters the graph.
    let x = x.contiguous()?;
    let op = Linear {
        act: if relu { Act::Relu } else { Act::Identity },
    };
    match b {
        Some(b) => x.apply_op3(w, b, op),
        None => x.apply_op2(w, op),
    }
}

/// [`linear`] with `W` and `b` the rows `rows` of the packed `w (packed, in)` and
/// `b (packed,)`, as attention's `W^Q, W^K, W^V` are rows of `in_proj_weight`.
/// Differentiable in `x` and in the packed tensors. In f32 on the CPU, [`linear`] of their
/// `narrow`s; elsewhere one node whose gradients are the packed tensors' own, zero outside
/// `rows` ([`super::with_grad`]), with no `narrow` node to pad and accumulate them.
///
/// # Errors
/// If the shapes do not fit together, or `rows` reaches past `w`.
pub fn linear_rows(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    rows: std::ops::Range<usize>,
    relu: bool,
) -> Result<Tensor> {
    check_shapes(x, w, b)?;
    if rows.start > rows.end || rows.end > w.dim(0)? {
        candle_core::bail!("linear: rows {rows:?} of a weight {:?}", w.dims());
    }
    if all_cpu_f32(x, w, b) {
        let part = |t: &Tensor| t.narrow(0, rows.start, rows.len());
        return linear(x, &part(w)?, b.map(part).transpose()?.as_ref(), relu);
    }
    super::with_grad::linear(x, (w, b), rows, relu)
}

/// `GELU(x Wᵀ + b)` (erf form) over the last dimension of `x (…, in)`, with `w (out, in)`
/// and `b (out,)`: in one op when no gradient can flow (f32 on the CPU, no input
/// tracked), else `gelu(linear(x, w, b))`. Differentiable either way.
///
/// # Errors
/// If the shapes do not fit together.
pub fn linear_gelu(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let tracked = [Some(x), Some(w), b].iter().flatten().any(|t| t.track_op());
    if tracked || !all_cpu_f32(x, w, b) {
        return super::gelu(&linear(x, w, b, false)?);
    }
    check_shapes(x, w, b)?;
    let x = x.contiguous()?;
    let op = Linear { act: Act::Gelu };
    match b {
        Some(b) => x.apply_op3_no_bwd(w, b, &op),
        None => x.apply_op2_no_bwd(w, &op),
    }
}

/// Whether the op's inputs are all f32 on the CPU, where it runs.
fn all_cpu_f32(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> bool {
    [Some(x), Some(w), b]
        .iter()
        .flatten()
        .all(|t| t.dtype() == DType::F32 && t.device().is_cpu())
}

/// That `x (…, in)`, `w (out, in)` and `b (out,)` fit together.
fn check_shapes(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<()> {
    let (out_dim, in_dim) = w.dims2()?;
    if x.dim(candle_core::D::Minus1)? != in_dim || b.is_some_and(|b| b.dims() != [out_dim]) {
        candle_core::bail!(
            "linear: input {:?}, weight {:?} and bias {:?} do not fit (…, in), (out, in), (out,)",
            x.dims(),
            w.dims(),
            b.map(Tensor::dims)
        );
    }
    Ok(())
}

/// What the op applies to `x Wᵀ + b`, in the same pass as the bias.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Identity,
    Relu,
    /// Inference only: the op has no backward through it.
    Gelu,
}

#[derive(Debug, Clone, Copy)]
struct Linear {
    act: Act,
}

/// The weight `(out, in)` as the matrix `Wᵀ (in, out)`, read through its strides.
fn weight_t(s: &CpuStorage, l: &Layout) -> Result<Mat> {
    let CpuStorage::F32(w) = s else {
        candle_core::bail!("linear: the weight must be f32")
    };
    let st = l.stride();
    Ok(Mat {
        ptr: w[l.start_offset()..].as_ptr(),
        rs: st[0] as isize,
        cs: st[1] as isize,
    }
    .t())
}

impl Linear {
    fn forward(
        &self,
        x: (&CpuStorage, &Layout),
        w: (&CpuStorage, &Layout),
        b: Option<(&CpuStorage, &Layout)>,
    ) -> Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(x.0, x.1, "linear")?;
        let (out_dim, in_dim) = w.1.shape().dims2()?;
        let rows = xs.len() / in_dim.max(1);
        let mut dims = x.1.dims().to_vec();
        match dims.last_mut() {
            Some(last) if *last == in_dim => *last = out_dim,
            _ => candle_core::bail!("linear: input {dims:?} does not end in {in_dim}"),
        }
        let b = b.map(|(s, l)| contiguous_f32(s, l, "linear")).transpose()?;
        let mut y: Vec<f32> = Vec::with_capacity(rows * out_dim);
        let x_mat = Mat::rows(xs, in_dim);
        // SAFETY: `y` has room for `rows · out` elements, all of which gemm writes; the
        // operands are read within their layouts.
        unsafe {
            gemm_into(
                (rows, out_dim, in_dim),
                y.as_mut_ptr(),
                out_dim,
                false,
                x_mat,
                weight_t(w.0, w.1)?,
                1.0,
                all_threads(),
            );
            y.set_len(rows * out_dim);
        }
        if b.is_some() || self.act != Act::Identity {
            let d = out_dim.max(1);
            y.par_chunks_mut(d * rows_per_task(d)).for_each(|y| {
                vectorized(
                    #[inline(always)]
                    || {
                        for row in y.chunks_mut(d) {
                            if let Some(b) = b {
                                row.iter_mut().zip(b).for_each(|(y, b)| *y += b);
                            }
                            match self.act {
                                Act::Identity => {}
                                Act::Relu => row.iter_mut().for_each(|y| *y = y.max(0.0)),
                                Act::Gelu => row.iter_mut().for_each(|y| *y = gelu_scalar(*y)),
                            }
                        }
                    },
                )
            });
        }
        Ok((CpuStorage::F32(y), Shape::from(dims)))
    }

    /// `(∂x, ∂W, ∂b)` from the incoming gradient and, for ReLU, the output.
    fn backward(&self, x: &Tensor, w: &Tensor, y: &Tensor, grad: &Tensor) -> Result<[Tensor; 3]> {
        let g = match self.act {
            // g where the unit was active: y > 0.
            Act::Relu => grad.contiguous()?.apply_op2_no_bwd(y, &ReluMask)?,
            Act::Identity => grad.contiguous()?,
            Act::Gelu => candle_core::bail!("linear: GELU's backward needs the pre-activation"),
        };
        let (out_dim, in_dim) = w.dims2()?;
        let rows: usize = x.dims().iter().rev().skip(1).product();
        let (g, x2) = (g.reshape((rows, out_dim))?, x.reshape((rows, in_dim))?);
        let gx = g.apply_op2_no_bwd(w, &MatMul)?.reshape(x.dims())?;
        let gw = g.t()?.apply_op2_no_bwd(&x2, &MatMul)?;
        let gb = {
            let (s, l) = g.storage_and_layout();
            let candle_core::Storage::Cpu(s) = &*s else {
                candle_core::bail!("linear: the gradient must be on the CPU")
            };
            let sums = column_sums(contiguous_f32(s, l, "linear")?, out_dim.max(1));
            Tensor::from_vec(sums, out_dim, g.device())?
        };
        Ok([gx, gw, gb])
    }
}

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.forward((s1, l1), (s2, l2), None)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        y: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let [gx, gw, _] = self.backward(x, w, y, grad)?;
        Ok((Some(gx), Some(gw)))
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "linear"
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
        self.forward((s1, l1), (s2, l2), Some((s3, l3)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        y: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [gx, gw, gb] = self.backward(x, w, y, grad)?;
        Ok((Some(gx), Some(gw), Some(gb)))
    }
}

/// `g ⊙ [y > 0]`, both `(rows, out)`.
struct ReluMask;

impl CustomOp2 for ReluMask {
    fn name(&self) -> &'static str {
        "relu-mask"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = contiguous_f32(s1, l1, self.name())?;
        let y = contiguous_f32(s2, l2, self.name())?;
        const CHUNK: usize = 16_384;
        let out = par_output(g.len(), CHUNK, |task, o| {
            let (g, y) = (&g[task * CHUNK..][..o.len()], &y[task * CHUNK..][..o.len()]);
            vectorized(
                #[inline(always)]
                || {
                    for ((o, &g), &y) in o.iter_mut().zip(g).zip(y) {
                        *o = if y > 0.0 { g } else { 0.0 };
                    }
                },
            )
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}
