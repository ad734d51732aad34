//! One layer of a stack ("Attention Is All You Need" §3.1), and the configuration every
//! block takes.
//!
//! ```text
//! x ← Sublayer(x, SelfAttention(x, x, x, mask))                  (every block)
//! x ← Sublayer(x, CrossAttention(x, memory, memory, memory mask)) (with cross-attention: the decoder's)
//! x ← Sublayer(x, FFN(x))                                         (every block)
//! ```
//!
//! An encoder layer, a decoder layer and a causal language model's layer are this one
//! block, with or without cross-attention. Weights named as PyTorch's
//! `nn.TransformerEncoderLayer` / `nn.TransformerDecoderLayer`: `self_attn`,
//! `multihead_attn` (cross-attention), `linear1`, `linear2` (and `gate`), and `norm1`,
//! `norm2` (and `norm3` when there is cross-attention).

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Activation, VarBuilder};
use posenc::PositionalEncoding;
use serde::{Deserialize, Serialize};

use crate::attention::{Attended, AttentionInput, MultiHeadAttention};
use crate::feed_forward::FeedForward;
use crate::linear::Proj;
use crate::sublayer::Residual;
use crate::{Error, NormKind, Result};

/// Everything a block, its attention, feed-forward network and residual connections need
/// to know: model configs ([`Config`](crate::Config), [`LmConfig`](crate::LmConfig),
/// BERT's and Llama's) each build one.
///
/// ```
/// use posenc_transformer::BlockConfig;
/// let paper = BlockConfig::new(512, 8, 2048);
/// assert_eq!((paper.kv_heads, paper.head_dim()), (8, 64));
/// assert!(paper.validate().is_ok());
/// assert!(BlockConfig { kv_heads: 3, ..paper }.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockConfig {
    /// Model width `d_model`.
    pub d_model: usize,
    /// Query heads `h`; `d_model` must be divisible by it.
    pub heads: usize,
    /// Key/value heads, each shared by `heads / kv_heads` query heads (grouped-query
    /// attention, Ainslie et al. 2023); `heads` is the paper's.
    pub kv_heads: usize,
    /// Inner width of the feed-forward network `d_ff`.
    pub d_ff: usize,
    /// Feed-forward activation: ReLU (the paper), GELU (erf) or SiLU.
    pub activation: Activation,
    /// A gated feed-forward `(act(x W_g) ⊙ x W_1) W_2` (Shazeer 2020; Llama's SwiGLU).
    pub gated: bool,
    /// Biases on the attention and feed-forward projections.
    pub bias: bool,
    /// LayerNorm or RMSNorm.
    pub norm: NormKind,
    /// Pre-norm `x + f(N(x))` instead of the paper's post-norm `N(x + f(x))`.
    pub norm_first: bool,
    /// The norm's epsilon.
    pub eps: f64,
    /// Dropout on attention weights, the feed-forward's hidden layer and sublayer outputs
    /// (while training: [`crate::dropout`]).
    pub dropout: f32,
    /// A cross-attention sublayer over an encoder's output (the decoder's blocks).
    pub cross_attention: bool,
    /// A norm after the last block of the stack (PyTorch's `encoder.norm`).
    pub final_norm: bool,
}

impl BlockConfig {
    /// The paper's block of width `d_model`, `heads` heads and feed-forward width `d_ff`:
    /// ReLU, biases, post-norm LayerNorm with ε = 1e-5, no dropout, no cross-attention,
    /// a final norm.
    pub fn new(d_model: usize, heads: usize, d_ff: usize) -> Self {
        Self {
            d_model,
            heads,
            kv_heads: heads,
            d_ff,
            activation: Activation::Relu,
            gated: false,
            bias: true,
            norm: NormKind::LayerNorm,
            norm_first: false,
            eps: 1e-5,
            dropout: 0.0,
            cross_attention: false,
            final_norm: true,
        }
    }

    /// Width of one head, `d_k = d_model / heads` (0 without heads).
    pub fn head_dim(&self) -> usize {
        self.d_model.checked_div(self.heads).unwrap_or(0)
    }

