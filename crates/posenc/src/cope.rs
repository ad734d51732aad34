//! `cope`: contextual position encoding (Golovneva, Wang, Weston & Sukhbaatar 2024,
//! "Contextual Position Encoding: Learning to Count What's Important").
//!
//! Positions are counted in the context rather than in tokens: each query opens a gate on
//! every key, and a key's position is how many gates are open between it and the query.
//!
//! ```text
//! g_ij = σ(q_i · k_j / √d)                  gates, from the attention's own logits
//! p_ij = Σ_{t=j..i} g_it                   a fractional position, at most max_pos − 1
//! e[p] = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋]   learned embeddings e[0 … max_pos−1]
//! bias_ij = q_i · e[p_ij]
//! ```
//!
//! The bias depends on the queries' and keys' contents, so this encoding acts through the
//! score hook, [`PositionalEncoding::score_bias`]: attention forms its logits (scaled scores,
//! any position bias, masked keys at the most negative value, so their gates are 0) and asks
//! for the bias to add to them. As in the paper's appendix and x-transformers, `q_i · e[p]`
//! is computed for the integer positions and interpolated (one `(q_len, max_pos)` product
//! instead of a `(q_len, k_len, head_dim)` gather); `e` is shared by the heads and starts
//! at zero, so an untrained model has no bias.
//!
//! The paper defines CoPE for causal attention, where the sum runs from the key to the
//! query. In an encoder the sum runs between them in either order, `Σ_{t=min(i,j)..max(i,j)}
//! g_it` (this crate's extension; the paper and x-transformers have no bidirectional form).
//! The logits must then be a self-attention's own, a query `i` at key `i`.
//!
//! Weights: `pos_emb`, `(max_pos, head_dim)`, x-transformers' name and layout.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{Form, Index, PositionalEncoding, Table};
use crate::{Capabilities, ScoreContext};
use crate::{Direction, EncodingSpec, Error, Result, Target};

/// The settings of `cope`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CopeConfig {
    /// How many integer positions have an embedding; positions past the last share it.
    #[serde(default = "CopeConfig::default_max_pos")]
    pub max_pos: usize,
}

impl Default for CopeConfig {
    fn default() -> Self {
        Self {
            max_pos: Self::default_max_pos(),
        }
    }
}

impl CopeConfig {
    fn default_max_pos() -> usize {
        64
    }
}

impl EncodingSpec for CopeConfig {
    const KIND: &'static str = "cope";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let head_dim = target.head_dim()?;
        Ok(Arc::new(Cope::new(
            self.max_pos,
            head_dim,
            target.direction,
            vb,
        )?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        let head_dim = target.head_dim().unwrap_or(0);
        self.max_pos as u128 * head_dim as u128
    }
}

/// Contextual positions, one embedding table shared by the heads.
#[derive(Debug)]
pub struct Cope {
    pos_emb: Tensor,
    direction: Direction,
    device: Device,
}

impl Cope {
    /// Loads or creates `pos_emb` `(max_pos, head_dim)` (zeros) under `vb`.
    ///
    /// # Errors
    /// `max_pos` or `head_dim` zero or past [`crate::limits`].
    pub fn new(
        max_pos: usize,
        head_dim: usize,
        direction: Direction,
        vb: VarBuilder,
    ) -> Result<Self> {
        crate::limits::check_positive("max_pos", max_pos, crate::limits::MAX_POSITIONS)?;
        crate::limits::check_positive("head_dim", head_dim, crate::limits::MAX_D_MODEL)?;
        Ok(Self {
            pos_emb: vb.get_with_hints((max_pos, head_dim), "pos_emb", Init::Const(0.0))?,
            direction,
            device: vb.device().clone(),
        })
    }

    /// The contextual positions `p_ij` `(batch, heads, q_len, k_len)` of masked `logits`,
    /// before clamping.
    pub fn positions(&self, logits: &Tensor) -> Result<Tensor> {
        let gates = candle_nn::ops::sigmoid(&logits.to_dtype(DType::F32)?)?;
        let k_len = gates.dim(D::Minus1)?;
        match self.direction {
            // Σ_{t ≥ j} g_it: later keys are masked, their gates 0.
            Direction::Causal => suffix_sums(&gates),
            Direction::Bidirectional => {
                let q_len = gates.dim(D::Minus2)?;
                if q_len != k_len {
                    return Err(Error::Shape {
                        kind: CopeConfig::KIND,
                        msg: format!(
                            "bidirectional CoPE counts within a self-attention's own {q_len} \
                             tokens, got logits against {k_len} keys"
                        ),
                    });
                }
                // C_j = Σ_{t ≤ j} g_it = Σ_t g_it − Σ_{t ≥ j} g_it + g_ij, and the query's own
                // C_i and g_ii on the diagonal.
                let total = gates.sum_keepdim(D::Minus1)?;
                let prefix = (suffix_sums(&gates)?.broadcast_sub(&total)?.neg()? + &gates)?;
                let eye = Tensor::eye(k_len, DType::F32, &self.device)?;
                let own = |t: &Tensor| t.broadcast_mul(&eye)?.sum_keepdim(D::Minus1);
                let (c_i, g_i) = (own(&prefix)?, own(&gates)?);
                let before = (prefix.broadcast_sub(&c_i)?.neg()? + &gates)?; // j ≤ i
                let after = prefix.broadcast_sub(&c_i)?.broadcast_add(&g_i)?; // j > i
                let earlier =
                    Tensor::tril2(k_len, DType::U8, &self.device)?.broadcast_as(gates.shape())?;
                Ok(earlier.where_cond(&before, &after)?)
            }
        }
    }

