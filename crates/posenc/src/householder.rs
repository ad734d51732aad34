//! Keys turned along the sequence by accumulated Householder-like transforms: PaTH's
//! scores (Yang et al., NeurIPS 2025; fla's `naive_path_attn`).
//!
//! Each token `t` carries a transform per key head, read from the data,
//! `H_t = I − β_t w_t w_tᵀ` (`‖w_t‖ = 1`, `β_t ∈ [0, 2]`), and a query sees a key through
//! every transform between them, its own included and the key's not:
//!
//! ```text
//! S_ij = q_iᵀ H_i H_(i−1) ⋯ H_(j+1) k_j          (j ≤ i)
//! ```
//!
//! No per-position factor gives this product (a transform of `β = 1` is not invertible), so
//! the scores are formed here, chunk by chunk, against a **frame**: the earlier keys turned
//! by every transform so far, so that a query turned back to its chunk's start scores
//! against them with one product. A key/value cache keeps that frame, and turning it by a
//! new chunk is a product of rank `chunk` (a rank-one update for one token, as fla decodes).
//! The whole forward is the same algorithm from an empty frame. Attention reads the scores
//! a chunk of queries at a time ([`Householders::score_chunks`]), each chunk against the
//! keys up to its last query, so that it never holds a `(len, len)` matrix.
//!
//! Within a chunk of `m` tokens, the UT transform (the paper's §3):
//!
//! ```text
//! A    = strict_lower(βw · wᵀ)          T = (I + A)⁻¹ = Π_k (I + (−A)^(2^k))
//! S    = tril(q kᵀ) − tril(q wᵀ) · T · strict_lower(βw · kᵀ)      the chunk's own scores
//! q̃    = q − tril(q wᵀ) · T · βw                                  queries turned to its start
//! k̂    = k − (T · strict_lower(βw · kᵀ))ᵀ · w                     keys turned to its end
//! F    ← F − (F · (T · βw)ᵀ) · w,  then F ← [F; k̂]                 the frame turned, extended
//! ```
//!
//! Every step is a product, a sum or a mask, so candle's autograd gives the gradient.

use candle_core::{DType, Tensor, D};

use crate::{Error, Result};

/// The transforms `H_t = I − β_t w_t w_tᵀ` of a run of tokens, per key head.
#[derive(Debug, Clone)]
pub struct Householders {
    /// `(batch, kv_heads, len, head_dim)`, f32, each row of unit length.
    w: Tensor,
    /// `(batch, kv_heads, len)`, f32, in `[0, 2]`.
    beta: Tensor,
    /// Tokens per chunk of the UT transform.
    chunk: usize,
    /// For bidirectional attention, the transforms a query sees keys after it through,
    /// in sequence order: `S_ij = q_iᵀ H'_i H'_(i+1) ⋯ H'_(j−1) k_j` for `j > i` (the
    /// causal form's mirror, the query's own in and the key's out).
    after: Option<Box<Householders>>,
}

/// The name these errors give.
const KIND: &str = "path";

impl Householders {
    /// The transforms of directions `w (batch, kv_heads, len, head_dim)` and strengths
    /// `beta (batch, kv_heads, len)`, in f32.
    ///
    /// # Errors
    /// Shapes that do not match; a `β` outside `[0, 2]` (PaTH's `2·σ(·)` never leaves it:
    /// past it a transform stretches the keys instead of reflecting them) or not finite.
    pub fn new(w: &Tensor, beta: &Tensor) -> Result<Self> {
        let (b, h, n, _) = w.dims4()?;
        if beta.dims() != [b, h, n] {
            return Err(Error::Shape {
                kind: KIND,
                msg: format!(
                    "β {:?} must be (batch, kv_heads, len) of w {:?}",
                    beta.dims(),
                    w.dims()
                ),
            });
        }
        let beta = beta.to_dtype(DType::F32)?;
        let flat = beta.flatten_all()?;
        // The least, the most, and the sum, which a NaN makes NaN where a minimum may skip it.
        let (least, most, total) = match flat.dim(0)? {
            0 => (0.0, 0.0, 0.0),
            _ => (
                flat.min(0)?.to_scalar::<f32>()?,
                flat.max(0)?.to_scalar::<f32>()?,
                flat.sum_all()?.to_scalar::<f32>()?,
            ),
        };
        let bad = [least, most].into_iter().find(|b| !(0.0..=2.0).contains(b));
        if let Some(bad) = bad.or(total.is_nan().then_some(f32::NAN)) {
            return Err(Error::Config(format!(
                "`{KIND}` needs every β in [0, 2] (I − βwwᵀ of a unit w), got {bad}"
            )));
        }
        Ok(Self {
            w: w.to_dtype(DType::F32)?.contiguous()?,
            beta: beta.contiguous()?,
            chunk: 64,
            after: None,
        })
    }

