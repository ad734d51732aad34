//! One layer of a stack ("Attention Is All You Need" §3.1), built from a
//! [`BlockConfig`].
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
use candle_nn::VarBuilder;
use posenc::PositionalEncoding;

use crate::attention::{Attended, AttentionInput, MultiHeadAttention};
use crate::feed_forward::FeedForward;
use crate::linear::Proj;
use crate::sublayer::Residual;
use crate::{BlockConfig, Error, Result};

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