    /// The bias `q_i · e[p_ij]` for queries `q (batch, heads, q_len, head_dim)` and masked
    /// `logits (batch, heads, q_len, k_len)`, differentiable in both and in `pos_emb`.
    pub fn bias(&self, q: &Tensor, logits: &Tensor) -> Result<Tensor> {
        let max_pos = self.pos_emb.dim(0)?;
        let pos = self.positions(logits)?.clamp(0f32, (max_pos - 1) as f32)?;
        let q = q.to_dtype(DType::F32)?;
        let at_integers = q.broadcast_matmul(&self.pos_emb.to_dtype(DType::F32)?.t()?)?;
        let floor = pos.detach().floor()?;
        let ceil = pos.detach().ceil()?;
        let take = |at: &Tensor| -> Result<Tensor> {
            let index = at.to_dtype(DType::U32)?.contiguous()?;
            Ok(at_integers.contiguous()?.gather(&index, D::Minus1)?)
        };
        let w = (&pos - &floor)?;
        let bias = ((take(&ceil)? * &w)? + (take(&floor)? * w.affine(-1.0, 1.0)?)?)?;
        Ok(bias)
    }
}

/// `Σ_{t ≥ j} x_t` along the last axis, in blocks of 64: a triangular product within each
/// block and one across the blocks' sums, so memory and work per row grow as
/// `k·64 + (k/64)²` rather than with a `(k, k)` matrix.
fn suffix_sums(x: &Tensor) -> Result<Tensor> {
    const BLOCK: usize = 64;
    let (dims, device) = (x.dims(), x.device());
    let (rows, k) = (&dims[..dims.len() - 1], dims[dims.len() - 1]);
    let blocks = k.div_ceil(BLOCK);
    let padded = x.pad_with_zeros(D::Minus1, 0, blocks * BLOCK - k)?;
    let blocked = padded.reshape([rows, &[blocks, BLOCK]].concat())?;
    let within = blocked.broadcast_matmul(&Tensor::tril2(BLOCK, DType::F32, device)?)?;
    // Keys in later blocks: the sums of blocks b' > b.
    let later_blocks =
        (Tensor::tril2(blocks, DType::F32, device)? - Tensor::eye(blocks, DType::F32, device)?)?;
    let later = blocked
        .sum(D::Minus1)?
        .unsqueeze(D::Minus2)?
        .broadcast_matmul(&later_blocks)?
        .squeeze(D::Minus2)?;
    let sums = within.broadcast_add(&later.unsqueeze(D::Minus1)?)?;
    Ok(sums.reshape(padded.dims())?.narrow(D::Minus1, 0, k)?)
}

impl PositionalEncoding for Cope {
    fn kind(&self) -> &'static str {
        CopeConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reads_scores: true,
            ..Capabilities::default()
        }
    }

    fn score_bias(&self, cx: &ScoreContext) -> Result<Option<Tensor>> {
        Ok(Some(self.bias(cx.q, cx.logits)?))
    }

    /// The bias of one head for queries and keys that are all the same vector, so every
    /// gate is σ(1) and positions grow by 0.73 per token, with the positions as the index.
    fn table(&self, len: usize) -> Result<Table> {
        let head_dim = self.pos_emb.dim(1)?;
        let unit = (Tensor::ones((1, 1, len, head_dim), DType::F32, &self.device)?
            / (head_dim as f64).sqrt())?;
        let mut logits = Tensor::ones((1, 1, len, len), DType::F32, &self.device)?;
        if self.direction == Direction::Causal {
            let later = Tensor::triu2(len, DType::U8, &self.device)?.sub(&Tensor::eye(
                len,
                DType::U8,
                &self.device,
            )?)?;
            let min = Tensor::full(f32::MIN, (len, len), &self.device)?;
            logits = later
                .where_cond(&min, &logits.squeeze(0)?.squeeze(0)?)?
                .reshape((1, 1, len, len))?;
        }
        let bias = self.bias(&unit, &logits)?.squeeze(0)?;
        let positions = self.positions(&logits)?.squeeze(0)?.squeeze(0)?;
        Ok(Table {
            title: "bias = q · e[p], p = Σ σ(logit) from key to query; every logit 1, q = 1/√d"
                .into(),
            form: Form::Bias {
                bias,
                index: Some(Index {
                    name: "⌊p⌋".into(),
                    values: positions.floor()?.to_dtype(DType::U32)?,
                }),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked sums equal the plain triangular product, across ragged blocks.
    #[test]
    fn blocked_suffix_sums_equal_the_triangular_product() {
        let dev = Device::Cpu;
        for k in [1, 63, 64, 65, 150] {
            let x = Tensor::rand(0f32, 1f32, (2, 3, k), &dev).unwrap();
            let plain = x
                .broadcast_matmul(&Tensor::tril2(k, DType::F32, &dev).unwrap())
                .unwrap();
            let blocked = suffix_sums(&x).unwrap();
            let diff = (plain - blocked).unwrap().abs().unwrap().max_all().unwrap();
            assert!(diff.to_scalar::<f32>().unwrap() < 1e-4, "k = {k}");
        }
    }
}
