//! Scaled dot-product attention as one op, with its own backward.
//!
//! ```text
//! S = s·Q Kᵀ,   P = softmax(S) over kept keys (0 elsewhere; a row with none kept is 0)
//! O = D(P) V,   D = dropout: keep with probability 1 − p, scaled by 1/(1 − p)
//!
//! ∂V = D(P)ᵀ ∂O,   ∂P = D'(∂O Vᵀ),   ∂S = P ⊙ (∂P − rowsum(∂P ⊙ P)),
//! ∂Q = s·∂S K,     ∂K = s·∂Sᵀ Q
//! ```
//!
//! Built from candle ops the same attention is a dozen graph nodes per layer (head
//! reshapes and transposes, copies to make them contiguous, two batched products, the
//! softmax, the merge of the heads), and candle's backward gives every node's gradient
//! a freshly zeroed tensor to be added into. Here there is one node: the products read
//! Q, K and V through their strides, one `(batch, head)` pair per task, and write the
//! output with the heads already merged, `(batch, q_len, heads·d_k)`. Q, K and V may
//! come with their heads split, `(batch, heads, len, d_k)`, or still merged as a
//! projection leaves them, `(batch, len, heads·d_k)`: then no reshape or transpose enters
//! the graph either, and their gradients are written merged. The weights `P` are kept for
//! the backward and returned to the caller. Grouped-query attention reads key and value
//! head `i / (heads / kv_heads)` for query head `i`.
//!
//! Off the CPU's f32, the same op is candle's ops under one node with this backward
//! ([`super::with_grad`]).

use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Result, Shape, Storage, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

use super::matmul::{gemm_into, Mat, OutPtr};
use super::simd::{self, vectorized};
use super::softmax::{softmax_row, MaskIndex};
use super::with_grad;
use super::{assume_init, par_output_uninit};

/// `(O, P)`: the attention of queries `q (b, h, tq, d)` over keys and values
/// `k, v (b, kv, tk, d)`, any strides, each of them also accepted with its heads merged,
/// `(b, len, heads·d)`, where `d = head_dim`; with `keep` (u8, broadcastable to
/// `(b, h, tq, tk)`) masking keys, scores scaled by `scale`, and, when `dropout` is
/// `Some((p, u))`, weights dropped where the uniform sample `u (b, h, tq, tk)` is below
/// `p`. `O` is `(b, tq, h·d)`, heads merged; `P (b, h, tq, tk)` are the weights before
/// dropout (not differentiable). `O` is differentiable in `q`, `k` and `v`.
///
/// In f32 on the CPU this op's own kernel; in other dtypes and on other devices candle's
/// ops, as one node with the same backward ([`with_grad`](super::with_grad)'s attention).
///
/// # Errors
/// Shapes that do not fit together, a head count not a multiple of the key/value heads,
/// a dtype candle's ops do not take.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    head_dim: usize,
    keep: Option<&Tensor>,
    scale: f32,
    dropout: Option<(f32, Tensor)>,
) -> Result<(Tensor, Tensor)> {
    let shapes = [q, k, v].map(|t| split_dims(t.dims(), head_dim));
    let [Some([b, h, tq, d]), Some([kb, kv, tk, kd]), Some(vs)] = shapes else {
        candle_core::bail!(
            "attention: q {:?}, k {:?}, v {:?} must each be (b, heads, len, {head_dim}) or (b, len, heads·{head_dim})",
            q.dims(),
            k.dims(),
            v.dims()
        );
    };
    if (kb, kd) != (b, d) || vs != [b, kv, tk, d] || kv == 0 || h % kv != 0 {
        candle_core::bail!(
            "attention: q {:?}, k {:?}, v {:?} must be (b, h, tq, d), (b, kv, tk, d) twice, kv dividing h",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    let shape = (b, h, tq, tk);
    let keep = keep
        .map(|m| m.to_dtype(DType::U8)?.broadcast_as(shape))
        .transpose()?;
    let dropout = dropout
        .map(|(p, u)| -> Result<_> {
            if u.dims() != [b, h, tq, tk] || u.dtype() != DType::F32 {
                candle_core::bail!("attention: the dropout sample must be f32 {shape:?}");
            }
            Ok((p, u.contiguous()?))
        })
        .transpose()?;
    if [q, k, v]
        .iter()
        .any(|t| t.dtype() != DType::F32 || !t.device().is_cpu())
    {
        let dims = with_grad::Dims {
            b,
            h,
            kv,
            tq,
            tk,
            d,
        };
        return with_grad::attention((q, k, v), dims, keep.as_ref(), scale, dropout);
    }
    if b * h * tq * tk * d == 0 {
        // Nothing to attend to, or nothing to attend with: zero output and weights.
        let zeros = |s: Shape| Tensor::zeros(s, DType::F32, q.device());
        return Ok((zeros((b, tq, h * d).into())?, zeros(shape.into())?));
    }
    let weights = Arc::new(Mutex::new(None));
    let op = Attention {
        head_dim,
        scale,
        keep,
        dropout,
        weights: weights.clone(),
    };
    let out = q.apply_op3(k, v, op)?;
    let p = weights
        .lock()
        .map_err(|_| candle_core::Error::Msg("attention: a thread panicked".into()))?
        .clone();
    match p {
        Some(p) => Ok((out, p)),
        None => candle_core::bail!("attention: the forward kept no weights"),
    }
}

/// The op: what the forward needs besides Q, K, V, and the weights it computed (shared
/// with the caller, and read again by the backward).
struct Attention {
    head_dim: usize,
    scale: f32,
    keep: Option<Tensor>,
    dropout: Option<(f32, Tensor)>,
    weights: Arc<Mutex<Option<Tensor>>>,
}

/// The data of an f32 CPU storage, or an error naming what it is.
fn cpu_data<'a>(s: &'a CpuStorage, what: &str) -> Result<&'a [f32]> {
    match s {
        CpuStorage::F32(v) => Ok(v),
        _ => candle_core::bail!("attention: {what} must be f32"),
    }
}

