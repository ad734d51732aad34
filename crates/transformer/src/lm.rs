//! A decoder-only (GPT-style) language model, from the same blocks.
//!
//! ```text
//! x      = Embed(ids) · √d_model             (+ the encoding's additive hook)
//! h      = Stack(x, causal mask)             (pre-norm self-attention + feed-forward layers,
//!                                             the encoder's, with the final norm)
//! logits = h Eᵀ                              (the head is tied to the token embedding E)
//! ```
//!
//! Radford et al. 2018/2019 (GPT, GPT-2), on the stack of "Attention Is All You Need":
//! there is no second copy of attention or of the layer. The stack's encoding is built for
//! causal attention ([`Direction::Causal`]), so ALiBi and T5 take their decoder forms.
//! [`LanguageModel::step`] runs new tokens after the cached ones, at their true positions:
//! that is how it generates.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::{Activation, VarBuilder, VarMap};
use posenc::{Direction, EncodingConfig, PositionalEncoding, Positions, Target};
use serde::{Deserialize, Serialize};

use crate::embeddings::Embeddings;
use crate::encoder::{Encoder, EncoderCache};
use crate::linear::Proj;
use crate::mask::Mask;
use crate::{BlockOptions, Config, Encodings, Error, Result};

/// Sizes of a decoder-only language model. The defaults are nanoGPT's CPU run on
/// Shakespeare's characters: 4 layers, 4 heads, width 128, context 64, dropout 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LmConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width `d_model`.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Inner width of the feed-forward network.
    pub d_ff: usize,
    /// Layers.
    pub layers: usize,
    /// Dropout.
    pub dropout: f32,
    /// Feed-forward activation.
    pub activation: Activation,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// The positional encoding.
    pub encoding: EncodingConfig,
    /// The context the model is trained on (it may be run past it where its encoding allows).
    pub context: usize,
    /// The head shares the token embedding matrix (GPT-2, SmolLM2); otherwise it has its
    /// own, `head.weight`.
    #[serde(skip_serializing_if = "is_true")]
    pub tie_embeddings: bool,
    /// Later variants of the blocks (Llama's: RMSNorm, SwiGLU, grouped-query attention,
    /// no biases, unscaled embeddings); the defaults are the paper's.
    #[serde(skip_serializing_if = "BlockOptions::is_default")]
    pub blocks: BlockOptions,
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Default for LmConfig {
    fn default() -> Self {
        Self {
            vocab_size: 65,
            d_model: 128,
            heads: 4,
            d_ff: 512,
            layers: 4,
            dropout: 0.0,
            activation: Activation::Gelu,
            layer_norm_eps: 1e-5,
            encoding: EncodingConfig::from_kind("sinusoidal").expect("a built-in kind"),
            context: 64,
            tie_embeddings: true,
            blocks: BlockOptions::default(),
        }
    }
}

impl LmConfig {
    /// The blocks' configuration: a pre-norm stack with a final norm.
    pub fn blocks(&self) -> Config {
        Config {
            src_vocab_size: self.vocab_size,
            tgt_vocab_size: self.vocab_size,
            d_model: self.d_model,
            heads: self.heads,
            d_ff: self.d_ff,
            encoder_layers: self.layers,
            decoder_layers: 0,
            dropout: self.dropout,
            activation: self.activation,
            norm_first: true,
            layer_norm_eps: self.layer_norm_eps,
            final_norm: true,
            encoding: Encodings::both(self.encoding.clone()),
            tie_embeddings: self.tie_embeddings,
            blocks: self.blocks.clone(),
        }
    }

    /// The number of weights, computed from the sizes alone: the blocks' count, less what
    /// the decoder-only model does not have (the generator's bias, the decoder stack's final
    /// norm, and when untied the second embedding table, whose place the head takes).
    pub fn parameter_count(&self) -> u128 {
        let d = self.d_model as u128;
        let table = self.vocab_size as u128 * d;
        let norm = self.blocks.norm.parameters(self.d_model);
        let unused = self.vocab_size as u128 + norm + if self.tie_embeddings { 0 } else { table };
        self.blocks().parameter_count() - unused
    }

    /// Checks sizes against the blocks' limits, and that the context is positive.
    pub fn validate(&self) -> Result<()> {
        self.blocks().validate()?;
        posenc::limits::check_positive("context", self.context, posenc::limits::MAX_POSITIONS)?;
        Ok(())
    }
}

/// The decoder-only model: embeddings, a causal stack, a tied head.
#[derive(Debug, Clone)]
pub struct LanguageModel {
    cfg: LmConfig,
    embed: Embeddings,
    stack: Encoder,
    head: Proj,
}

