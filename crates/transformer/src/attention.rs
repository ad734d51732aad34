//! Scaled dot-product attention over `h` heads ("Attention Is All You Need" §3.2).
//!
//! ```text
//! Attention(Q, K, V) = softmax(QKᵀ/√d_k + B + M) V
//! MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O,   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
//! ```
//!
//! In self-attention the positional encoding may rotate Q and K (RoPE) and supply the bias
//! `B` (ALiBi, T5), which the stack computes once per forward and hands to every layer;
//! `M` is the mask. Cross-attention relates target positions to source
//! positions, which no encoding orders, so it calls no positional hook (as T5 and Marian).
//!
//! The weights follow PyTorch's `nn.MultiheadAttention`: `in_proj_weight (3d, d)` packs
//! `W^Q, W^K, W^V`, with `in_proj_bias` and `out_proj`. In f32 the scale, bias, mask and
//! softmax are one fused kernel with its own backward ([`ops::masked_softmax`]); other
//! dtypes take the differentiable composition.

use std::sync::Arc;

use candle_core::{DType, Tensor, D};
use candle_nn::{init, Init, Linear, VarBuilder};
use posenc::{PositionalEncoding, Positions};

use crate::linear;
use crate::mask::Mask;
use crate::ops;
use crate::{Error, Result};

/// Keys and values computed so far, for incremental decoding.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    kv: Option<(Tensor, Tensor)>,
}

impl KvCache {
    /// Number of positions cached.
    pub fn len(&self) -> usize {
        self.kv.as_ref().map_or(0, |(k, _)| k.dim(2).unwrap_or(0))
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.kv.is_none()
    }

    /// Keeps batch entries `indices` (u32), in that order: beam search reorders hypotheses.
    pub fn select(&mut self, indices: &Tensor) -> Result<()> {
        if let Some((k, v)) = &self.kv {
            self.kv = Some((k.index_select(indices, 0)?, v.index_select(indices, 0)?));
        }
        Ok(())
    }
}

/// Multi-head attention, self or cross.
#[derive(Debug, Clone)]
pub struct MultiHeadAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    out_proj: Linear,
    heads: usize,
    head_dim: usize,
    dropout: f32,
    encoding: Arc<dyn PositionalEncoding>,
}

/// What one attention call returns: the output `(batch, q_len, d_model)` and the weights
/// `(batch, heads, q_len, k_len)`.
pub type Attended = (Tensor, Tensor);

impl MultiHeadAttention {
    /// Loads or creates the projections under `vb` (PyTorch's names). `encoding` supplies
    /// the positional hooks of self-attention.
    pub fn new(
        d_model: usize,
        heads: usize,
        dropout: f32,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let head_dim = posenc::limits::head_dim(d_model, heads)?;
        // Xavier-uniform like PyTorch's _reset_parameters, biases zero.
        let bound = (6.0 / (4 * d_model) as f64).sqrt();
        let w = vb.get_with_hints(
            (3 * d_model, d_model),
            "in_proj_weight",
            Init::Uniform {
                lo: -bound,
                up: bound,
            },
        )?;
        let b = vb.get_with_hints(3 * d_model, "in_proj_bias", init::ZERO)?;
        let part = |i: usize| -> Result<Linear> {
            Ok(Linear::new(
                w.narrow(0, i * d_model, d_model)?,
                Some(b.narrow(0, i * d_model, d_model)?),
            ))
        };
        let (q_proj, k_proj, v_proj) = (part(0)?, part(1)?, part(2)?);
        let out_proj = candle_nn::linear(d_model, d_model, vb.pp("out_proj"))?;
        Ok(Self {
            q_proj,
            k_proj,
            v_proj,
            out_proj,
            heads,
            head_dim,
            dropout,
            encoding,
        })
    }

