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
//! `W^Q, W^K, W^V`, with `in_proj_bias` and `out_proj`; a checkpoint that holds them apart
//! (`q_proj`, `k_proj`, `v_proj`, as Hugging Face's) loads as it is.
//!
//! The products, the softmax and attention itself are calls to [`posenc_kernels`], which
//! picks the path for the device and dtype: attention without a score bias is one op with
//! its own backward ([`kernels::attention`]), reading the projections with their heads
//! still merged; with a bias, the weights are [`kernels::attention_softmax`].

mod cached;
mod extended;
mod init;
mod input;
mod packed;
mod turned;
mod weigh;

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::VarBuilder;
use posenc::{
    Capabilities, FromInput, InputContext, PositionalEncoding, Positions, Role, RotateContext,
};
use posenc_kernels as kernels;

pub use input::{Attended, AttentionInput, Source};
pub(crate) use packed::check_packed;
use turned::{DecayRows, Turned};
use weigh::ScoreBias;

use crate::dropout;
use crate::kv_cache::KvCache;
use crate::linear::Proj;
use crate::mask::Mask;
use crate::self_extend::SelfExtend;
use crate::{BlockConfig, Error, Result};

/// Multi-head attention, self or cross. Self-attention holds the positional encoding;
/// cross-attention relates two sequences that no encoding orders, and holds none.
#[derive(Debug, Clone)]
pub struct MultiHeadAttention {
    q_proj: Proj,
    k_proj: Proj,
    v_proj: Proj,
    out_proj: Proj,
    heads: usize,
    head_dim: usize,
    dropout: f32,
    encoding: Option<Arc<dyn PositionalEncoding>>,
    /// What the encoding declares, read once when it is given.
    caps: Capabilities,
    /// Self-extend's grouped reading of far keys, when set ([`SelfExtend`]).
    self_extend: Option<SelfExtend>,
}

impl MultiHeadAttention {
    /// Attention as `cfg` describes it: its width, heads, key/value heads, biases and
    /// dropout. `encoding` supplies the positional hooks of self-attention (`None` for
    /// cross-attention).
    ///
    /// The projections load from PyTorch's packed `in_proj_weight ((heads + 2·kv_heads)·d_k,
    /// d_model)` (with `in_proj_bias` if `cfg.bias`), or from `q_proj`, `k_proj` and
    /// `v_proj` when `vb` holds those and no packed one; a new model creates the packed
    /// form. Then `out_proj`.
    ///
    /// # Errors
    /// Heads that do not divide the width; missing or mis-shaped weights.
    pub fn new(
        cfg: &BlockConfig,
        encoding: Option<Arc<dyn PositionalEncoding>>,
        vb: VarBuilder,
    ) -> Result<Self> {
        cfg.validate()?;
        let [q_proj, k_proj, v_proj, out_proj] = init::projections(cfg, &vb)?;
        Ok(Self {
            q_proj,
            k_proj,
            v_proj,
            out_proj,
            heads: cfg.heads,
            head_dim: cfg.head_dim(),
            dropout: cfg.dropout,
            caps: encoding
                .as_ref()
                .map(|e| e.capabilities())
                .unwrap_or_default(),
            encoding,
            self_extend: None,
        })
    }

    /// Replaces the positional encoding of self-attention.
    pub(crate) fn set_encoding(&mut self, encoding: Arc<dyn PositionalEncoding>) {
        self.caps = encoding.capabilities();
        self.encoding = Some(encoding);
    }