    /// The same transforms, read `chunk` tokens at a time (64 unless told; the chunk is how
    /// the work is cut, not what it computes).
    ///
    /// # Errors
    /// A chunk of 0.
    pub fn with_chunk(self, chunk: usize) -> Result<Self> {
        if chunk == 0 {
            return Err(Error::Zero {
                kind: KIND,
                what: "chunk",
            });
        }
        Ok(Self { chunk, ..self })
    }

    /// The same transforms for the keys before each query, and `after` for the keys after
    /// it (bidirectional attention).
    ///
    /// # Errors
    /// `after` of another shape.
    pub fn with_after(self, after: Householders) -> Result<Self> {
        if after.w.dims() != self.w.dims() {
            return Err(Error::Shape {
                kind: KIND,
                msg: format!(
                    "the transforms after a query {:?} must match those before it {:?}",
                    after.w.dims(),
                    self.w.dims()
                ),
            });
        }
        Ok(Self {
            after: Some(Box::new(after)),
            ..self
        })
    }

    /// The unit vectors `w (batch, kv_heads, len, head_dim)`.
    pub fn w(&self) -> &Tensor {
        &self.w
    }

    /// The strengths `β (batch, kv_heads, len)`.
    pub fn beta(&self) -> &Tensor {
        &self.beta
    }

    /// How many tokens' transforms.
    pub fn len(&self) -> usize {
        self.w.dim(2).unwrap_or(0)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The unscaled scores of queries `q (batch, heads, len, head_dim)` against the keys
    /// of `frame (batch, kv_heads, cached, head_dim)` (the earlier keys, turned by every
    /// transform before these tokens; `None` for none) then against these tokens' own keys
    /// `k (batch, kv_heads, len, head_dim)`, and the frame after them, `(batch, kv_heads,
    /// cached + len, head_dim)`.
    ///
    /// The scores are `(batch, heads, len, cached + len)`; a query's scores on keys after
    /// it are 0, for the causal mask to hide. Query heads are grouped over key heads as
    /// grouped-query attention shares them, `heads / kv_heads` a key head, in order.
    ///
    /// With transforms for the keys after a query ([`Householders::with_after`]), the
    /// scores on those keys are theirs (the same routine over the reversed sequence), and
    /// there is no frame: a cache serves causal attention.
    ///
    /// # Errors
    /// Shapes that do not fit the transforms or one another; a frame with transforms after.
    pub fn scores(
        &self,
        q: &Tensor,
        k: &Tensor,
        frame: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let (before, frame_after) = self.causal_scores(q, k, frame)?;
        let Some(after) = &self.after else {
            return Ok((before, frame_after));
        };
        if frame.is_some() {
            return Err(Error::Config(format!(
                "`{KIND}`: a key/value cache serves causal attention, not transforms of the keys after a query"
            )));
        }
        let n = q.dim(2)?;
        let reversed: Vec<u32> = (0..n as u32).rev().collect();
        let reversed = Tensor::new(reversed.as_slice(), q.device())?;
        let flip = |x: &Tensor, axis: usize| x.contiguous()?.index_select(&reversed, axis);
        let mirror = Householders {
            w: flip(&after.w, 2)?,
            beta: flip(&after.beta, 2)?,
            chunk: self.chunk,
            after: None,
        };
        let (scores, _) = mirror.causal_scores(&flip(q, 2)?, &flip(k, 2)?, None)?;
        let scores = flip(&flip(&scores, 2)?, 3)?;
        let lower = Tensor::tril2(n, DType::F32, q.device())?;
        let upper = (1.0 - &lower)?;
        let combined = (before.broadcast_mul(&lower)? + scores.broadcast_mul(&upper)?)?;
        Ok((combined, frame_after))
    }

    /// [`Householders::scores`] a chunk of queries at a time, in order: each item is the
    /// index of the chunk's first query and the scores `(batch, heads, m, keys)` of its `m`
    /// queries. Causally the keys are those up to the chunk's last query, `cached + start +
    /// m` (the later ones no query of the chunk sees), and attention then never holds more
    /// than one chunk's scores, so its memory grows with `len`, not with its square. With
    /// transforms for the keys after a query the scores are formed whole first, then handed
    /// out the same way, every key in each chunk.
    ///
    /// # Errors
    /// As [`Householders::scores`].
    pub fn score_chunks(
        &self,
        q: &Tensor,
        k: &Tensor,
        frame: Option<&Tensor>,
    ) -> Result<ScoreChunks<'_>> {
        if self.after.is_none() {
            return self.causal_chunks(q, k, frame);
        }
        let (scores, frame) = self.scores(q, k, frame)?;
        Ok(ScoreChunks {
            path: self,
            q: q.clone(),
            k: k.clone(),
            width: frame.dim(2)?,
            frame,
            whole: Some(scores),
            start: 0,
        })
    }

