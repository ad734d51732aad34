//! The decoder: `N` layers of masked self-attention, cross-attention over the encoder's
//! output and feed-forward, each in a residual connection ("Attention Is All You Need" §3.1).
//!
//! ```text
//! y ← Sublayer(y, SelfAttention(y, y, y, causal ∧ padding))
//! y ← Sublayer(y, CrossAttention(y, memory, memory, memory padding))
//! y ← Sublayer(y, FFN(y))
//! ```
//!
//! With a [`DecoderCache`] the decoder runs one step at a time: each layer keeps its keys
//! and values, and new positions are handed to the encoding at their true offset.
//! Weights named as PyTorch's `nn.TransformerDecoder`: `self_attn`, `multihead_attn`,
//! `linear1`, `linear2`, `norm1`–`norm3`, the optional final `norm`.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Module, VarBuilder};
use posenc::{PositionalEncoding, Positions};

use crate::attention::{KvCache, MultiHeadAttention};
use crate::feed_forward::FeedForward;
use crate::layer_encodings::{bias_of, LayerEncodings};
use crate::mask::Mask;
use crate::sublayer::{stack, Norm, Residual};
use crate::{Config, Result};

/// Keys and values of every decoder layer, for incremental decoding.
#[derive(Debug, Default)]
pub struct DecoderCache {
    layers: Vec<(KvCache, KvCache)>,
}

impl DecoderCache {
    /// Number of target positions decoded so far.
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, |(s, _)| s.len())
    }

    /// Whether nothing has been decoded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps batch entries `indices` (u32), in that order, in every layer.
    pub fn select(&mut self, indices: &Tensor) -> Result<()> {
        for (self_kv, cross_kv) in &mut self.layers {
            self_kv.select(indices)?;
            cross_kv.select(indices)?;
        }
        Ok(())
    }
}

/// Attention weights of one decoder layer: self-attention and cross-attention.
#[derive(Debug, Clone)]
pub struct DecoderAttention {
    /// `(batch, heads, tgt_len, tgt_len)`.
    pub self_attn: Tensor,
    /// `(batch, heads, tgt_len, src_len)`.
    pub cross_attn: Tensor,
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    self_attn: MultiHeadAttention,
    cross_attn: MultiHeadAttention,
    feed_forward: FeedForward,
    sublayer1: Residual,
    sublayer2: Residual,
    sublayer3: Residual,
}

impl DecoderLayer {
    /// Loads or creates one layer under `vb` (`decoder.layers.N`).
    pub fn new(
        cfg: &Config,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let residual = |name: &str| Residual::from_config(cfg, vb.pp(name));
        let attention =
            |name: &str| MultiHeadAttention::from_config(cfg, encoding.clone(), vb.pp(name));
        Ok(Self {
            self_attn: attention("self_attn")?,
            cross_attn: attention("multihead_attn")?,
            feed_forward: FeedForward::from_config(cfg, vb.clone())?,
            sublayer1: residual("norm1")?,
            sublayer2: residual("norm2")?,
            sublayer3: residual("norm3")?,
        })
    }

    /// One layer over `y (batch, tgt_len, d_model)` given the encoder's `memory`. `bias` is
    /// the encoding's position bias of the self-attention, if any.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        y: &Tensor,
        memory: &Tensor,
        self_mask: Option<&Mask>,
        memory_mask: Option<&Mask>,
        at: Positions,
        bias: Option<&Tensor>,
        cache: Option<&mut (KvCache, KvCache)>,
        train: bool,
    ) -> Result<(Tensor, DecoderAttention)> {
        let (self_cache, cross_cache) = match cache {
            Some((s, c)) => (Some(s), Some(c)),
            None => (None, None),
        };
        let (mut self_w, mut cross_w) = (None, None);
        let y = self.sublayer1.forward(y, train, |y| {
            let (out, w) = self
                .self_attn
                .self_attention(y, at, self_mask, bias, self_cache, train)?;
            self_w = Some(w);
            Ok(out)
        })?;
        let y = self.sublayer2.forward(&y, train, |y| {
            let (out, w) =
                self.cross_attn
                    .cross_attention(y, memory, memory_mask, cross_cache, train)?;
            cross_w = Some(w);
            Ok(out)
        })?;
        let y = self
            .sublayer3
            .forward(&y, train, |y| self.feed_forward.forward(y, train))?;
        let attention = DecoderAttention {
            self_attn: self_w.expect("the self-attention sublayer always runs"),
            cross_attn: cross_w.expect("the cross-attention sublayer always runs"),
        };
        Ok((y, attention))
    }
}

