//! Attention whose scores the encoding forms by turning the keys along the sequence (PaTH,
//! [`posenc::householder`]): a chunk of queries at a time, each chunk's scores against
//! every key weighed and summed before the next chunk's are formed, so that without its
//! weights asked for no `(q_len, k_len)` matrix exists at once.

use candle_core::Tensor;
use posenc::householder::Householders;
use posenc::Decay;

use super::{MultiHeadAttention, ScoreBias};
use crate::kv_cache::DecaySums;
use crate::mask::Mask;
use crate::Result;

/// What turned attention reads beside its queries, keys and values.
pub(super) struct Turned<'a> {
    /// The transforms of the new tokens.
    pub(super) path: &'a Householders,
    /// The earlier keys, turned by every transform before the new tokens (a cache's).
    pub(super) frame: Option<&'a Tensor>,
    /// The position bias of the new queries against every key, `(heads, q_len, k_len)`
    /// or `(batch, heads, q_len, k_len)`.
    pub(super) position: Option<&'a Tensor>,
    /// A forget gate's decay beside the transforms.
    pub(super) decay: Option<DecayRows>,
}

/// A decay's bias, read a chunk of query rows at a time.
pub(super) enum DecayRows {
    /// Causal: the running sums of the queries and of the keys, `c_i − c_j` a score.
    Sums(DecaySums),
    /// Bidirectional: the whole bias, `(batch, heads, q_len, k_len)`, as its scores are.
    Whole(Tensor),
}

impl DecayRows {
    /// The rows of a decay over a sequence and itself.
    pub(super) fn of(decay: &Decay) -> Result<Self> {
        Ok(match decay.after {
            Some(_) => Self::Whole(decay.bias()?),
            None => {
                let sums = Decay::running_sums(&decay.before)?;
                Self::Sums(DecaySums {
                    queries: sums.clone(),
                    keys: sums,
                })
            }
        })
    }

    /// The bias `(batch, heads, m, keys)` of queries `start..start + m` on the first
    /// `keys` keys.
    fn rows(&self, start: usize, m: usize, keys: usize) -> Result<Tensor> {
        Ok(match self {
            Self::Sums(s) => {
                Decay::between(&s.queries.narrow(2, start, m)?, &s.keys.narrow(2, 0, keys)?)?
            }
            Self::Whole(bias) => bias.narrow(2, start, m)?.narrow(3, 0, keys)?,
        })
    }
}

impl MultiHeadAttention {
    /// Attention of projected `q` and `k` (the new tokens') and `v` (every key's), whose
    /// scores `turned.path` forms against `turned.frame` and the new keys
    /// ([`Householders::score_chunks`]): each chunk of queries scaled, biased, masked,
    /// softmaxed and weighed as [`MultiHeadAttention::weigh`] does whole. Returns the
    /// output after `W^O`, the weights if asked for, and the frame after the new tokens.
    pub(super) fn turned(
        &self,
        [q, k, v]: [&Tensor; 3],
        turned: Turned,
        mask: Option<&Mask>,
        weights: bool,
    ) -> Result<(Tensor, Option<Tensor>, Tensor)> {
        let (q, k, v) = (self.split(q)?, self.split(k)?, self.split(v)?);
        let total = v.dim(2)?;
        let mut chunks = turned.path.score_chunks(&q, &k, turned.frame)?;
        let (mut outs, mut kept) = (vec![], vec![]);
        for chunk in chunks.by_ref() {
            // A chunk's scores reach the keys up to its last query (causally) or all of them.
            let (start, scores) = chunk?;
            let (m, keys) = (scores.dim(2)?, scores.dim(3)?);
            let cut = |x: &Tensor| -> Result<Tensor> {
                let rank = x.rank();
                Ok(x.narrow(rank - 2, start, m)?.narrow(rank - 1, 0, keys)?)
            };
            let position = turned.position.map(cut).transpose()?;
            let decay = (turned.decay.as_ref())
                .map(|d| d.rows(start, m, keys))
                .transpose()?;
            let mask = mask
                .map(|mask| mask.rows(start, m)?.keys(keys))
                .transpose()?;
            let bias = ScoreBias::new(position.as_ref(), decay.as_ref());
            let (scores, values) = (scores.to_dtype(q.dtype())?, v.narrow(2, 0, keys)?);
            let rows = q.narrow(2, start, m)?;
            let (out, w) = self.weigh(&rows, scores, &values, bias, mask.as_ref(), true)?;
            outs.push(out);
            if let (true, Some(w)) = (weights, w) {
                kept.push(w.pad_with_zeros(3, 0, total - keys)?);
            }
        }
        let frame = chunks.into_frame();
        let out = match outs.is_empty() {
            true => {
                let (b, heads, _, _) = q.dims4()?;
                let d_v = v.dim(3)?;
                Tensor::zeros((b, 0, heads * d_v), q.dtype(), q.device())?
            }
            false => Tensor::cat(&outs, 1)?,
        };
        let weights = match weights && !kept.is_empty() {
            true => Some(Tensor::cat(&kept, 2)?),
            false => None,
        };
        Ok((self.out_proj.forward(&out)?, weights, frame))
    }
}