/// [`cpu_data`] of a tensor's storage, which must be on the CPU.
pub(super) fn cpu_f32<'a>(s: &'a Storage, what: &str) -> Result<&'a [f32]> {
    match s {
        Storage::Cpu(s) => cpu_data(s, what),
        _ => candle_core::bail!("attention: {what} must be on the CPU"),
    }
}

/// `(batch, heads, len, head_dim)` of a tensor with its heads split, `dims` of that form,
/// or merged, `(batch, len, heads·head_dim)`; `None` for any other shape.
pub(super) fn split_dims(dims: &[usize], head_dim: usize) -> Option<[usize; 4]> {
    match *dims {
        [b, h, t, d] if d == head_dim => Some([b, h, t, d]),
        [b, t, hd] if head_dim > 0 && hd % head_dim == 0 => Some([b, hd / head_dim, t, head_dim]),
        _ => None,
    }
}

/// [`split_dims`] of a shape the wrapper already checked, as an error if it is not one.
fn heads_shape(dims: &[usize], head_dim: usize) -> Result<[usize; 4]> {
    split_dims(dims, head_dim)
        .ok_or_else(|| candle_core::Error::Msg(format!("attention: unexpected shape {dims:?}")))
}

/// Where the `(len, d)` matrix of pair `(bi, hi)` starts and its row stride, in a
/// contiguous tensor of `(b, h, len, d)` with the heads split, or `(b, len, h·d)` merged.
fn block(merged: bool, [_, h, len, d]: [usize; 4], bi: usize, hi: usize) -> (usize, usize) {
    match merged {
        true => (bi * len * h * d + hi * d, h * d),
        false => ((bi * h + hi) * len * d, d),
    }
}

/// A tensor's `(len, d)` matrices `(batch, head)`, through its strides, whether its
/// heads are split or merged; elements `T` (f32, or f16 for a cache kept in half precision).
pub(super) struct Heads<'a, T = f32> {
    data: &'a [T],
    start: usize,
    strides: [usize; 4],
}

