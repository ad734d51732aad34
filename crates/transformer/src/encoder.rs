//! The encoder: `N` identical layers of self-attention and feed-forward, each wrapped in a
//! residual connection with layer norm ("Attention Is All You Need" §3.1).
//!
//! ```text
//! x ← Sublayer(x, SelfAttention(x, x, x, mask))
//! x ← Sublayer(x, FFN(x))
//! ```
//!
//! Weights named as PyTorch's `nn.TransformerEncoder`: `layers.N.self_attn`, `linear1`,
//! `linear2`, `norm1`, `norm2`, and the optional final `norm`.
//!
//! With a causal mask the same stack is a decoder-only language model's
//! ([`crate::lm`]); an [`EncoderCache`] then lets it run one step at a time.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Module, VarBuilder};
use posenc::{PositionalEncoding, Positions};

use crate::attention::{KvCache, MultiHeadAttention};
use crate::feed_forward::FeedForward;
use crate::layer_encodings::{bias_of, LayerEncodings};
use crate::linear::Proj;
use crate::mask::Mask;
use crate::sublayer::{stack, Norm, Residual};
use crate::{Config, Result};

/// Keys and values of every layer, for a causal stack run one step at a time.
#[derive(Debug, Default)]
pub struct EncoderCache {
    layers: Vec<KvCache>,
    reserved: usize,
    reach: usize,
}

impl EncoderCache {
    /// Number of positions run so far.
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, KvCache::len)
    }

    /// Whether nothing has run yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy with buffers of its own ([`KvCache::try_clone`]), to continue two ways from
    /// one prompt.
    ///
    /// # Errors
    /// The copy's own failure.
    pub fn try_clone(&self) -> Result<Self> {
        Ok(Self {
            layers: self
                .layers
                .iter()
                .map(KvCache::try_clone)
                .collect::<Result<_>>()?,
            reserved: self.reserved,
            reach: self.reach,
        })
    }

    /// A cache whose layers allocate room for `positions` at their first write
    /// ([`KvCache::reserve`]): a generation of known length allocates once.
    pub fn with_capacity(positions: usize) -> Self {
        Self {
            layers: Vec::new(),
            reserved: positions,
            reach: 0,
        }
    }

    /// Says that what is read next belongs to a sequence that will reach `total` positions
    /// ([`KvCache::read_until`]): a long prompt read chunk by chunk then gets the
    /// length-dependent tables (dynamic NTK) of the whole prompt, as one forward would.
    pub fn read_until(&mut self, total: usize) {
        self.reach = total;
    }

    /// The length the sequence being read will reach, as far as it has been said.
    pub fn reach(&self) -> usize {
        self.reach
    }
}

/// One encoder layer.
#[derive(Debug, Clone)]
pub struct EncoderLayer {
    self_attn: MultiHeadAttention,
    feed_forward: FeedForward,
    sublayer1: Residual,
    sublayer2: Residual,
}

impl EncoderLayer {
    /// Loads or creates one layer under `vb` (`encoder.layers.N`).
    pub fn new(
        cfg: &Config,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let residual = |name: &str| Residual::from_config(cfg, vb.pp(name));
        Ok(Self {
            self_attn: MultiHeadAttention::from_config(cfg, encoding, vb.pp("self_attn"))?,
            feed_forward: FeedForward::from_config(cfg, vb.clone())?,
            sublayer1: residual("norm1")?,
            sublayer2: residual("norm2")?,
        })
    }

    /// The layer's projections with their names (`self_attn.q`, `feed_forward.up`, …).
    pub fn projections_mut(&mut self) -> Vec<(String, &mut Proj)> {
        let attention = self.self_attn.projections_mut().into_iter();
        let attention = attention.map(|(n, p)| (format!("self_attn.{n}"), p));
        let ffn = self.feed_forward.projections_mut().into_iter();
        attention
            .chain(ffn.map(|(n, p)| (format!("feed_forward.{n}"), p)))
            .collect()
    }