    /// The projections `W^Q, W^K, W^V, W^O`, named `q`, `k`, `v`, `out`: to swap in
    /// quantized weights ([`Proj::quantize`]).
    pub fn projections_mut(&mut self) -> [(&'static str, &mut Proj); 4] {
        [
            ("q", &mut self.q_proj),
            ("k", &mut self.k_proj),
            ("v", &mut self.v_proj),
            ("out", &mut self.out_proj),
        ]
    }

    /// Attention of the queries `input.x` over the keys and values its
    /// [`Source`] names, under its mask, with its cache; the weights only if asked for.
    ///
    /// Self-attention with a cache, no mask and no weights asked for is causal over the
    /// cached positions and the new ones, at the cache's positions
    /// ([`KvCache::read_until`]); where the kernels can it runs as [`kernels::flash_attention`], so
    /// memory grows with the cache, not with its square, and the encoding's bias is asked
    /// for tile by tile.
    ///
    /// # Shapes
    /// - `input.x`: `(batch, q_len, d_model)`
    /// - memory, keys, values: `(batch, k_len, d_model)`
    /// - output: `(batch, q_len, d_model)`; weights `(batch, heads, q_len, k_len)`
    ///
    /// # Errors
    /// Inputs of the wrong width; a batch that differs from the cache's.
    pub fn forward(&self, input: AttentionInput) -> Result<Attended> {
        let AttentionInput {
            x,
            source,
            mask,
            cache,
            weights,
        } = input;
        self.check(x, "query")?;
        let (output, w) = match (source, cache) {
            (Source::Own { bias: None, .. }, Some(cache)) if mask.is_none() && !weights => {
                (self.cached_self_attention(x, cache)?, None)
            }
            (Source::Own { at, bias }, cache) => {
                self.self_attention(x, at, mask, bias, cache, weights)?
            }
            (Source::Memory(memory), cache) => self.cross_attention(x, memory, mask, cache)?,
            (Source::KeysValues(key, value), _) => self.forward_qkv(x, key, value, mask)?,
        };
        Ok(Attended {
            output,
            weights: weights.then_some(w).flatten(),
        })
    }

    /// Self-attention of `x` at positions `at`, after what `cache` holds if there is one;
    /// the weights if asked for, or where the path forms them anyway.
    fn self_attention(
        &self,
        x: &Tensor,
        at: Positions,
        mask: Option<&Mask>,
        bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        weights: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        self.check(x, "query")?;
        let [q, k, v] = Proj::forward_fused([&self.q_proj, &self.k_proj, &self.v_proj], x)?;
        if let Some(se) = self.self_extend {
            let Positions::From(offset) = at else {
                return Err(Error::Input(
                    "self-extend reads tokens at consecutive positions".into(),
                ));
            };
            return self.self_extended(se, &q, &k, &v, offset, mask, cache);
        }
        let q = self.rotate(&q, at, Role::Query)?;
        let k = self.rotate(&k, at, Role::Key)?;
        if let Some(cache) = cache {
            return self.masked_cached(cache, x, [&q, &k, &v], at, mask, bias, weights);
        }
        let read = self.read_input(InputContext::new(x))?;
        if let Some(path) = &read.transforms {
            let decay = read.decay.as_ref().map(DecayRows::of).transpose()?;
            let turned = Turned {
                path,
                frame: None,
                position: bias,
                decay,
            };
            let (out, w, _) = self.turned([&q, &k, &v], turned, mask, weights)?;
            return Ok((out, w));
        }
        let decay = read.decay.map(|d| d.bias()).transpose()?;
        self.attend(&q, &k, &v, ScoreBias::new(bias, decay.as_ref()), mask, true)
    }

    /// Cross-attention of `x` over `memory`; with a cache, the memory's keys and values are
    /// projected once and reused.
    fn cross_attention(
        &self,
        x: &Tensor,
        memory: &Tensor,
        mask: Option<&Mask>,
        cache: Option<&mut KvCache>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        self.check(memory, "memory")?;
        let q = self.q_proj.forward(x)?;
        let memory_kv = || -> Result<(Tensor, Tensor)> {
            Ok((self.k_proj.forward(memory)?, self.v_proj.forward(memory)?))
        };
        let (k, v) = match cache {
            Some(cache) => match cache.get()? {
                Some(kv) => kv,
                None => {
                    let (k, v) = memory_kv()?;
                    cache.append(&self.split(&k)?, &self.split(&v)?)?
                }
            },
            None => memory_kv()?,
        };
        self.attend(&q, &k, &v, ScoreBias::default(), mask, false)
    }

    /// Attention over distinct key and value inputs, with no positional hooks.
    fn forward_qkv(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Mask>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        for (t, name) in [(query, "query"), (key, "key"), (value, "value")] {
            self.check(t, name)?;
        }
        let q = self.q_proj.forward(query)?;
        let k = self.k_proj.forward(key)?;
        let v = self.v_proj.forward(value)?;
        self.attend(&q, &k, &v, ScoreBias::default(), mask, false)
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

    /// A projection `(batch, seq, heads·d_k)` split into its heads,
    /// `(batch, heads, seq, d_k)`: a strided view (no copy). Split heads pass through.
    ///
    /// Projections stay merged until something needs the heads apart (a rotation, the
    /// cache, the composite path): the fused attention reads them either way, and every
    /// reshape or transpose would be a graph node whose gradient candle zeroes and adds.
    fn split(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match *x.dims() {
            [b, t, hd] => x
                .reshape((b, t, hd / self.head_dim, self.head_dim))?
                .transpose(1, 2)?,
            _ => x.clone(),
        })
    }

    /// The encoding's rotation of projected queries or keys `(batch, seq, heads·d_k)` at
    /// positions `at`, on their heads; handed on merged, as they came, if the encoding
    /// does not rotate.
    fn rotate(&self, x: &Tensor, at: Positions, role: Role) -> Result<Tensor> {
        match &self.encoding {
            Some(encoding) if self.caps.rotates => {
                Ok(encoding.rotate(&self.split(x)?, &RotateContext { at, role })?)
            }
            _ => Ok(x.clone()),
        }
    }

    /// Scaled dot-product attention of projected `q`, `k`, `v` with the encoding's `bias`
    /// (position and decay) and, for self-attention (`own`) under an encoding that reads
    /// the scores, its [`score_bias`](posenc::PositionalEncoding::score_bias) on the
    /// logits. Returns the output and the weights (which the fused path keeps for its
    /// backward anyway).
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        bias: ScoreBias,
        mask: Option<&Mask>,
        own: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let (b, h, tq, d_k) = self.split(q)?.dims4()?;
        let d_v = self.split(v)?.dim(3)?;
        let scale = self.scale();
        let k_len = self.split(k)?.dim(2)?;
        let dropout = dropout::active(q, self.dropout);
        // Scores the fused op cannot form: a bias beside them, or ones the encoding reads.
        let composite =
            bias.position.is_some() || bias.decay.is_some() || own && self.whole_scores();
        if !composite && d_k == d_v {
            // One op for scores, mask, softmax, dropout and weighted sum, heads merged: the
            // CPU's kernel in f32, candle's ops under one node elsewhere.
            let sample = dropout
                .then(|| dropout::uniform((b, h, tq, k_len), q.device()))
                .transpose()?
                .map(|u| (self.dropout, u));
            let keep = mask
                .map(|m| m.broadcast_to_shape(&[b, h, tq, k_len]))
                .transpose()?;
            let (out, weights) =
                kernels::attention(q, k, v, d_k, keep.as_ref(), scale as f32, sample)?;
            return Ok((self.out_proj.forward(&out)?, Some(weights)));
        }
        let (out, weights) = self.weigh(q, self.scores(q, k)?, v, bias, mask, own)?;
        Ok((self.out_proj.forward(&out)?, weights))
    }

