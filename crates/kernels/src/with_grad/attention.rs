//! Scaled dot-product attention as one node, off the CPU's f32 kernel
//! ([`crate::attention`] dispatches here).
//!
//! With `M` the mask, `Z` the dropout's keep flags scaled by `1/(1 − p)` (ones without
//! dropout), and rows that see no key set to zero:
//!
//! ```text
//! S = scale · Q Kᵀ, masked     P = softmax(S)     D = P ⊙ Z     O = D V
//! dV = Dᵀ dO     dP = (dO Vᵀ) ⊙ Z     dS = P ⊙ (dP − Σⱼ dPⱼ Pⱼ)
//! dQ = scale · dS K     dK = scale · dSᵀ Q
//! ```
//!
//! The forward is candle's ops on detached inputs (the products, one `where`, the fused
//! softmax); the composition it replaces put some twenty nodes in the graph (the heads'
//! reshapes, transposes and copies, the scale, the mask, the empty rows, the products),
//! each followed in the backward by candle's accumulation per input. Grouped-query
//! attention stacks the `h / kv` query heads that share a key head as rows of one
//! product, so keys are never copied.

use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, MetalStorage, Shape, Tensor, D};

use super::{cpu, cuda, metal, Handed};
use crate::lowest;

/// The sizes of one call: batch, query heads, key/value heads, query and key lengths,
/// head width.
#[derive(Clone, Copy)]
pub(crate) struct Dims {
    pub b: usize,
    pub h: usize,
    pub kv: usize,
    pub tq: usize,
    pub tk: usize,
    pub d: usize,
}

impl Dims {
    /// `x (b, n, rows, cols)` with the `h / kv` query heads of a key head stacked as rows:
    /// `(b, kv, h/kv · rows, cols)`.
    fn grouped(&self, x: &Tensor, rows: usize, cols: usize) -> candle_core::Result<Tensor> {
        x.reshape((self.b, self.kv, (self.h / self.kv) * rows, cols))
    }

    /// `x` with its heads split and contiguous, `(b, n, len, d)`, whether it came merged,
    /// `(b, len, n·d)`, or split with any strides.
    fn heads(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match *x.dims() {
            [b, len, nd] => x
                .reshape((b, len, nd / self.d, self.d))?
                .transpose(1, 2)?
                .contiguous(),
            _ => x.contiguous(),
        }
    }

    /// The gradient `g (b, n, len, d)` of an input of `like`'s layout.
    fn like(&self, g: Tensor, like: &Tensor) -> candle_core::Result<Tensor> {
        match like.rank() {
            3 => g.transpose(1, 2)?.reshape(like.shape()),
            _ => Ok(g),
        }
    }
}

/// What the backward reads: the heads of Q, K, V, the weights `P`, `Z` and `D`.
struct Saved {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    p: Tensor,
    z: Option<Tensor>,
    dropped: Tensor,
}

/// The node.
struct Attention {
    dims: Dims,
    scale: f64,
    saved: Saved,
    y: Handed,
}

/// `(O, P)` of [`crate::attention`] (which checked the shapes, and broadcast `keep`
/// to `(b, h, tq, tk)`), computed with candle's ops; `O` is one node when a gradient can
/// flow.
pub(crate) fn attention(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    dims: Dims,
    keep: Option<&Tensor>,
    scale: f32,
    dropout: Option<(f32, Tensor)>,
) -> candle_core::Result<(Tensor, Tensor)> {
    let Dims {
        b, h, tq, tk, d, ..
    } = dims;
    let scale = f64::from(scale);
    let detached = |t: &Tensor| dims.heads(&t.detach());
    let (qh, kh, vh) = (detached(q)?, detached(k)?, detached(v)?);
    let dtype = qh.dtype();
    let scores = (dims.grouped(&qh, tq, d)?.matmul(&kh.t()?)? * scale)?;
    let mut scores = scores.reshape((b, h, tq, tk))?;
    if let Some(keep) = keep {
        let fill = Tensor::new(lowest(dtype), q.device())?
            .to_dtype(dtype)?
            .broadcast_as(scores.shape())?;
        scores = keep.where_cond(&scores, &fill)?;
    }
    let mut p = candle_nn::ops::softmax_last_dim(&scores)?;
    if let Some(keep) = keep {
        // A query that sees no key gets no weight at all.
        let any = keep.max_keepdim(D::Minus1)?.to_dtype(dtype)?;
        p = p.broadcast_mul(&any)?;
    }
    let z = dropout
        .map(|(rate, u)| -> candle_core::Result<Tensor> {
            let kept = u.ge(f64::from(rate))?.to_dtype(dtype)?;
            kept * (1.0 / (1.0 - f64::from(rate)))
        })
        .transpose()?;
    let dropped = match &z {
        Some(z) => (&p * z)?,
        None => p.clone(),
    };
    let out = dims
        .grouped(&dropped, tq, tk)?
        .matmul(&vh)?
        .reshape((b, h, tq, d))?
        .transpose(1, 2)?
        .reshape((b, tq, h * d))?;
    if ![q, k, v].iter().any(|t| t.track_op()) {
        return Ok((out, p));
    }
    let node = Attention {
        dims,
        scale,
        saved: Saved {
            q: qh,
            k: kh,
            v: vh,
            p: p.clone(),
            z,
            dropped,
        },
        y: Handed::new("attention-with-grad", out),
    };
    Ok((q.apply_op3(k, v, node)?, p))
}

impl CustomOp3 for Attention {
    forward_is_a_copy!(_q, _k, _v);

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _: &Tensor,
        d_out: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let Dims {
            b, h, tq, tk, d, ..
        } = self.dims;
        let Saved {
            q: qh,
            k: kh,
            v: vh,
            p,
            z,
            dropped,
        } = &self.saved;
        let grouped = |x: &Tensor, rows, cols| self.dims.grouped(x, rows, cols);
        let d_out = d_out
            .reshape((b, tq, h, d))?
            .transpose(1, 2)?
            .contiguous()?;
        let d_out = grouped(&d_out, tq, d)?;
        let dv = grouped(dropped, tq, tk)?.t()?.matmul(&d_out)?;
        let mut dp = d_out.matmul(&vh.t()?)?.reshape((b, h, tq, tk))?;
        if let Some(z) = z {
            dp = (dp * z)?;
        }
        let dot = (&dp * p)?.sum_keepdim(D::Minus1)?;
        let ds = ((p * dp.broadcast_sub(&dot)?)? * self.scale)?;
        let ds = grouped(&ds, tq, tk)?;
        let dq = ds.matmul(kh)?.reshape((b, h, tq, d))?;
        let dk = ds.t()?.matmul(&grouped(qh, tq, d)?)?;
        Ok((
            Some(self.dims.like(dq, q)?),
            Some(self.dims.like(dk, k)?),
            Some(self.dims.like(dv, v)?),
        ))
    }
}
