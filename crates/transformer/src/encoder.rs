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

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Module, VarBuilder};
use posenc::PositionalEncoding;

use crate::attention::MultiHeadAttention;
use crate::feed_forward::FeedForward;
use crate::mask::Mask;
use crate::sublayer::{stack, Norm, Residual};
use crate::{Config, Result};

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
            self_attn: MultiHeadAttention::new(
                cfg.d_model,
                cfg.heads,
                cfg.dropout,
                encoding,
                vb.pp("self_attn"),
            )?,
            feed_forward: FeedForward::new(
                cfg.d_model,
                cfg.d_ff,
                cfg.activation,
                cfg.dropout,
                vb.clone(),
            )?,
            sublayer1: residual("norm1")?,
            sublayer2: residual("norm2")?,
        })
    }

    /// `x (batch, seq, d_model)` → the layer's output and its attention weights. `bias` is
    /// the encoding's position bias `(heads, seq, seq)`, if any.
    pub fn forward(
        &self,
        x: &Tensor,
        mask: Option<&Mask>,
        bias: Option<&Tensor>,
        train: bool,
    ) -> Result<(Tensor, Tensor)> {
        let mut weights = None;
        let x = self.sublayer1.forward(x, train, |x| {
            let (out, w) = self.self_attn.self_attention(x, mask, bias, None, train)?;
            weights = Some(w);
            Ok(out)
        })?;
        let x = self
            .sublayer2
            .forward(&x, train, |x| self.feed_forward.forward(x, train))?;
        Ok((x, weights.expect("the attention sublayer always runs")))
    }
}

/// A stack of encoder layers with an optional final norm.
#[derive(Debug, Clone)]
pub struct Encoder {
    layers: Vec<EncoderLayer>,
    norm: Option<Norm>,
    encoding: Arc<dyn PositionalEncoding>,
}

impl Encoder {
    /// Loads or creates `cfg.encoder_layers` layers under `vb` (`encoder`).
    pub fn new(
        cfg: &Config,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let (layers, norm) = stack(cfg, cfg.encoder_layers, &vb, |vb| {
            EncoderLayer::new(cfg, encoding.clone(), vb)
        })?;
        Ok(Self {
            layers,
            norm,
            encoding,
        })
    }

    /// The positional encoding of this stack (bidirectional).
    pub fn encoding(&self) -> &Arc<dyn PositionalEncoding> {
        &self.encoding
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
        let seq = x.dim(1)?;
        let bias = self.encoding.attention_bias(seq, seq, 0, 0)?;
        let mut x = x.clone();
        let mut weights = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let (y, w) = layer.forward(&x, mask, bias.as_ref(), train)?;
            x = y;
            weights.push(w);
        }
        if let Some(norm) = &self.norm {
            x = norm.forward(&x)?;
        }
        Ok((x, weights))
    }
}