    /// The scale of the scores, `1/√d_k`: the one place it is computed.
    fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }

    /// The scores `QKᵀ (b, h, q_len, k_len)` of projected queries and keys, unscaled.
    fn scores(&self, q: &Tensor, k: &Tensor) -> Result<Tensor> {
        // candle's matmul needs each head's rows contiguous.
        let (q, k) = (&self.split(q)?.contiguous()?, &self.split(k)?.contiguous()?);
        let (b, h, tq, d_k) = q.dims4()?;
        // Grouped-query attention without copying keys: the `h / kv` query heads that share
        // a key head are stacked as rows of one product, `(b, kv, h/kv · tq, d_k) · Kᵀ`.
        let kv = k.dim(1)?;
        let rows = q.reshape((b, kv, (h / kv) * tq, d_k))?;
        Ok(kernels::matmul(&rows, &k.t()?)?.reshape((b, h, tq, k.dim(2)?))?)
    }

    /// The logit of the encoding's sinks per head, if it has any, in self-attention (`own`).
    fn sink(&self, own: bool) -> Result<Option<Tensor>> {
        match own {
            true => Ok(self.caps.sink()?),
            false => Ok(None),
        }
    }

    /// What the encoding reads from the attention's input (a decay, transforms), if it
    /// reads it.
    fn read_input(&self, cx: InputContext) -> Result<FromInput> {
        match &self.encoding {
            Some(encoding) if self.caps.reads_input => Ok(encoding.read_input(&cx)?),
            _ => Ok(FromInput::default()),
        }
    }

    /// Whether the encoding reads the attention scores (CoPE).
    fn reads_scores(&self) -> bool {
        self.caps.reads_scores
    }

    /// Whether self-attention needs its scores whole, and so its composite path.
    fn whole_scores(&self) -> bool {
        self.caps.whole_scores()
    }
}