impl<'a, T> Heads<'a, T> {
    pub(super) fn new(data: &'a [T], l: &Layout, head_dim: usize) -> Result<Self> {
        let strides = match *l.stride() {
            [s0, s1, s2, s3] => [s0, s1, s2, s3],
            // (b, len, h·d): head `i` starts `i·d` columns in.
            [s0, s1, s2] => [s0, head_dim * s2, s1, s2],
            _ => candle_core::bail!(
                "attention: expected a 3-D or 4-D layout, got {:?}",
                l.dims()
            ),
        };
        Ok(Self {
            data,
            start: l.start_offset(),
            strides,
        })
    }

    /// Where matrix `(i, j)` starts, and its row and column strides (rows over dimension
    /// 2, columns over dimension 3).
    pub(super) fn strided(&self, i: usize, j: usize) -> (*const T, isize, isize) {
        let [s0, s1, s2, s3] = self.strides;
        let ptr = self.data[self.start + i * s0 + j * s1..].as_ptr();
        (ptr, s2 as isize, s3 as isize)
    }
}

impl Heads<'_, f32> {
    /// Matrix `(i, j)`: rows over dimension 2, columns over dimension 3.
    pub(super) fn at(&self, i: usize, j: usize) -> Mat {
        let (ptr, rs, cs) = self.strided(i, j);
        Mat { ptr, rs, cs }
    }
}

/// What an attention op's forward is handed: Q, K and V read through their layouts,
/// their shapes `[b, h, tq, d]` and `[b, kv, tk, d]`, and the query heads per key/value
/// head.
pub(super) struct Qkv<'a> {
    pub(super) q: Heads<'a>,
    pub(super) k: Heads<'a>,
    pub(super) v: Heads<'a>,
    pub(super) shapes: ([usize; 4], [usize; 4]),
    pub(super) group: usize,
}