    /// The weights of one block, computed from the sizes alone.
    pub fn parameters(&self) -> u128 {
        let d = self.d_model as u128;
        let ff = self.d_ff as u128;
        let kv = self.kv_heads as u128 * self.head_dim() as u128;
        let bias = |n: u128| if self.bias { n } else { 0 };
        let attention = 2 * d * d + 2 * d * kv + bias(2 * d + 2 * kv);
        let matrices = if self.gated { 3 } else { 2 };
        let feed_forward = matrices * d * ff + bias((matrices - 1) * ff + d);
        let norm = self.norm.parameters(self.d_model);
        match self.cross_attention {
            true => 2 * attention + feed_forward + 3 * norm,
            false => attention + feed_forward + 2 * norm,
        }
    }

    /// The weights of a stack of `layers` blocks, with its final norm.
    pub fn stack_parameters(&self, layers: usize) -> u128 {
        let last = match self.final_norm {
            true => self.norm.parameters(self.d_model),
            false => 0,
        };
        layers as u128 * self.parameters() + last
    }

    /// Checks the sizes fit together ([`posenc::limits`]) before anything is allocated.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first field out of place.
    pub fn validate(&self) -> Result<()> {
        use posenc::limits::{check_positive, MAX_D_MODEL, MAX_HEADS};
        let bad = |m: String| Err(Error::Config(m));
        let limited = [
            ("d_model", self.d_model, MAX_D_MODEL),
            ("heads", self.heads, MAX_HEADS),
            ("d_ff", self.d_ff, 16 * MAX_D_MODEL),
        ];
        for (what, value, max) in limited {
            check_positive(what, value, max).map_err(|e| Error::Config(e.to_string()))?;
        }
        posenc::limits::head_dim(self.d_model, self.heads)?;
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "kv_heads must divide heads = {}, got {}",
                self.heads, self.kv_heads
            ));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad(format!(
                "layer_norm_eps must be a small positive number, got {}",
                self.eps
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if !matches!(
            self.activation,
            Activation::Relu | Activation::Gelu | Activation::Silu
        ) {
            return bad(format!(
                "activation must be relu, gelu or silu, got {:?}",
                self.activation
            ));
        }
        Ok(())
    }
}

/// One block: self-attention, optional cross-attention, feed-forward, each in a residual
/// connection with its norm.
#[derive(Debug, Clone)]
pub struct Block {
    self_attn: MultiHeadAttention,
    self_residual: Residual,
    cross: Option<(MultiHeadAttention, Residual)>,
    feed_forward: FeedForward,
    ff_residual: Residual,
}

/// What one block returns: its output `(batch, seq, d_model)` and, when they were asked
/// for, the attention weights.
#[derive(Debug, Clone)]
pub struct BlockOutput {
    /// `(batch, seq, d_model)`.
    pub hidden: Tensor,
    /// Self-attention weights `(batch, heads, seq, k_len)`, if asked for.
    pub self_weights: Option<Tensor>,
    /// Cross-attention weights `(batch, heads, seq, memory_len)`, if asked for.
    pub cross_weights: Option<Tensor>,
}

impl Block {
    /// Loads or creates one block under `vb` (`…layers.N`); `encoding` gives its
    /// self-attention positions (cross-attention takes none).
    ///
    /// # Errors
    /// A configuration [`BlockConfig::validate`] refuses; a missing or mis-shaped weight.
    pub fn new(
        cfg: &BlockConfig,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let residual = |name: &str| Residual::new(cfg, vb.pp(name));
        let cross = cfg
            .cross_attention
            .then(|| -> Result<_> {
                let attention = MultiHeadAttention::new(cfg, None, vb.pp("multihead_attn"))?;
                Ok((attention, residual("norm2")?))
            })
            .transpose()?;
        let ff_norm = if cfg.cross_attention {
            "norm3"
        } else {
            "norm2"
        };
        Ok(Self {
            self_attn: MultiHeadAttention::new(cfg, Some(encoding), vb.pp("self_attn"))?,
            self_residual: residual("norm1")?,
            cross,
            feed_forward: FeedForward::new(cfg, vb.clone())?,
            ff_residual: residual(ff_norm)?,
        })
    }

