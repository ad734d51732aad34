//! Attention over sequences packed end to end, without their padding, at inference.
//!
//! ```text
//! for each sequence s (rows r_s .. r_s + n_s) and head i:
//!     O[s, i] = softmax(scale · Q[s, i] K[s, i]ᵀ + B[i, :n_s, :n_s]) V[s, i]
//! ```
//!
//! A batch of sentences padded to the longest spends every product on its padding rows;
//! here the rows are the real tokens only, one sequence after another, and each attends to
//! its own keys. Nothing is masked, so no row is ever empty. The weights are not kept:
//! there is no backward (training takes [`super::attention`]).

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

use super::attention::{cpu_f32, Qkv};
use super::matmul::{gemm_into, Mat, OutPtr};
use super::simd::vectorized;
use super::softmax::softmax_row;

/// The packed self-attention of [`crate::cpu::packed_attention`] where it runs: f32 on the
/// CPU with no gradient to track. `None` elsewhere, where the caller takes each sequence in
/// turn through the ordinary path.
///
/// # Shapes
/// As [`crate::cpu::packed_attention`].
///
/// # Errors
/// As [`crate::cpu::packed_attention`], where it runs.
pub fn packed_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    head_dim: usize,
    lens: &[usize],
    bias: Option<&Tensor>,
    scale: f32,
) -> Result<Option<Tensor>> {
    let runs =
        q.dtype() == DType::F32 && q.device().is_cpu() && ![q, k, v].iter().any(|t| t.track_op());
    if !runs {
        return Ok(None);
    }
    packed_attention_cpu(q, k, v, head_dim, lens, bias, scale).map(Some)
}

