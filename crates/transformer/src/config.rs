//! The model's configuration, saved as `config.json` beside the weights.

use candle_nn::Activation;
use posenc::EncodingConfig;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Sizes and switches of an encoder-decoder Transformer. The defaults are the paper's base
/// model (Vaswani et al. 2017, Table 3) with the sinusoidal encoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Source vocabulary size.
    pub src_vocab_size: usize,
    /// Target vocabulary size.
    pub tgt_vocab_size: usize,
    /// Model width `d_model`.
    pub d_model: usize,
    /// Attention heads `h`; `d_model` must be divisible by it.
    pub heads: usize,
    /// Inner width of the feed-forward network `d_ff`.
    pub d_ff: usize,
    /// Encoder layers `N` (0 for a decoder-only model).
    pub encoder_layers: usize,
    /// Decoder layers `N` (0 for an encoder-only model).
    pub decoder_layers: usize,
    /// Dropout on embeddings, attention weights, feed-forward and sublayer outputs.
    pub dropout: f32,
    /// Feed-forward activation: `relu` (the paper) or `gelu` (erf).
    pub activation: Activation,
    /// Pre-norm `x + f(LN(x))` instead of the paper's post-norm `LN(x + f(x))`.
    pub norm_first: bool,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// A final LayerNorm after each stack (PyTorch's `encoder.norm`, `decoder.norm`).
    pub final_norm: bool,
    /// The positional encoding.
    pub encoding: EncodingConfig,
    /// Share one matrix between source and target embeddings and the generator (needs one
    /// joint vocabulary).
    pub tie_embeddings: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            src_vocab_size: 1000,
            tgt_vocab_size: 1000,
            d_model: 512,
            heads: 8,
            d_ff: 2048,
            encoder_layers: 6,
            decoder_layers: 6,
            dropout: 0.1,
            activation: Activation::Relu,
            norm_first: false,
            layer_norm_eps: 1e-5,
            final_norm: true,
            encoding: EncodingConfig::Sinusoidal { base: 10_000.0 },
            tie_embeddings: false,
        }
    }
}

impl Config {
    /// Width of one head, `d_k = d_model / heads`.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }

    /// The reference configuration of the speed benchmarks: d_model 256, 8 heads, 3 + 3
    /// layers, d_ff 1024, vocabulary 1000, dropout 0, sinusoidal.
    pub fn benchmark_reference() -> Self {
        Self {
            src_vocab_size: 1000,
            tgt_vocab_size: 1000,
            d_model: 256,
            heads: 8,
            d_ff: 1024,
            encoder_layers: 3,
            decoder_layers: 3,
            dropout: 0.0,
            ..Self::default()
        }
    }

    /// Checks the sizes fit together.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.d_model == 0 || self.heads == 0 || self.d_ff == 0 {
            return bad(format!(
                "d_model, heads and d_ff must be > 0 (got {}, {}, {})",
                self.d_model, self.heads, self.d_ff
            ));
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return bad(format!(
                "d_model = {} is not divisible by heads = {}",
                self.d_model, self.heads
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if !matches!(self.activation, Activation::Relu | Activation::Gelu) {
            return bad(format!(
                "activation must be relu or gelu, got {:?}",
                self.activation
            ));
        }
        if self.tie_embeddings && self.src_vocab_size != self.tgt_vocab_size {
            return bad(format!(
                "tie_embeddings needs one joint vocabulary, got src_vocab_size = {} and tgt_vocab_size = {}",
                self.src_vocab_size, self.tgt_vocab_size
            ));
        }
        Ok(())
    }
}
