//! The encoder-decoder Transformer and its generator ("Attention Is All You Need" §3).
//!
//! ```text
//! memory = Encoder(Embed_src(x), src padding mask)
//! y      = Decoder(Embed_tgt(shifted target), memory, causal ∧ tgt padding, src padding)
//! P(y_t) = softmax(y W_gen + b)          (the generator; log-probabilities)
//! ```
//!
//! Each stack gets its own instance of its configured encoding ([`crate::Encodings`]), so a
//! learned or T5 encoding has separate source and target weights, under
//! `encoder.encoding` and `decoder.encoding`, and T5 or ALiBi take the form their paper
//! uses in each stack. Encoder-only and decoder-only models set the other stack's layer
//! count to 0.

use candle_core::{Device, Tensor, D};
use candle_nn::{Linear, VarBuilder, VarMap};
use posenc::{EncodingConfig, Positions, Tokens};

use crate::embeddings::Embeddings;
use crate::linear;
use crate::mask::Mask;
use crate::stack::{LayerWeights, Memory, Stack, StackCache, StackInput};
use crate::{Config, Result};

/// Linear projection to the target vocabulary followed by log-softmax.
#[derive(Debug, Clone)]
pub struct Generator {
    proj: Linear,
}

impl Generator {
    /// Log-probabilities `(…, vocab)` of decoder states `(…, d_model)`.
    pub fn forward(&self, y: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::log_softmax(&self.logits(y)?, D::Minus1)?)
    }

    /// Unnormalised scores `(…, vocab)` of decoder states `(…, d_model)`: what a fused loss
    /// takes instead of the log-probabilities.
    pub fn logits(&self, y: &Tensor) -> Result<Tensor> {
        Ok(linear::apply(&self.proj, y)?)
    }
}

/// The full encoder-decoder model.
#[derive(Debug, Clone)]
pub struct Transformer {
    cfg: Config,
    src_embed: Embeddings,
    tgt_embed: Embeddings,
    encoder: Stack,
    decoder: Stack,
    generator: Generator,
}