    /// `x (batch, seq, d_model)` → the layer's output and its attention weights. `bias` is
    /// the encoding's position bias `(heads, seq, seq)`, if any. With a cache, `x` holds
    /// the new positions only and attends to the cached ones too.
    pub fn forward(
        &self,
        x: &Tensor,
        at: Positions,
        mask: Option<&Mask>,
        bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        train: bool,
    ) -> Result<(Tensor, Tensor)> {
        let mut weights = None;
        let x = self.through(x, train, |attention, x| {
            let (out, w) = attention.self_attention(x, at, mask, bias, cache, train)?;
            weights = Some(w);
            Ok(out)
        })?;
        Ok((x, weights.expect("the attention sublayer always runs")))
    }

    /// The layer with its self-attention sublayer computed by `attend`.
    fn through(
        &self,
        x: &Tensor,
        train: bool,
        attend: impl FnOnce(&MultiHeadAttention, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let x = self
            .sublayer1
            .forward(x, train, |x| attend(&self.self_attn, x))?;
        self.sublayer2
            .forward(&x, train, |x| self.feed_forward.forward(x, train))
    }
}

/// A stack of encoder layers with an optional final norm.
#[derive(Debug, Clone)]
pub struct Encoder {
    layers: Vec<EncoderLayer>,
    norm: Option<Norm>,
    encodings: LayerEncodings,
}

impl Encoder {
    /// Loads or creates `cfg.encoder_layers` layers under `vb` (`encoder`).
    pub fn new(
        cfg: &Config,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let encodings = LayerEncodings::new(encoding, cfg.encoder_layers);
        let (layers, norm) = stack(cfg, cfg.encoder_layers, &vb, |i, vb| {
            EncoderLayer::new(cfg, encodings.layer(i).clone(), vb)
        })?;
        Ok(Self {
            layers,
            norm,
            encodings,
        })
    }

    /// Every layer's projections, named `layers.N.…` ([`EncoderLayer::projections_mut`]).
    pub fn projections_mut(&mut self) -> Vec<(String, &mut Proj)> {
        let layers = self.layers.iter_mut().enumerate();
        layers
            .flat_map(|(i, layer)| {
                let named = layer.projections_mut().into_iter();
                named.map(move |(n, p)| (format!("layers.{i}.{n}"), p))
            })
            .collect()
    }

    /// Replaces the positional encoding of the stack and of every layer's attention.
    pub(crate) fn set_encoding(&mut self, encoding: Arc<dyn PositionalEncoding>) {
        self.encodings = LayerEncodings::new(encoding, self.layers.len());
        for (i, layer) in self.layers.iter_mut().enumerate() {
            layer
                .self_attn
                .set_encoding(self.encodings.layer(i).clone());
        }
    }

    /// The positional encoding of this stack (bidirectional).
    pub fn encoding(&self) -> &Arc<dyn PositionalEncoding> {
        self.encodings.stack()
    }

    /// Encodes embedded `x (batch, seq, d_model)`; `mask` hides padding keys.
    pub fn forward(&self, x: &Tensor, mask: Option<&Mask>, train: bool) -> Result<Tensor> {
        Ok(self.forward_with_attention(x, mask, train)?.0)
    }

    /// Like [`Encoder::forward`], also returning each layer's attention weights
    /// `(batch, heads, seq, seq)`.
    pub fn forward_with_attention(
        &self,
        x: &Tensor,
        mask: Option<&Mask>,
        train: bool,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        self.run(x, Positions::From(0), mask, train)
    }

    /// Like [`Encoder::forward`] with the tokens at positions `at` (randomized positions
    /// train this way).
    pub fn forward_at(
        &self,
        x: &Tensor,
        at: Positions,
        mask: Option<&Mask>,
        train: bool,
    ) -> Result<Tensor> {
        Ok(self.run(x, at, mask, train)?.0)
    }

