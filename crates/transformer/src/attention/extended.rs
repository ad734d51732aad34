//! Self-extend's engine (Jin et al. 2024): near keys read at their own positions, far ones
//! at grouped positions, in one softmax ([`SelfExtend`]).

use candle_core::Tensor;
use posenc::{Positions, RotateContext};

use super::cached::dense;
use super::{MultiHeadAttention, ScoreBias};
use crate::kv_cache::KvCache;
use crate::mask::Mask;
use crate::self_extend::{self, SelfExtend};
use crate::{Error, Result};

/// Queries taken at once by attention with self-extend: its scores span this many rows.
const SELF_EXTEND_ROWS: usize = 64;

impl MultiHeadAttention {
    /// Reads far keys at grouped positions from now on ([`SelfExtend`]), or as they are
    /// (`None`).
    pub(crate) fn set_self_extend(&mut self, self_extend: Option<SelfExtend>) {
        self.self_extend = self_extend;
    }

    /// The same attention with self-extend ([`SelfExtend`]): its encoding must rotate
    /// ([`crate::self_extend::check_encoding`]; [`crate::LanguageModel::with_self_extend`]
    /// checks it for a whole model).
    pub fn with_self_extend(mut self, self_extend: SelfExtend) -> Self {
        self.set_self_extend(Some(self_extend));
        self
    }

    /// Self-attention with self-extend ([`SelfExtend`]) of the projected, unrotated `q`, `k`,
    /// `v (batch, new, ·)` of tokens at `offset, offset + 1, …`, after what `cache` holds
    /// (which keeps keys unrotated), under `mask (…, new, offset + new)`: every key is
    /// rotated at its own position and at its group's, and the queries, 64 at a time, read
    /// the near keys one way and the far ones the other, in one softmax.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn self_extended(
        &self,
        se: SelfExtend,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        offset: usize,
        mask: Option<&Mask>,
        cache: Option<&mut KvCache>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let encoding = self.encoding.as_ref().ok_or_else(|| {
            Error::Config("self-extend needs a rotary encoding; attention holds none".into())
        })?;
        let (k, v) = match cache {
            Some(cache) if cache.rolls().is_some() => {
                return Err(Error::Input(
                    "self-extend and a rolling key/value cache each move far keys: use one".into(),
                ))
            }
            Some(cache) => {
                let (k, v, _) = self.append(cache, k, v, None)?;
                (dense(&k, q)?, dense(&v, q)?)
            }
            None => (self.split(k)?, self.split(v)?),
        };
        let (q, keys) = (self.split(q)?, k.dim(2)?);
        let grouped = self_extend::positions(0..keys, |j| se.key_position(j))?;
        let near_k = encoding.rotate(&k, &RotateContext::key(0))?;
        let far_k = encoding.rotate(&k, &RotateContext::key(Positions::At(&grouped)))?;
        let (mut outs, mut weights) = (Vec::new(), Vec::new());
        for start in (0..q.dim(2)?).step_by(SELF_EXTEND_ROWS) {
            let len = SELF_EXTEND_ROWS.min(q.dim(2)? - start);
            let rows = offset + start..offset + start + len;
            let part = q.narrow(2, start, len)?;
            let near_q = encoding.rotate(&part, &RotateContext::query(rows.start))?;
            let at = self_extend::positions(rows.clone(), |i| se.query_position(i))?;
            let far_q = encoding.rotate(&part, &RotateContext::query(Positions::At(&at)))?;
            // Keys before `a` are far for every query of these rows, from `b` on near.
            let (a, b) = se.bands(rows.clone(), keys);
            let far = self.scores(&far_q, &far_k.narrow(2, 0, b)?)?;
            let near = self.scores(&near_q, &near_k.narrow(2, a, keys - a)?)?;
            let pick: Vec<u8> = (rows.clone())
                .flat_map(|i| (a..b).map(move |j| u8::from(j > i || se.near(i, j))))
                .collect();
            let pick = Tensor::from_vec(pick, (1, 1, len, b - a), q.device())?;
            let band_near = near.narrow(3, 0, b - a)?;
            let band = (pick.broadcast_as(band_near.shape())?)
                .where_cond(&band_near, &far.narrow(3, a, b - a)?)?;
            let parts = [far.narrow(3, 0, a)?, band, near.narrow(3, b - a, keys - b)?];
            let parts: Vec<&Tensor> = parts
                .iter()
                .filter(|t| t.dim(3).is_ok_and(|n| n > 0))
                .collect();
            let scores = Tensor::cat(&parts, 3)?;
            let mask = mask.map(|m| m.rows(start, len)).transpose()?;
            let bias = ScoreBias::default();
            let (out, w) = self.weigh(&near_q, scores, &v, bias, mask.as_ref(), true)?;
            outs.push(out);
            weights.extend(w);
        }
        // `weigh` gives every slice its weights: one per slice of rows.
        let weights = match weights.is_empty() {
            true => None,
            false => Some(Tensor::cat(&weights, 2)?),
        };
        // W^O once over every row, as attention without self-extend applies it (a quantized
        // product may take another path for fewer rows).
        Ok((self.out_proj.forward(&Tensor::cat(&outs, 1)?)?, weights))
    }
}