impl<'a> Qkv<'a> {
    /// Q, K, V from the op's three storages and layouts (heads split or merged).
    pub(super) fn new(head_dim: usize, [q, k, v]: [(&'a CpuStorage, &Layout); 3]) -> Result<Self> {
        let heads =
            |(s, l): (&'a CpuStorage, &Layout), what| Heads::new(cpu_data(s, what)?, l, head_dim);
        let shapes = (
            heads_shape(q.1.dims(), head_dim)?,
            heads_shape(k.1.dims(), head_dim)?,
        );
        Ok(Self {
            q: heads(q, "q")?,
            k: heads(k, "k")?,
            v: heads(v, "v")?,
            group: shapes.0[1] / shapes.1[1].max(1),
            shapes,
        })
    }
}

/// Dropout's keep-and-rescale factor per weight, from the uniform sample `u`: `1/(1 − p)`
/// where `u ≥ p`, else 0 (candle-nn's `dropout` draws the same way).
#[inline(always)]
fn drop_factor(u: f32, p: f32) -> f32 {
    if u >= p {
        1.0 / (1.0 - p)
    } else {
        0.0
    }
}

impl Attention {
    /// The dropout sample's data, if there is dropout.
    fn with_dropout<R>(&self, f: impl FnOnce(Option<(f32, &[f32])>) -> Result<R>) -> Result<R> {
        match &self.dropout {
            Some((p, u)) => {
                let (s, l) = u.storage_and_layout();
                let u = cpu_f32(&s, "the dropout sample")?;
                let (a, b) = l
                    .contiguous_offsets()
                    .ok_or_else(|| candle_core::Error::Msg("attention: sample layout".into()))?;
                f(Some((*p, &u[a..b])))
            }
            None => f(None),
        }
    }
}

impl CustomOp3 for Attention {
    fn name(&self) -> &'static str {
        "attention"
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
        let Qkv {
            q,
            k,
            v,
            shapes: ([b, h, tq, d], [_, _, tk, _]),
            group,
        } = Qkv::new(self.head_dim, [(s1, l1), (s2, l2), (s3, l3)])?;
        let keep_guard = self.keep.as_ref().map(|m| m.storage_and_layout());
        let mask = match &keep_guard {
            Some((s, l)) => match &**s {
                Storage::Cpu(s) => Some(MaskIndex::new(s, l)?),
                _ => candle_core::bail!("attention: the mask must be on the CPU"),
            },
            None => None,
        };
        let mut out: Vec<f32> = Vec::with_capacity(b * tq * h * d);
        let dst = OutPtr(out.as_mut_ptr());
        let p = self.with_dropout(|drop| {
            let pair = |pair: usize, p: &mut [MaybeUninit<f32>]| {
                let (bi, hi) = (pair / h, pair % h);
                let (qm, km, vm) = (q.at(bi, hi), k.at(bi, hi / group), v.at(bi, hi / group));
                // SAFETY: `p` is this pair's (tq, tk) block; Q, K, V are read through
                // their layouts' strides.
                unsafe {
                    gemm_into(
                        (tq, tk, d),
                        p.as_mut_ptr().cast(),
                        tk,
                        false,
                        qm,
                        km.t(),
                        self.scale,
                        Parallelism::None,
                    )
                };
                // SAFETY: gemm wrote all of `p`.
                let p = unsafe { assume_init(p) };
                let mut buf = Vec::new();
                vectorized(
                    #[inline(always)]
                    || {
                        for (i, row) in p.chunks_mut(tk.max(1)).enumerate() {
                            let keep = mask.as_ref().map(|m| m.row(pair * tq + i, tk, &mut buf));
                            softmax_row(row, None, keep, 1.0);
                        }
                    },
                );
                let dropped = drop.map(|(rate, u)| {
                    let u = &u[pair * tq * tk..(pair + 1) * tq * tk];
                    p.iter()
                        .zip(u)
                        .map(|(&p, &u)| p * drop_factor(u, rate))
                        .collect::<Vec<f32>>()
                });
                let weights = Mat::rows(dropped.as_deref().unwrap_or(p), tk);
                // SAFETY: this pair writes columns `hi·d .. (hi+1)·d` of its batch
                // entry's `tq` rows of `out`, which no other pair writes.
                unsafe {
                    gemm_into(
                        (tq, d, tk),
                        dst.at(bi * tq * h * d + hi * d),
                        h * d,
                        false,
                        weights,
                        vm,
                        1.0,
                        Parallelism::None,
                    )
                };
            };
            // SAFETY: each pair's (tq, tk) block of weights is written whole by gemm
            // (`accumulate` false) before anything reads it.
            Ok(unsafe { par_output_uninit(b * h * tq * tk, tq * tk, pair) })
        })?;
        // SAFETY: every (batch, head) pair wrote its `tq · d` elements of `out`.
        unsafe { out.set_len(b * tq * h * d) };
        let weights = Tensor::from_vec(p, (b, h, tq, tk), &Device::Cpu)?;
        *self
            .weights
            .lock()
            .map_err(|_| candle_core::Error::Msg("attention: a thread panicked".into()))? =
            Some(weights);
        Ok((CpuStorage::F32(out), Shape::from((b, tq, h * d))))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _out: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let p = self
            .weights
            .lock()
            .map_err(|_| candle_core::Error::Msg("attention: a thread panicked".into()))?
            .clone()
            .ok_or_else(|| {
                candle_core::Error::Msg("attention: no forward to go back through".into())
            })?;
        let hd = self.head_dim;
        let (qs, ks) = (heads_shape(q.dims(), hd)?, heads_shape(k.dims(), hd)?);
        let ([b, h, tq, d], [_, kv, tk, _]) = (qs, ks);
        let group = h / kv;
        let guards = [q, k, v, grad, &p].map(|t| t.storage_and_layout());
        let heads = |i: usize, what: &str| -> Result<Heads> {
            Heads::new(cpu_f32(&guards[i].0, what)?, guards[i].1, hd)
        };
        // Each gradient is laid out as its input: heads merged (3-D) or split.
        let (q_merged, k_merged, v_merged) = (q.rank() == 3, k.rank() == 3, v.rank() == 3);
        let (qh, kh, vh, gh) = (
            heads(0, "q")?,
            heads(1, "k")?,
            heads(2, "v")?,
            heads(3, "the gradient")?,
        );
        let p_all = cpu_f32(&guards[4].0, "the weights")?;
        let mut dq = vec![0f32; b * h * tq * d];
        let mut dk = vec![0f32; b * kv * tk * d];
        let mut dv = vec![0f32; b * kv * tk * d];
        let (dq_ptr, dk_ptr, dv_ptr) = (
            OutPtr(dq.as_mut_ptr()),
            OutPtr(dk.as_mut_ptr()),
            OutPtr(dv.as_mut_ptr()),
        );
        let scale = self.scale;
        self.with_dropout(|drop| {
            // One task per (batch, key/value head): its query heads add into the same ∂K, ∂V.
            (0..b * kv).into_par_iter().for_each(|task| {
                let (bi, ki) = (task / kv, task % kv);
                let (mut ds, mut dropped) = (vec![0f32; tq * tk], Vec::new());
                let (km, vm) = (kh.at(bi, ki), vh.at(bi, ki));
                let (dk_at, dk_rs) = block(k_merged, ks, bi, ki);
                let (dv_at, dv_rs) = block(v_merged, ks, bi, ki);
                for hi in ki * group..(ki + 1) * group {
                    let pair = bi * h + hi;
                    let (qm, gm) = (qh.at(bi, hi), gh.at(bi, hi));
                    // P is contiguous: the forward made it.
                    let p = &p_all[pair * tq * tk..(pair + 1) * tq * tk];
                    let pm = Mat::rows(p, tk);
                    let u = drop.map(|(rate, u)| (rate, &u[pair * tq * tk..(pair + 1) * tq * tk]));
                    let weights = match u {
                        Some((rate, u)) => {
                            dropped.clear();
                            dropped
                                .extend(p.iter().zip(u).map(|(&p, &u)| p * drop_factor(u, rate)));
                            Mat::rows(&dropped, tk)
                        }
                        None => pm,
                    };
                    // SAFETY: each task writes only its own ∂K, ∂V blocks and its heads' ∂Q
                    // blocks; the inputs are read through their layouts' strides.
                    unsafe {
                        // ∂V += D(P)ᵀ ∂O
                        gemm_into(
                            (tk, d, tq),
                            dv_ptr.at(dv_at),
                            dv_rs,
                            true,
                            weights.t(),
                            gm,
                            1.0,
                            Parallelism::None,
                        );
                        // ∂P = ∂O Vᵀ
                        gemm_into(
                            (tq, tk, d),
                            ds.as_mut_ptr(),
                            tk,
                            false,
                            gm,
                            vm.t(),
                            1.0,
                            Parallelism::None,
                        );
                    }
                    vectorized(
                        #[inline(always)]
                        || {
                            for (i, (ds, p)) in ds
                                .chunks_mut(tk.max(1))
                                .zip(p.chunks(tk.max(1)))
                                .enumerate()
                            {
                                if let Some((rate, u)) = u {
                                    let u = &u[i * tk..(i + 1) * tk];
                                    ds.iter_mut()
                                        .zip(u)
                                        .for_each(|(g, &u)| *g *= drop_factor(u, rate));
                                }
                                let dot = simd::dot(ds, p);
                                ds.iter_mut().zip(p).for_each(|(g, &p)| *g = p * (*g - dot));
                            }
                        },
                    );
                    let dsm = Mat::rows(&ds, tk);
                    let (dq_at, dq_rs) = block(q_merged, qs, bi, hi);
                    // SAFETY: as above.
                    unsafe {
                        // ∂Q = s·∂S K
                        gemm_into(
                            (tq, d, tk),
                            dq_ptr.at(dq_at),
                            dq_rs,
                            false,
                            dsm,
                            km,
                            scale,
                            Parallelism::None,
                        );
                        // ∂K += s·∂Sᵀ Q
                        gemm_into(
                            (tk, d, tq),
                            dk_ptr.at(dk_at),
                            dk_rs,
                            true,
                            dsm.t(),
                            qm,
                            scale,
                            Parallelism::None,
                        );
                    }
                }
            });
            Ok(())
        })?;
        drop(guards);
        let cpu = Device::Cpu;
        Ok((
            Some(Tensor::from_vec(dq, q.shape(), &cpu)?),
            Some(Tensor::from_vec(dk, k.shape(), &cpu)?),
            Some(Tensor::from_vec(dv, v.shape(), &cpu)?),
        ))
    }
}