/// `O (1, n, h·d)`: self-attention within each of the sequences whose lengths are `lens`,
/// packed one after another along the rows of `q (1, n, h·d)` and `k, v (1, n, kv·d)`
/// (heads merged, as a projection leaves them, any strides; `d = head_dim`). Scores are
/// scaled by `scale`; `bias (h, t, t)` (f32, `t` at least the longest sequence), if given,
/// adds its top-left `(n_s, n_s)` block to sequence `s`'s scores: every sequence starts at
/// position 0. Query head `i` reads key/value head `i / (h / kv)`. f32 on the CPU, at
/// inference.
///
/// # Errors
/// Other dtypes or devices; inputs that carry a gradient (there is no backward); lengths
/// that do not add up to `n`; shapes that do not fit together; a bias too small.
pub fn packed_attention_cpu(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    head_dim: usize,
    lens: &[usize],
    bias: Option<&Tensor>,
    scale: f32,
) -> Result<Tensor> {
    let packed = |t: &Tensor| match *t.dims() {
        [1, n, w] if head_dim > 0 && w % head_dim == 0 => Some((n, w / head_dim)),
        _ => None,
    };
    let (Some((n, h)), Some((kn, kv)), Some(vs)) = (packed(q), packed(k), packed(v)) else {
        candle_core::bail!(
            "packed attention: q {:?}, k {:?}, v {:?} must each be (1, tokens, heads·{head_dim})",
            q.dims(),
            k.dims(),
            v.dims()
        );
    };
    if kn != n || vs != (n, kv) || kv == 0 || h % kv != 0 {
        candle_core::bail!(
            "packed attention: q {:?}, k {:?}, v {:?} must be (1, n, h·d), (1, n, kv·d) twice, kv dividing h",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    check_inference("packed attention", [q, k, v])?;
    let total: usize = lens.iter().sum();
    if total != n {
        candle_core::bail!(
            "packed attention: the sequences' lengths add up to {total}, but there are {n} tokens"
        );
    }
    let longest = lens.iter().copied().max().unwrap_or(0);
    let bias = bias
        .map(|b| match *b.dims() {
            [bh, t, t2] if bh == h && t == t2 && t >= longest && b.dtype() == DType::F32 => {
                Ok((b.contiguous()?, t))
            }
            _ => candle_core::bail!(
                "packed attention: the bias {:?} must be f32 ({h}, t, t) with t ≥ {longest}",
                b.dims()
            ),
        })
        .transpose()?;
    if n == 0 {
        return Tensor::zeros((1, 0, h * head_dim), DType::F32, q.device());
    }
    let op = PackedAttention {
        head_dim,
        scale,
        lens: lens.to_vec(),
        bias,
    };
    q.apply_op3_no_bwd(k, v, &op)
}

/// Checks that the inputs of an inference-only op `name` are f32 on the CPU and carry no
/// gradient (the op has no backward).
pub(super) fn check_inference(name: &str, inputs: [&Tensor; 3]) -> Result<()> {
    for t in inputs {
        if t.dtype() != DType::F32 || !t.device().is_cpu() {
            candle_core::bail!("{name} takes f32 tensors on the CPU");
        }
        if t.track_op() {
            candle_core::bail!("{name} is for inference: its inputs carry a gradient");
        }
    }
    Ok(())
}

/// The op: the lengths, the scale, and the bias with its side.
struct PackedAttention {
    head_dim: usize,
    scale: f32,
    lens: Vec<usize>,
    bias: Option<(Tensor, usize)>,
}

impl CustomOp3 for PackedAttention {
    fn name(&self) -> &'static str {
        "packed-attention"
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
            shapes: ([_, h, n, d], _),
            group,
        } = Qkv::new(self.head_dim, [(s1, l1), (s2, l2), (s3, l3)])?;
        let bias_guard = self
            .bias
            .as_ref()
            .map(|(b, t)| (b.storage_and_layout(), *t));
        let bias = match &bias_guard {
            Some(((s, l), t)) => {
                let data = cpu_f32(s, "the bias")?;
                Some((&data[l.start_offset()..], *t))
            }
            None => None,
        };
        let starts: Vec<usize> = self
            .lens
            .iter()
            .scan(0, |at, &len| {
                let start = *at;
                *at += len;
                Some(start)
            })
            .collect();
        let mut out: Vec<f32> = Vec::with_capacity(n * h * d);
        let dst = OutPtr(out.as_mut_ptr());
        // One task per (sequence, head); the weights of a pair live only in its task.
        (0..self.lens.len() * h).into_par_iter().for_each(|pair| {
            let (s, hi) = (pair / h, pair % h);
            let (start, len) = (starts[s], self.lens[s]);
            if len == 0 {
                return;
            }
            let (qm, km, vm) = (
                q.at(0, hi).skip_rows(start),
                k.at(0, hi / group).skip_rows(start),
                v.at(0, hi / group).skip_rows(start),
            );
            let mut p: Vec<f32> = Vec::with_capacity(len * len);
            // SAFETY: `p` has room for the (len, len) scores, written whole by gemm; Q and
            // K are read through their layouts' strides, from this sequence's first row.
            unsafe {
                gemm_into(
                    (len, len, d),
                    p.spare_capacity_mut().as_mut_ptr().cast::<f32>(),
                    len,
                    false,
                    qm,
                    km.t(),
                    self.scale,
                    Parallelism::None,
                );
                p.set_len(len * len);
            }
            vectorized(
                #[inline(always)]
                || {
                    for (i, row) in p.chunks_mut(len).enumerate() {
                        if let Some((b, t)) = bias {
                            let at = (hi * t + i) * t;
                            row.iter_mut()
                                .zip(&b[at..at + len])
                                .for_each(|(y, b)| *y += b);
                        }
                        softmax_row(row, None, None, 1.0);
                    }
                },
            );
            // SAFETY: this pair writes columns `hi·d .. (hi+1)·d` of its sequence's rows of
            // `out`, which no other pair writes.
            unsafe {
                gemm_into(
                    (len, d, len),
                    dst.at(start * h * d + hi * d),
                    h * d,
                    false,
                    Mat::rows(&p, len),
                    vm,
                    1.0,
                    Parallelism::None,
                )
            };
        });
        // SAFETY: the lengths add up to `n` (checked by the wrapper), and every (sequence,
        // head) pair wrote its `len · d` elements: all of `out`.
        unsafe { out.set_len(n * h * d) };
        Ok((CpuStorage::F32(out), Shape::from((1, n, h * d))))
    }
}