    /// Self-attention of `x (batch, seq, d_model)` at positions `at`. With a cache, `x`
    /// holds the new positions only; they are appended to the cache and attend to
    /// everything in it. `bias` is the encoding's `(heads, q_len, k_len)` position bias for
    /// these queries and keys ([`posenc::PositionalEncoding::attention_bias`]), if it has one.
    pub fn self_attention(
        &self,
        x: &Tensor,
        at: Positions,
        mask: Option<&Mask>,
        bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        train: bool,
    ) -> Result<Attended> {
        self.check(x, "query")?;
        let q = self.encoding.rotate(&self.project(&self.q_proj, x)?, at)?;
        let k = self.encoding.rotate(&self.project(&self.k_proj, x)?, at)?;
        let v = self.project(&self.v_proj, x)?;
        let (k, v) = match cache {
            Some(cache) => {
                let kv = match cache.kv.take() {
                    Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 2)?, Tensor::cat(&[&pv, &v], 2)?),
                    None => (k, v),
                };
                cache.kv = Some(kv.clone());
                kv
            }
            None => (k, v),
        };
        self.attend(&q, &k, &v, bias, mask, train)
    }

    /// Cross-attention of `x (batch, q_len, d_model)` over `memory (batch, k_len, d_model)`.
    /// With a cache, the memory's keys and values are projected once and reused.
    pub fn cross_attention(
        &self,
        x: &Tensor,
        memory: &Tensor,
        mask: Option<&Mask>,
        cache: Option<&mut KvCache>,
        train: bool,
    ) -> Result<Attended> {
        self.check(x, "query")?;
        self.check(memory, "memory")?;
        let q = self.project(&self.q_proj, x)?;
        let memory_kv = || -> Result<(Tensor, Tensor)> {
            Ok((
                self.project(&self.k_proj, memory)?,
                self.project(&self.v_proj, memory)?,
            ))
        };
        let (k, v) = match cache {
            Some(KvCache { kv: Some(kv) }) => kv.clone(),
            Some(cache) => {
                let kv = memory_kv()?;
                cache.kv = Some(kv.clone());
                kv
            }
            None => memory_kv()?,
        };
        self.attend(&q, &k, &v, None, mask, train)
    }

    /// PyTorch's `nn.MultiheadAttention(query, key, value)` for distinct key and value
    /// inputs, with no positional hooks.
    pub fn forward_qkv(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Mask>,
    ) -> Result<Attended> {
        for (t, name) in [(query, "query"), (key, "key"), (value, "value")] {
            self.check(t, name)?;
        }
        let q = self.project(&self.q_proj, query)?;
        let k = self.project(&self.k_proj, key)?;
        let v = self.project(&self.v_proj, value)?;
        self.attend(&q, &k, &v, None, mask, false)
    }

    fn check(&self, x: &Tensor, what: &str) -> Result<()> {
        let d = self.heads * self.head_dim;
        match x.dims() {
            &[_, _, w] if w == d => Ok(()),
            dims => Err(Error::Input(format!(
                "attention {what} must be (batch, seq, {d}), got {dims:?}"
            ))),
        }
    }

    /// `x W^T + b`, split into heads: `(batch, seq, d_model)` → `(batch, heads, seq, d_k)`.
    fn project(&self, proj: &Linear, x: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        Ok(linear::apply(proj, x)?
            .reshape((b, t, self.heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()?)
    }

    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        bias: Option<&Tensor>,
        mask: Option<&Mask>,
        train: bool,
    ) -> Result<Attended> {
        let (b, _, tq, _) = q.dims4()?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let scores = q.matmul(&k.t()?)?;
        let keep = mask.map(|m| m.broadcast_to(&scores)).transpose()?;
        let weights = if scores.dtype() == DType::F32 {
            // One fused pass: scale, bias, mask, softmax, empty rows to zero.
            match bias {
                Some(bias) => ops::masked_softmax(
                    &(scores * scale)?.broadcast_add(&bias.unsqueeze(0)?)?,
                    keep.as_ref(),
                    1.0,
                )?,
                None => ops::masked_softmax(&scores, keep.as_ref(), scale as f32)?,
            }
        } else {
            let mut scores = (scores * scale)?;
            if let Some(bias) = bias {
                scores = scores.broadcast_add(&bias.to_dtype(scores.dtype())?.unsqueeze(0)?)?;
            }
            if let Some(mask) = mask {
                scores = mask.fill(&scores)?;
            }
            let weights = if scores.track_op() {
                candle_nn::ops::softmax(&scores, D::Minus1)?
            } else {
                candle_nn::ops::softmax_last_dim(&scores)?
            };
            match mask {
                Some(mask) => mask.zero_empty_rows(&weights)?,
                None => weights,
            }
        };
        let dropped = if train && self.dropout > 0.0 {
            candle_nn::ops::dropout(&weights, self.dropout)?
        } else {
            weights.clone()
        };
        let out =
            dropped
                .matmul(v)?
                .transpose(1, 2)?
                .reshape((b, tq, self.heads * self.head_dim))?;
        Ok((linear::apply(&self.out_proj, &out)?, weights))
    }
}