    /// Encodes sequences packed end to end along the rows of embedded `x (1, n, d_model)`,
    /// `lens` tokens each, at inference: no product is spent on padding. Each sequence sits
    /// at positions `0, 1, …` and attends to its own tokens only, so on every real token the
    /// output `(1, n, d_model)` equals [`Encoder::forward`] of the padded batch with its
    /// padding mask ([`MultiHeadAttention::packed_self_attention`]). Bidirectional, as an
    /// encoder attends: there is no causal mask, so this is not a causal language model's
    /// forward.
    ///
    /// # Errors
    /// `x` not `(1, n, d_model)` with `n` the sum of `lens`.
    pub fn forward_packed(&self, x: &Tensor, lens: &[usize]) -> Result<Tensor> {
        let longest = crate::attention::check_packed(x, lens)?;
        let from0 = Positions::From(0);
        let biases = self.encodings.biases(longest, longest, from0, from0)?;
        let mut x = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = self.packed_input(i, x, lens)?;
            x = layer.through(&x, false, |attention, x| {
                attention.packed_self_attention(x, lens, bias_of(&biases, i))
            })?;
        }
        self.final_norm(x)
    }

    /// Runs embedded `x (batch, new, d_model)` causally after the positions in `cache`, and
    /// adds them to it, at inference: this is how a decoder-only model reads a prompt and
    /// generates ([`MultiHeadAttention::cached_self_attention`]: no attention weights, and
    /// memory linear in the cached length).
    ///
    /// # Shapes
    /// - `x`: `(batch, new, d_model)`
    /// - output: `(batch, new, d_model)`
    ///
    /// # Errors
    /// `x` of the wrong width, or a batch that differs from the cache's.
    pub fn forward_cached(&self, x: &Tensor, cache: &mut EncoderCache) -> Result<Tensor> {
        let reserved = cache.reserved;
        cache.layers.resize_with(self.layers.len(), || {
            let mut kv = KvCache::default();
            kv.reserve(reserved);
            kv
        });
        let mut x = x.clone();
        for (i, (layer, kv)) in self.layers.iter().zip(&mut cache.layers).enumerate() {
            kv.read_until(cache.reach);
            let at = kv.positions(x.dim(1)?);
            x = self.encodings.input(i, x, at)?;
            x = layer.through(&x, false, |attention, x| {
                attention.cached_self_attention(x, kv)
            })?;
        }
        self.final_norm(x)
    }

    /// Runs `x` at positions `at`, attending to each other only.
    fn run(
        &self,
        x: &Tensor,
        at: Positions,
        mask: Option<&Mask>,
        train: bool,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let seq = x.dim(1)?;
        let (keys, k_len) = at.keys(seq);
        let biases = self.encodings.biases(seq, k_len, at, keys)?;
        let mut x = x.clone();
        let mut weights = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            x = self.encodings.input(i, x, at)?;
            let (y, w) = layer.forward(&x, at, mask, bias_of(&biases, i), None, train)?;
            x = y;
            weights.push(w);
        }
        Ok((self.final_norm(x)?, weights))
    }

    /// The input of layer `i` of sequences packed along the rows of `x (1, n, d_model)`,
    /// `lens` tokens each, every one at positions `0, 1, …` ([`LayerEncodings::input`]).
    fn packed_input(&self, i: usize, x: Tensor, lens: &[usize]) -> Result<Tensor> {
        if i == 0 || !self.encodings.per_layer() {
            return Ok(x);
        }
        let mut start = 0;
        let mut pieces = Vec::with_capacity(lens.len());
        for &len in lens.iter().filter(|&&len| len > 0) {
            let piece = x.narrow(1, start, len)?;
            pieces.push(self.encodings.input(i, piece, Positions::From(0))?);
            start += len;
        }
        match pieces.is_empty() {
            true => Ok(x),
            false => Ok(Tensor::cat(&pieces, 1)?),
        }
    }

    /// The stack's final norm of `x`, if it has one.
    fn final_norm(&self, x: Tensor) -> Result<Tensor> {
        match &self.norm {
            Some(norm) => Ok(norm.forward(&x)?),
            None => Ok(x),
        }
    }
}