/// A stack of decoder layers with an optional final norm.
#[derive(Debug, Clone)]
pub struct Decoder {
    layers: Vec<DecoderLayer>,
    norm: Option<Norm>,
    encodings: LayerEncodings,
}

impl Decoder {
    /// Loads or creates `cfg.decoder_layers` layers under `vb` (`decoder`).
    pub fn new(
        cfg: &Config,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let encodings = LayerEncodings::new(encoding, cfg.decoder_layers);
        let (layers, norm) = stack(cfg, cfg.decoder_layers, &vb, |i, vb| {
            DecoderLayer::new(cfg, encodings.layer(i).clone(), vb)
        })?;
        Ok(Self {
            layers,
            norm,
            encodings,
        })
    }

    /// The positional encoding of this stack (causal).
    pub fn encoding(&self) -> &Arc<dyn PositionalEncoding> {
        self.encodings.stack()
    }

    /// Decodes embedded `y (batch, tgt_len, d_model)` against `memory`. Without a cache,
    /// `self_mask` should be causal; with one, `y` holds only the new positions.
    pub fn forward(
        &self,
        y: &Tensor,
        memory: &Tensor,
        self_mask: Option<&Mask>,
        memory_mask: Option<&Mask>,
        cache: Option<&mut DecoderCache>,
        train: bool,
    ) -> Result<Tensor> {
        Ok(self
            .forward_with_attention(y, memory, self_mask, memory_mask, cache, train)?
            .0)
    }

    /// Like [`Decoder::forward`], also returning each layer's attention weights.
    pub fn forward_with_attention(
        &self,
        y: &Tensor,
        memory: &Tensor,
        self_mask: Option<&Mask>,
        memory_mask: Option<&Mask>,
        cache: Option<&mut DecoderCache>,
        train: bool,
    ) -> Result<(Tensor, Vec<DecoderAttention>)> {
        let at = Positions::From(cache.as_deref().map_or(0, DecoderCache::len));
        self.run(y, at, memory, (self_mask, memory_mask), cache, train)
    }

    /// Like [`Decoder::forward`] (no cache) with the targets at positions `at`
    /// (randomized positions train this way).
    pub fn forward_at(
        &self,
        y: &Tensor,
        at: Positions,
        memory: &Tensor,
        self_mask: Option<&Mask>,
        memory_mask: Option<&Mask>,
        train: bool,
    ) -> Result<Tensor> {
        Ok(self
            .run(y, at, memory, (self_mask, memory_mask), None, train)?
            .0)
    }

    /// Runs `y` at positions `at`: after the cached ones (`at` is then their count), or,
    /// without a cache, at any positions.
    fn run(
        &self,
        y: &Tensor,
        at: Positions,
        memory: &Tensor,
        (self_mask, memory_mask): (Option<&Mask>, Option<&Mask>),
        mut cache: Option<&mut DecoderCache>,
        train: bool,
    ) -> Result<(Tensor, Vec<DecoderAttention>)> {
        if let Some(cache) = cache.as_deref_mut() {
            cache
                .layers
                .resize_with(self.layers.len(), Default::default);
        }
        let len = y.dim(1)?;
        let (keys, k_len) = at.keys(len);
        let biases = self.encodings.biases(len, k_len, at, keys)?;
        let mut y = y.clone();
        let mut weights = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let layer_cache = cache.as_deref_mut().map(|c| &mut c.layers[i]);
            y = self.encodings.input(i, y, at)?;
            let (out, w) = layer.forward(
                &y,
                memory,
                self_mask,
                memory_mask,
                at,
                bias_of(&biases, i),
                layer_cache,
                train,
            )?;
            y = out;
            weights.push(w);
        }
        if let Some(norm) = &self.norm {
            y = norm.forward(&y)?;
        }
        Ok((y, weights))
    }
}
