//! Attention softmax in one pass per row, with its own backward.
//!
//! ```text
//! y_j = exp(s·x_j − m) / Σ_{i kept} exp(s·x_i − m)   for kept j,     y_j = 0 for masked j
//! m   = max_{i kept} s·x_i;   a row with no kept key is all zeros (never NaN)
//! ∂L/∂x_j = s · y_j · (g_j − Σ_i g_i y_i)
//! ```
//!
//! It replaces the composition `scale → where_cond(mask) → softmax → zero empty rows`
//! (four passes over the scores, each allocating) by one pass forward and one backward,
//! parallel over rows. The mask is a u8 tensor broadcastable to the scores, read through
//! its strides, so a `(batch, 1, 1, k)` padding mask is never expanded.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor, D};

use super::par_output;
use super::simd::{self, exp, vectorized};
use super::{lowest, with_grad};

/// The attention weights `softmax(scale · scores + bias)` over the keys, on any device,
/// differentiable: masked keys weigh 0, and a query that sees no key gets all-zero weights
/// (never NaN). In f32 on the CPU one fused pass ([`masked_softmax`]); elsewhere scale, bias,
/// mask fill with the dtype's [`lowest`] value, candle's softmax kernel (with
/// [`with_grad`]'s backward when a gradient flows) and empty rows set to zero.
///
/// # Shapes
/// - `scores`: `(b, h, q, k)`
/// - `bias`: `(h, q, k)`, added to every batch
/// - `keep`: u8, already broadcast to the scores' shape, non-zero where a query may attend
/// - output: `(b, h, q, k)`
///
/// # Errors
/// Shapes that do not broadcast.
pub fn attention_softmax(
    scores: &Tensor,
    bias: Option<&Tensor>,
    keep: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    if scores.dtype() == DType::F32 && scores.device().is_cpu() {
        // One fused pass: scale, bias, mask, softmax, empty rows to zero.
        return match bias {
            Some(bias) => masked_softmax(
                &(scores * scale)?.broadcast_add(&bias.unsqueeze(0)?)?,
                keep,
                1.0,
            ),
            None => masked_softmax(scores, keep, scale as f32),
        };
    }
    let mut scores = (scores * scale)?;
    if let Some(bias) = bias {
        scores = scores.broadcast_add(&bias.to_dtype(scores.dtype())?.unsqueeze(0)?)?;
    }
    if let Some(keep) = keep {
        let fill = Tensor::new(lowest(scores.dtype()), scores.device())?
            .to_dtype(scores.dtype())?
            .broadcast_as(scores.shape())?;
        scores = keep.where_cond(&scores, &fill)?;
    }
    let weights = if scores.track_op() {
        // candle's fused kernel, with a backward of its own.
        with_grad::softmax_last_dim(&scores)?
    } else {
        candle_nn::ops::softmax_last_dim(&scores)?
    };
    match keep {
        Some(keep) => {
            let any = keep.max_keepdim(D::Minus1)?.to_dtype(weights.dtype())?;
            weights.broadcast_mul(&any)
        }
        None => Ok(weights),
    }
}

/// `softmax(scale · x)` over the last dimension of `x (…, k)` where `keep` is non-zero;
/// masked weights are 0 and a row with no kept key is all zeros. `keep` is u8 and
/// broadcastable to `x`. Differentiable in `x`. f32 only.
///
/// # Errors
/// If `x` is not f32, or `keep` does not broadcast to it.
pub fn masked_softmax(x: &Tensor, keep: Option<&Tensor>, scale: f32) -> Result<Tensor> {
    if x.dtype() != DType::F32 {
        candle_core::bail!("masked_softmax takes f32 scores, got {:?}", x.dtype());
    }
    let op = MaskedSoftmax { scale };
    let x = x.contiguous()?;
    match keep {
        Some(keep) => {
            let keep = keep.to_dtype(DType::U8)?.broadcast_as(x.shape())?;
            x.apply_op2(&keep, op)
        }
        None => x.apply_op1(op),
    }
}

#[derive(Debug, Clone, Copy)]
struct MaskedSoftmax {
    scale: f32,
}

/// Rows per parallel task, so that each task has at least ~16k elements of work: rayon's
/// per-task overhead would dominate rows of a few dozen values.
pub(crate) fn rows_per_task(row_len: usize) -> usize {
    (16_384 / row_len.max(1)).max(1)
}

/// The f32 slice of a contiguous tensor's storage, or an error naming the op.
pub(crate) fn contiguous_f32<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    op: &'static str,
) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        (CpuStorage::F32(_), None) => candle_core::bail!("{op}: the input must be contiguous"),
        _ => candle_core::bail!("{op}: the input must be f32"),
    }
}

/// Where the mask of element `(row, j)` lives: rows are indexed through the leading
/// dimensions' strides (0 where the mask broadcasts).
pub(crate) struct MaskIndex<'a> {
    data: &'a [u8],
    dims: Vec<usize>,
    strides: Vec<usize>,
    start: usize,
    k_stride: usize,
}

