//! A linear layer as one node: `y = act(x Wᵀ + b)`, with `act` the identity or ReLU, and
//! `W`, `b` the rows `r` of packed tensors (attention's `in_proj_weight` packs `W^Q`, `W^K`,
//! `W^V`) or all of them.
//!
//! ```text
//! g = dy ⊙ [y > 0] (ReLU) or dy      dx = g W      dW = gᵀ x      db = Σ_rows g
//! ```
//!
//! The packed tensors' gradients are `dW` and `db` in rows `r`, zero elsewhere: written into
//! one zeroed buffer each, where a `narrow` node's backward would concatenate zero blocks
//! and be accumulated once more.
//!
//! (`[y > 0]`, as PyTorch's ReLU.) The composition it replaces is a transpose, a
//! broadcast, a batched product, a broadcast add and the activation: five nodes, each with
//! its gradient and candle's accumulation per input. Here the rows of every batch are one
//! product.

use std::ops::Range;

use candle_core::{
    CpuStorage, CudaStorage, CustomOp2, CustomOp3, Layout, MetalStorage, Shape, Tensor,
};

use super::{cpu, cuda, metal, Handed};

/// The node: the rows of the packed tensors it reads, whether ReLU follows, and the
/// output the forward computed.
struct Linear {
    rows: Range<usize>,
    relu: bool,
    y: Handed,
}

/// `act(x W[rows]ᵀ + b[rows])` over the last dimension of `x`, computed with candle's ops
/// on detached inputs and handed to one node that carries the whole backward (the module
/// doc). With nothing tracked, the output itself.
///
/// # Shapes
/// `x`: `(…, in)`; `w`: `(packed, in)`; `b`: `(packed)`. The result is `(…, rows.len())`.
///
/// # Errors
/// Shapes that do not fit (checked by [`crate::linear`] and
/// [`crate::linear_rows`], which call this off the CPU's f32 kernels), or a dtype
/// candle's product does not take.
pub(crate) fn linear(
    x: &Tensor,
    (w, b): (&Tensor, Option<&Tensor>),
    rows: Range<usize>,
    relu: bool,
) -> candle_core::Result<Tensor> {
    let inp = w.dim(1)?;
    let x = x.contiguous()?;
    let mut dims = x.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = rows.len();
    }
    let part = |t: &Tensor| t.detach().narrow(0, rows.start, rows.len());
    let mut y = x.detach().reshape(((), inp))?.matmul(&part(w)?.t()?)?;
    if let Some(b) = b {
        y = y.broadcast_add(&part(b)?)?;
    }
    if relu {
        y = y.relu()?;
    }
    let y = y.reshape(dims)?;
    let tracked = [Some(&x), Some(w), b]
        .iter()
        .flatten()
        .any(|t| t.track_op());
    if !tracked {
        return Ok(y);
    }
    let node = Linear {
        rows,
        relu,
        y: Handed::new("linear-with-grad", y),
    };
    match b {
        Some(b) => x.apply_op3(w, b, node),
        None => x.apply_op2(w, node),
    }
}

impl Linear {
    /// `(dx, dW, g)` of the module doc, `dW` of the packed weight's shape.
    fn grads(
        &self,
        x: &Tensor,
        w: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let (start, out, inp) = (self.rows.start, self.rows.len(), w.dim(1)?);
        let g = match self.relu {
            true => (dy * y.gt(0.0)?.to_dtype(dy.dtype())?)?,
            false => dy.clone(),
        };
        let g = g.contiguous()?.reshape(((), out))?;
        let x2 = x.reshape(((), inp))?;
        let dx = g.matmul(&w.narrow(0, start, out)?)?.reshape(x.shape())?;
        let dw = self.packed(g.t()?.matmul(&x2)?, w)?;
        Ok((dx, dw, g))
    }

    /// `part`, the gradient of rows `self.rows` of `packed`, in a zeroed tensor of
    /// `packed`'s shape (`part` itself when it is all of it).
    fn packed(&self, part: Tensor, packed: &Tensor) -> candle_core::Result<Tensor> {
        if part.dims() == packed.dims() {
            return Ok(part);
        }
        let full = Tensor::zeros(packed.shape(), part.dtype(), part.device())?;
        full.slice_set(&part.contiguous()?, 0, self.rows.start)?;
        Ok(full)
    }
}

impl CustomOp2 for Linear {
    forward_is_a_copy!(_x, _w);

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.grads(x, w, y, dy)?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp3 for Linear {
    forward_is_a_copy!(_x, _w, _b);

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, g) = self.grads(x, w, y, dy)?;
        let db = self.packed(g.sum(0)?, b)?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}