    /// The block's projections with their names (`self_attn.q`, `feed_forward.up`, …):
    /// to swap in quantized weights ([`Proj::quantize`]).
    pub fn projections_mut(&mut self) -> Vec<(String, &mut Proj)> {
        let mut all: Vec<(String, &mut Proj)> = Vec::new();
        for (n, p) in self.self_attn.projections_mut() {
            all.push((format!("self_attn.{n}"), p));
        }
        if let Some((cross, _)) = &mut self.cross {
            for (n, p) in cross.projections_mut() {
                all.push((format!("multihead_attn.{n}"), p));
            }
        }
        for (n, p) in self.feed_forward.projections_mut() {
            all.push((format!("feed_forward.{n}"), p));
        }
        all
    }

    /// Replaces the positional encoding of the self-attention.
    pub(crate) fn set_encoding(&mut self, encoding: Arc<dyn PositionalEncoding>) {
        self.self_attn.set_encoding(encoding);
    }

    /// Self-extend in the block's self-attention ([`crate::SelfExtend`]), or none.
    pub(crate) fn set_self_extend(&mut self, self_extend: Option<crate::SelfExtend>) {
        self.self_attn.set_self_extend(self_extend);
    }

    /// Runs the block: `self_attend` is its self-attention input (queries, positions, mask,
    /// cache), `memory` the encoder's output and its mask for the cross-attention, if the
    /// block has one.
    ///
    /// # Shapes
    /// - `self_attend.x`: `(batch, seq, d_model)`
    /// - `memory`: `(batch, memory_len, d_model)`
    /// - output: `(batch, seq, d_model)`
    ///
    /// # Errors
    /// Inputs of the wrong width; memory given to a block without cross-attention, or
    /// withheld from one with it.
    pub fn forward(
        &self,
        self_attend: AttentionInput,
        memory: Option<CrossInput>,
    ) -> Result<BlockOutput> {
        let x = self_attend.x.clone();
        let mut self_weights = None;
        let x = self.self_residual.forward(&x, |x| {
            let Attended { output, weights } = self
                .self_attn
                .forward(AttentionInput { x, ..self_attend })?;
            self_weights = weights;
            Ok(output)
        })?;
        let mut cross_weights = None;
        let x = match (&self.cross, memory) {
            (Some((attention, residual)), Some(memory)) => residual.forward(&x, |x| {
                let attended = attention.forward(AttentionInput {
                    x,
                    source: crate::attention::Source::Memory(memory.states),
                    mask: memory.mask,
                    cache: memory.cache,
                    weights: memory.weights,
                })?;
                cross_weights = attended.weights;
                Ok(attended.output)
            })?,
            (None, None) => x,
            (Some(_), None) => {
                return Err(Error::Input(
                    "a block with cross-attention needs the encoder's memory".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(Error::Input(
                    "memory given to a block without cross-attention".into(),
                ))
            }
        };
        let hidden = self
            .ff_residual
            .forward(&x, |x| self.feed_forward.forward(x))?;
        Ok(BlockOutput {
            hidden,
            self_weights,
            cross_weights,
        })
    }

    /// The block with its self-attention computed by `attend` (the packed path).
    pub(crate) fn through(
        &self,
        x: &Tensor,
        attend: impl FnOnce(&MultiHeadAttention, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let x = self
            .self_residual
            .forward(x, |x| attend(&self.self_attn, x))?;
        self.ff_residual
            .forward(&x, |x| self.feed_forward.forward(x))
    }
}

/// The cross-attention input of one block: the encoder's output, its padding mask, the
/// block's cache of the memory's keys and values, and whether to return the weights.
#[derive(Debug)]
pub struct CrossInput<'a> {
    /// The encoder's output `(batch, memory_len, d_model)`.
    pub states: &'a Tensor,
    /// Which memory positions each query may see (padding).
    pub mask: Option<&'a crate::Mask>,
    /// The memory's projected keys and values, computed once and reused.
    pub cache: Option<&'a mut crate::KvCache>,
    /// Return the cross-attention weights.
    pub weights: bool,
}