impl<'a> MaskIndex<'a> {
    pub(crate) fn new(s: &'a CpuStorage, l: &Layout) -> Result<Self> {
        let CpuStorage::U8(data) = s else {
            candle_core::bail!("masked_softmax: the mask must be u8")
        };
        let rank = l.dims().len();
        Ok(Self {
            data,
            dims: l.dims()[..rank - 1].to_vec(),
            strides: l.stride()[..rank - 1].to_vec(),
            start: l.start_offset(),
            k_stride: l.stride()[rank - 1],
        })
    }

    /// The offset of row `row`'s first mask entry.
    fn row_start(&self, mut row: usize) -> usize {
        let mut offset = self.start;
        for (d, s) in self.dims.iter().zip(&self.strides).rev() {
            offset += (row % d) * s;
            row /= d;
        }
        offset
    }

    /// Row `row`'s `k` mask entries: a slice of the mask when its last dimension is
    /// contiguous (every mask this crate builds), else gathered into `buf`.
    pub(crate) fn row<'b>(&'b self, row: usize, k: usize, buf: &'b mut Vec<u8>) -> &'b [u8] {
        let start = self.row_start(row);
        if self.k_stride == 1 {
            return &self.data[start..start + k];
        }
        buf.clear();
        buf.extend((0..k).map(|j| self.data[start + j * self.k_stride]));
        buf
    }
}

/// One row of the forward: `y = softmax(scale · x)` over the kept entries, 0 elsewhere, all
/// zeros when nothing is kept; with `x` `None`, `y` holds the scores and is overwritten.
/// Masked entries become −∞ before the max, so their `e^(−∞)` is exactly 0 ([`exp`]).
#[inline(always)]
pub(crate) fn softmax_row(y: &mut [f32], x: Option<&[f32]>, keep: Option<&[u8]>, scale: f32) {
    let hide = |v: f32, k: u8| if k != 0 { scale * v } else { f32::NEG_INFINITY };
    match (x, keep) {
        (Some(x), Some(keep)) => {
            for ((y, &x), &k) in y.iter_mut().zip(x).zip(keep) {
                *y = hide(x, k);
            }
        }
        (None, Some(keep)) => y.iter_mut().zip(keep).for_each(|(y, &k)| *y = hide(*y, k)),
        (Some(x), None) => y.iter_mut().zip(x).for_each(|(y, &x)| *y = scale * x),
        (None, None) => y.iter_mut().for_each(|y| *y *= scale),
    }
    let max = simd::max(y);
    if max == f32::NEG_INFINITY {
        y.fill(0.0); // no key to attend to
        return;
    }
    y.iter_mut().for_each(|y| *y = exp(*y - max));
    let inv = 1.0 / simd::sum(y);
    y.iter_mut().for_each(|y| *y *= inv);
}

impl MaskedSoftmax {
    fn forward(
        &self,
        x: &[f32],
        k: usize,
        mask: Option<&MaskIndex>,
        shape: &Shape,
    ) -> (CpuStorage, Shape) {
        let rows = rows_per_task(k);
        let y = par_output(x.len(), k * rows, |task, y| {
            let x = &x[task * k * rows..][..y.len()];
            let mut buf = Vec::new();
            vectorized(
                #[inline(always)]
                || {
                    for (i, (y, x)) in y.chunks_mut(k).zip(x.chunks(k)).enumerate() {
                        let keep = mask.map(|m| m.row(task * rows + i, k, &mut buf));
                        softmax_row(y, Some(x), keep, self.scale);
                    }
                },
            )
        });
        (CpuStorage::F32(y), shape.clone())
    }

    fn backward(&self, y: &Tensor, grad: &Tensor) -> Result<Tensor> {
        y.contiguous()?
            .apply_op2_no_bwd(&grad.contiguous()?, &SoftmaxBackward { scale: self.scale })
    }
}

impl CustomOp1 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(s, l, "masked-softmax")?;
        let k = l.dims().last().copied().unwrap_or(1).max(1);
        Ok(self.forward(x, k, None, l.shape()))
    }

    fn bwd(&self, _x: &Tensor, y: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.backward(y, grad)?))
    }
}

impl CustomOp2 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(s1, l1, "masked-softmax")?;
        let k = l1.dims().last().copied().unwrap_or(1).max(1);
        let mask = MaskIndex::new(s2, l2)?;
        Ok(self.forward(x, k, Some(&mask), l1.shape()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _keep: &Tensor,
        y: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(self.backward(y, grad)?), None))
    }
}

/// `s · y ⊙ (g − Σ g⊙y)` per row, from the forward's output `y` and the incoming `g`.
struct SoftmaxBackward {
    scale: f32,
}

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "masked-softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let y = contiguous_f32(s1, l1, self.name())?;
        let g = contiguous_f32(s2, l2, self.name())?;
        let k = l1.dims().last().copied().unwrap_or(1).max(1);
        let chunk = k * rows_per_task(k);
        let dx = par_output(y.len(), chunk, |task, dx| {
            let (y, g) = (
                &y[task * chunk..][..dx.len()],
                &g[task * chunk..][..dx.len()],
            );
            vectorized(
                #[inline(always)]
                || {
                    for (dx, (y, g)) in dx.chunks_mut(k).zip(y.chunks(k).zip(g.chunks(k))) {
                        let dot = simd::dot(y, g);
                        for ((dx, y), g) in dx.iter_mut().zip(y).zip(g) {
                            *dx = self.scale * y * (g - dot);
                        }
                    }
                },
            )
        });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}