impl LanguageModel {
    /// Loads or creates every weight under `vb`: `embed.weight`, `encoding.*` (learned
    /// encodings), `stack.layers.N.*`, `stack.norm.*`, and `head.weight` if untied.
    pub fn new(cfg: &LmConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let blocks = cfg.blocks();
        let target = Target::new(cfg.d_model, cfg.heads, Direction::Causal)?;
        let encoding = cfg.encoding.build(&target, vb.pp("encoding"))?;
        let lut = candle_nn::embedding(cfg.vocab_size, cfg.d_model, vb.pp("embed"))?;
        let head = if cfg.tie_embeddings {
            Proj::new(lut.embeddings().clone(), None)
        } else {
            Proj::load(cfg.d_model, cfg.vocab_size, false, vb.pp("head"))?
        };
        let scale = cfg.blocks.scale_embeddings;
        Ok(Self {
            cfg: cfg.clone(),
            embed: Embeddings::new(lut, scale, encoding.clone(), cfg.dropout),
            stack: Encoder::new(&blocks, encoding, vb.pp("stack"))?,
            head,
        })
    }

    /// The same model over the variables of `varmap` as plain tensors: no gradient can
    /// flow, so inference takes candle's fused kernels.
    pub fn frozen(cfg: &LmConfig, varmap: &VarMap, device: &Device) -> Result<Self> {
        Self::new(cfg, crate::checkpoint::frozen(varmap, device))
    }

    /// The same weights with another positional encoding, built for causal attention:
    /// what a pretrained model does when its encoding's behaviour is swapped (position
    /// interpolation, another base, no encoding at all). Weights of the new encoding, if it
    /// has any, start untrained.
    ///
    /// # Errors
    /// An encoding that does not fit the model's heads.
    pub fn with_encoding(mut self, encoding: &EncodingConfig) -> Result<Self> {
        let target = Target::new(self.cfg.d_model, self.cfg.heads, Direction::Causal)?;
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, &self.device());
        let built = encoding.build(&target, vb)?;
        self.embed.set_encoding(built.clone());
        self.stack.set_encoding(built);
        self.cfg.encoding = encoding.clone();
        Ok(self)
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &LmConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> candle_core::Device {
        self.embed.weight().device().clone()
    }

    /// Every projection with its name (`layers.N.self_attn.q|k|v|out`,
    /// `layers.N.feed_forward.gate|up|down`, `head`): to swap in quantized weights
    /// ([`Proj::quantize`]).
    pub fn projections_mut(&mut self) -> Vec<(String, &mut Proj)> {
        let mut all = self.stack.projections_mut();
        all.push(("head".into(), &mut self.head));
        all
    }

    /// The positional encoding.
    pub fn encoding(&self) -> &Arc<dyn PositionalEncoding> {
        self.stack.encoding()
    }

    /// The longest sequence the encoding can take (`None`: unbounded).
    pub fn max_positions(&self) -> Option<usize> {
        self.embed.max_positions()
    }

    /// Next-token scores `(batch, seq, vocab)` at every position of `ids (batch, seq)`,
    /// each position seeing itself and those before it.
    ///
    /// # Errors
    /// A bad shape or token id; a sequence longer than a learned encoding's table, naming it.
    pub fn logits(&self, ids: &Tensor, train: bool) -> Result<Tensor> {
        self.logits_at(ids, Positions::From(0), train)
    }

    /// [`LanguageModel::logits`] with the tokens at positions `at`, shared by every
    /// sequence of the batch (randomized positions train this way: Ruoss et al. 2023).
    ///
    /// # Errors
    /// As [`LanguageModel::logits`]; also a list that is not one increasing position per
    /// token.
    pub fn logits_at(&self, ids: &Tensor, at: Positions, train: bool) -> Result<Tensor> {
        let seq = self.check(ids, at)?;
        let mask = Mask::causal(seq, seq, 0, ids.device())?;
        let x = self.embed.forward(ids, at, train)?;
        let h = self.stack.forward_at(&x, at, Some(&mask), train)?;
        Ok(self.head.forward(&h)?)
    }

    /// Runs `ids (batch, new)` after the positions in `cache` and returns the next-token
    /// scores `(batch, vocab)` after the last of them; the cache grows by `new`. Only that
    /// position goes through the head, so a long prompt costs no `new × vocab` product.
    pub fn step(&self, ids: &Tensor, cache: &mut EncoderCache) -> Result<Tensor> {
        let offset = cache.len();
        let new = self.check(ids, Positions::From(offset))?;
        let mask = Mask::causal(new, offset + new, offset, ids.device())?;
        let x = self.embed.forward(ids, Positions::From(offset), false)?;
        let h = self.stack.forward_cached(&x, Some(&mask), cache, false)?;
        Ok(self.head.forward(&h.narrow(1, new - 1, 1)?.squeeze(1)?)?)
    }

    /// Checks `ids` is `(batch, seq)` with `seq ≥ 1` and that its positions `at` fit the
    /// encoding; returns `seq`.
    fn check(&self, ids: &Tensor, at: Positions) -> Result<usize> {
        let seq = match ids.dims() {
            &[_, seq] if seq > 0 => seq,
            dims => {
                return Err(Error::Input(format!(
                    "token ids must be (batch, seq) with seq ≥ 1, got {dims:?}"
                )))
            }
        };
        if let Some(max) = self.max_positions() {
            if at.end(seq) > max {
                return Err(Error::Input(format!(
                    "positions {}..{} are past the `{}` encoding's table of max_positions = {max}",
                    at.get(0),
                    at.end(seq),
                    self.cfg.encoding.kind()
                )));
            }
        }
        Ok(seq)
    }
}