impl Transformer {
    /// Loads or creates every weight under `vb`.
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let d = cfg.d_model;
        let build = |(encoding, direction): (&EncodingConfig, _), layers, name: &str| {
            let target = cfg.target(direction, layers)?;
            Ok::<_, crate::Error>(encoding.build(&target, vb.pp(name))?)
        };
        let [encoder, decoder] = cfg.encoding.stacks();
        let src_pe = build(encoder, cfg.encoder_layers, "encoder.encoding")?;
        let tgt_pe = build(decoder, cfg.decoder_layers, "decoder.encoding")?;
        let src_lut = candle_nn::embedding(cfg.src_vocab_size, d, vb.pp("src_embed"))?;
        let tgt_lut = if cfg.tie_embeddings {
            src_lut.clone()
        } else {
            candle_nn::embedding(cfg.tgt_vocab_size, d, vb.pp("tgt_embed"))?
        };
        let gen_weight = if cfg.tie_embeddings {
            tgt_lut.embeddings().clone()
        } else {
            vb.get_with_hints(
                (cfg.tgt_vocab_size, d),
                "generator.weight",
                candle_nn::init::DEFAULT_KAIMING_NORMAL,
            )?
        };
        let gen_bias =
            vb.get_with_hints(cfg.tgt_vocab_size, "generator.bias", candle_nn::init::ZERO)?;
        Ok(Self {
            cfg: cfg.clone(),
            src_embed: Embeddings::new(
                src_lut,
                cfg.blocks.scale_embeddings,
                src_pe.clone(),
                cfg.dropout,
            ),
            tgt_embed: Embeddings::new(
                tgt_lut,
                cfg.blocks.scale_embeddings,
                tgt_pe.clone(),
                cfg.dropout,
            ),
            encoder: Stack::new(
                &cfg.encoder_block(),
                cfg.encoder_layers,
                src_pe,
                vb.pp("encoder"),
            )?,
            decoder: Stack::new(
                &cfg.decoder_block(),
                cfg.decoder_layers,
                tgt_pe,
                vb.pp("decoder"),
            )?,
            generator: Generator {
                proj: Linear::new(gen_weight, Some(gen_bias)),
            },
        })
    }

    /// The same model over the variables of `varmap` as plain tensors (sharing their
    /// storage): no gradient can flow, so inference takes candle's fused kernels.
    pub fn frozen(cfg: &Config, varmap: &VarMap, device: &Device) -> Result<Self> {
        Self::new(cfg, crate::weights::frozen(varmap, device))
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The encoder stack.
    pub fn encoder(&self) -> &Stack {
        &self.encoder
    }

    /// The decoder stack (its blocks have cross-attention).
    pub fn decoder(&self) -> &Stack {
        &self.decoder
    }

    /// The source and target embeddings.
    pub fn embeddings(&self) -> (&Embeddings, &Embeddings) {
        (&self.src_embed, &self.tgt_embed)
    }

    /// The longest source and target sequences the encodings can take (`None`: unbounded).
    pub fn max_positions(&self) -> (Option<usize>, Option<usize>) {
        (
            self.src_embed.max_positions(),
            self.tgt_embed.max_positions(),
        )
    }

    /// The generator.
    pub fn generator(&self) -> &Generator {
        &self.generator
    }

    /// The device the weights live on.
    pub fn device(&self) -> candle_core::Device {
        self.generator.proj.weight().device().clone()
    }

    /// Encodes source ids `(batch, src_len)` into the memory `(batch, src_len, d_model)`.
    ///
    /// # Errors
    /// Ids not `(batch, seq)` or outside the vocabulary; a mask that does not fit.
    pub fn encode(&self, src: &Tensor, src_mask: Option<&Mask>) -> Result<Tensor> {
        self.encode_at(src, Positions::From(0), src_mask)
    }

    fn encode_at(&self, src: &Tensor, at: Positions, src_mask: Option<&Mask>) -> Result<Tensor> {
        let x = self.src_embed.forward(src, at)?;
        let input = StackInput {
            at,
            tokens: Some(Tokens::new(src)),
            ..StackInput::new(&x, src_mask)
        };
        Ok(self.encoder.forward(input)?.0)
    }

    /// Decoder states `(batch, tgt_len, d_model)` of target ids `(batch, tgt_len)`. Without a
    /// cache, pass the causal (and padding) `tgt_mask`; with one, pass only the new ids:
    /// they are placed after the cached positions, causally without a mask (or under
    /// `tgt_mask`, `(new, cached + new)`, if given).
    ///
    /// # Errors
    /// Ids not `(batch, seq)` or outside the vocabulary; a mask that does not fit.
    pub fn decode(
        &self,
        tgt: &Tensor,
        memory: &Tensor,
        src_mask: Option<&Mask>,
        tgt_mask: Option<&Mask>,
        cache: Option<&mut StackCache>,
    ) -> Result<Tensor> {
        let memory = Memory {
            states: memory,
            mask: src_mask,
        };
        match cache {
            Some(cache) => {
                let at = Positions::From(cache.len());
                let y = self.tgt_embed.forward_cached(tgt, at, cache)?;
                self.decoder
                    .forward_cached(&y, tgt_mask, Some(memory), cache)
            }
            None => {
                let y = self.tgt_embed.forward(tgt, Positions::From(0))?;
                let input = StackInput {
                    memory: Some(memory),
                    tokens: Some(Tokens::new(tgt)),
                    ..StackInput::new(&y, tgt_mask)
                };
                Ok(self.decoder.forward(input)?.0)
            }
        }
    }

    /// Teacher-forced decoder states of the shifted target `tgt_in` over the source `src`,
    /// with every layer's attention weights: the encoder's, then the decoder's (self and
    /// cross).
    ///
    /// # Errors
    /// As [`Transformer::logits`].
    pub fn attention_weights(
        &self,
        src: &Tensor,
        tgt_in: &Tensor,
        src_mask: Option<&Mask>,
        tgt_mask: Option<&Mask>,
    ) -> Result<(Vec<LayerWeights>, Vec<LayerWeights>)> {
        let x = self.src_embed.forward(src, Positions::From(0))?;
        let encoded = StackInput {
            weights: true,
            tokens: Some(Tokens::new(src)),
            ..StackInput::new(&x, src_mask)
        };
        let (memory, encoder) = self.encoder.forward(encoded)?;
        let y = self.tgt_embed.forward(tgt_in, Positions::From(0))?;
        let decoded = StackInput {
            memory: Some(Memory {
                states: &memory,
                mask: src_mask,
            }),
            weights: true,
            tokens: Some(Tokens::new(tgt_in)),
            ..StackInput::new(&y, tgt_mask)
        };
        Ok((encoder, self.decoder.forward(decoded)?.1))
    }

    /// Log-probabilities `(batch, tgt_len, tgt_vocab)` of the next token at every target
    /// position (teacher forcing). `tgt_in` is the shifted target `<s> y_1 … y_(n−1)`.
    ///
    /// # Errors
    /// As [`Transformer::logits`].
    pub fn forward(
        &self,
        src: &Tensor,
        tgt_in: &Tensor,
        src_mask: Option<&Mask>,
        tgt_mask: Option<&Mask>,
    ) -> Result<Tensor> {
        Ok(candle_nn::ops::log_softmax(
            &self.logits(src, tgt_in, src_mask, tgt_mask)?,
            D::Minus1,
        )?)
    }

    /// Unnormalised next-token scores `(batch, tgt_len, tgt_vocab)`: [`Transformer::forward`]
    /// before its log-softmax, for a loss that fuses the two.
    ///
    /// # Shapes
    /// - `src`: `(batch, src_len)`; `tgt_in`: `(batch, tgt_len)`
    /// - output: `(batch, tgt_len, tgt_vocab)`
    ///
    /// # Errors
    /// Ids not `(batch, seq)` or outside the vocabularies; masks that do not fit.
    pub fn logits(
        &self,
        src: &Tensor,
        tgt_in: &Tensor,
        src_mask: Option<&Mask>,
        tgt_mask: Option<&Mask>,
    ) -> Result<Tensor> {
        let from_0 = Positions::From(0);
        self.logits_at(src, tgt_in, (src_mask, tgt_mask), (from_0, from_0))
    }

    /// [`Transformer::logits`] with the source and target tokens at positions `at`
    /// (randomized positions train this way: Ruoss et al. 2023).
    ///
    /// # Errors
    /// As [`Transformer::logits`]; positions the encodings refuse.
    pub fn logits_at(
        &self,
        src: &Tensor,
        tgt_in: &Tensor,
        (src_mask, tgt_mask): (Option<&Mask>, Option<&Mask>),
        (src_at, tgt_at): (Positions, Positions),
    ) -> Result<Tensor> {
        let memory = self.encode_at(src, src_at, src_mask)?;
        let y = self.tgt_embed.forward(tgt_in, tgt_at)?;
        let input = StackInput {
            at: tgt_at,
            memory: Some(Memory {
                states: &memory,
                mask: src_mask,
            }),
            tokens: Some(Tokens::new(tgt_in)),
            ..StackInput::new(&y, tgt_mask)
        };
        let (y, _) = self.decoder.forward(input)?;
        self.generator.logits(&y)
    }

    /// The target mask of "Attention Is All You Need": causal, and padding keys hidden.
    pub fn target_mask(tgt: &Tensor, pad_id: u32) -> Result<Mask> {
        let len = tgt.dim(1)?;
        Mask::causal(len, len, 0, tgt.device())?.and(&Mask::padding(tgt, pad_id)?)
    }
}