    /// [`Householders::score_chunks`] of the keys up to each query.
    fn causal_chunks(
        &self,
        q: &Tensor,
        k: &Tensor,
        frame: Option<&Tensor>,
    ) -> Result<ScoreChunks<'_>> {
        self.check(q, k)?;
        let (b, kv, _, d) = self.w.dims4()?;
        let contiguous = |x: &Tensor| x.to_dtype(DType::F32)?.contiguous();
        let frame = match frame {
            Some(f) => contiguous(f)?,
            None => Tensor::zeros((b, kv, 0, d), DType::F32, q.device())?,
        };
        Ok(ScoreChunks {
            path: self,
            width: frame.dim(2)? + q.dim(2)?,
            q: contiguous(q)?,
            k: contiguous(k)?,
            frame,
            whole: None,
            start: 0,
        })
    }

    /// [`Householders::scores`] of the keys up to each query, whole.
    fn causal_scores(
        &self,
        q: &Tensor,
        k: &Tensor,
        frame: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let mut chunks = self.causal_chunks(q, k, frame)?;
        let width = chunks.width;
        let rows = chunks
            .by_ref()
            .map(|c| {
                let (_, row) = c?;
                let seen = row.dim(D::Minus1)?;
                Ok(row.pad_with_zeros(D::Minus1, 0, width - seen)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let frame = chunks.into_frame();
        let scores = match rows.len() {
            0 => {
                let (b, heads, _, _) = q.dims4()?;
                Tensor::zeros((b, heads, 0, frame.dim(2)?), DType::F32, q.device())?
            }
            _ => Tensor::cat(&rows, 2)?,
        };
        Ok((scores, frame))
    }

    /// Queries `q` and keys `k` that fit these transforms.
    fn check(&self, q: &Tensor, k: &Tensor) -> Result<()> {
        let (b, kv, n, d) = self.w.dims4()?;
        let (qb, heads, qn, qd) = q.dims4()?;
        if self.chunk == 0 {
            return Err(Error::Zero {
                kind: KIND,
                what: "chunk",
            });
        }
        if k.dims() != [b, kv, n, d] || (qb, qn, qd) != (b, n, d) || heads % kv != 0 {
            return Err(Error::Shape {
                kind: KIND,
                msg: format!(
                    "queries {:?} and keys {:?} must be (batch, heads, len, head_dim) and \
                     (batch, kv_heads, len, head_dim) of the transforms' {:?}, heads a \
                     multiple of kv_heads",
                    q.dims(),
                    k.dims(),
                    self.w.dims()
                ),
            });
        }
        Ok(())
    }

    /// The scores `(batch, heads, m, seen + m)` of queries `start..start + m` against the
    /// `frame` of the `seen` earlier keys and against this chunk's own keys, and the frame
    /// after the chunk.
    fn chunk_scores(
        &self,
        q: &Tensor,
        k: &Tensor,
        frame: &Tensor,
        start: usize,
        m: usize,
    ) -> Result<(Tensor, Tensor)> {
        let (b, kv, _, d) = self.w.dims4()?;
        let heads = q.dim(1)?;
        let group = heads / kv;
        let w = self.w.narrow(2, start, m)?;
        let wb = w.broadcast_mul(&self.beta.narrow(2, start, m)?.unsqueeze(3)?)?;
        let kc = k.narrow(2, start, m)?;
        // The query heads that share a key head, stacked as rows: `(b, kv, g·m, d)`.
        let qc = q.narrow(2, start, m)?.reshape((b, kv, group * m, d))?;
        let device = q.device();
        let with_diagonal = Tensor::tril2(m, DType::F32, device)?;
        let strict = (&with_diagonal - Tensor::eye(m, DType::F32, device)?)?;
        // `x (b, kv, g·m, m)` under a `(m, m)` mask in each query head's block.
        let masked = |x: Tensor, mask: &Tensor| -> Result<Tensor> {
            let x = x.reshape((b, kv, group, m, m))?.broadcast_mul(mask)?;
            Ok(x.reshape((b, kv, group * m, m))?)
        };
        let a = wb.matmul(&w.t()?)?.broadcast_mul(&strict)?;
        let t = unit_lower_inverse(&a, m)?;
        let twbk = t.matmul(&wb.matmul(&kc.t()?)?.broadcast_mul(&strict)?)?;
        let twb = t.matmul(&wb)?;
        let qw = masked(qc.matmul(&w.t()?)?, &with_diagonal)?;
        let own = masked(qc.matmul(&kc.t()?)?, &with_diagonal)?.sub(&qw.matmul(&twbk)?)?;
        let turned_q = qc.sub(&qw.matmul(&twb)?)?;
        let k_hat = kc.sub(&twbk.t()?.matmul(&w)?)?;
        let seen = frame.dim(2)?;
        let mut row = vec![];
        if seen > 0 {
            row.push(turned_q.matmul(&frame.t()?)?);
        }
        row.push(own);
        let row = Tensor::cat(&row, D::Minus1)?.reshape((b, heads, m, seen + m))?;
        let frame = match seen {
            0 => k_hat,
            _ => {
                let turned = frame.matmul(&twb.t()?)?.matmul(&w)?;
                Tensor::cat(&[&frame.sub(&turned)?, &k_hat], 2)?
            }
        };
        Ok((row, frame))
    }
}

/// The scores of queries against turned keys, a chunk of queries at a time
/// ([`Householders::score_chunks`]): `(start, scores (batch, heads, m, keys))` each.
#[derive(Debug)]
pub struct ScoreChunks<'a> {
    path: &'a Householders,
    q: Tensor,
    k: Tensor,
    /// The earlier keys turned by every transform of the chunks read so far.
    frame: Tensor,
    /// Bidirectional scores, formed whole.
    whole: Option<Tensor>,
    /// Every key's count, the cached ones and these.
    width: usize,
    start: usize,
}

impl ScoreChunks<'_> {
    /// The frame after the chunks read so far: every earlier key and theirs, turned by
    /// every transform up to the last chunk read, `(batch, kv_heads, cached + read,
    /// head_dim)`; after them all, what a key/value cache keeps.
    pub fn into_frame(self) -> Tensor {
        self.frame
    }
}

impl Iterator for ScoreChunks<'_> {
    type Item = Result<(usize, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        let (start, n, chunk) = (self.start, self.q.dim(2).ok()?, self.path.chunk);
        if start >= n {
            return None;
        }
        let m = chunk.min(n - start);
        self.start += m;
        let row = match &self.whole {
            Some(scores) => scores.narrow(2, start, m).map_err(Error::from),
            None => {
                let next = self
                    .path
                    .chunk_scores(&self.q, &self.k, &self.frame, start, m);
                next.map(|(row, frame)| {
                    self.frame = frame;
                    row
                })
            }
        };
        Some(row.map(|row| (start, row)))
    }
}

/// `(I + A)⁻¹` of strictly lower-triangular `a (…, m, m)`, by halves:
///
/// ```text
/// [I + A₁₁, 0; A₂₁, I + A₂₂]⁻¹ = [T₁, 0; −T₂ A₂₁ T₁, T₂]
/// ```
///
/// down to blocks of [`SERIES`], each `Σ_(p<m) (−A)^p = Π_k (I + (−A)^(2^k))` (`A^m = 0`).
/// The series alone would do at any size in exact arithmetic, but its terms grow
/// combinatorially with `m` and cancel: at 150 tokens f32 loses every digit.
fn unit_lower_inverse(a: &Tensor, m: usize) -> Result<Tensor> {
    if m > SERIES {
        let h = m / 2;
        let rank = a.rank();
        let block = |rows: (usize, usize), cols: (usize, usize)| -> Result<Tensor> {
            Ok(a.narrow(rank - 2, rows.0, rows.1)?
                .narrow(rank - 1, cols.0, cols.1)?)
        };
        let t1 = unit_lower_inverse(&block((0, h), (0, h))?, h)?;
        let t2 = unit_lower_inverse(&block((h, m - h), (h, m - h))?, m - h)?;
        let t21 = t2.matmul(&block((h, m - h), (0, h))?)?.matmul(&t1)?.neg()?;
        let top = t1.pad_with_zeros(rank - 1, 0, m - h)?;
        let bottom = Tensor::cat(&[&t21, &t2], rank - 1)?;
        return Ok(Tensor::cat(&[&top, &bottom], rank - 2)?);
    }
    let eye = Tensor::eye(m, DType::F32, a.device())?;
    let mut power = a.neg()?;
    let mut inverse = power.broadcast_add(&eye)?;
    let mut reach = 1;
    while 2 * reach < m {
        power = power.matmul(&power)?;
        inverse = (&inverse + inverse.matmul(&power)?)?;
        reach *= 2;
    }
    Ok(inverse)
}

/// The largest block [`unit_lower_inverse`] inverts by its series.
const SERIES: usize = 8;
