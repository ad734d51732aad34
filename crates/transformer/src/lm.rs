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
use posenc::{Direction, EncodingConfig, PositionalEncoding, Positions, Target, Tokens};
use serde::{Deserialize, Serialize};

use crate::embeddings::Embeddings;
use crate::kv_cache::{KvType, Streaming};
use crate::linear::Proj;
use crate::mask::Mask;
use crate::stack::{Stack, StackCache, StackInput};
use crate::{BlockConfig, BlockOptions, Error, Result, SelfExtend};

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
    /// The blocks' configuration: pre-norm, with a final norm.
    pub fn block(&self) -> BlockConfig {
        self.blocks.block(BlockConfig {
            activation: self.activation,
            norm_first: true,
            eps: self.layer_norm_eps,
            dropout: self.dropout,
            ..BlockConfig::new(self.d_model, self.heads, self.d_ff)
        })
    }

    /// The number of weights, computed from the sizes alone: the token embedding, the head
    /// if untied, the encoding's learned weights and the stack.
    pub fn parameter_count(&self) -> u128 {
        let table = self.vocab_size as u128 * self.d_model as u128;
        let head = if self.tie_embeddings { 0 } else { table };
        let encoding = (self.target()).map_or(0, |t| self.encoding.parameter_count(&t));
        table + head + encoding + self.block().stack_parameters(self.layers)
    }

    /// What the encoding is built for: causal attention of this width, heads and key/value
    /// heads, over the trained context, in every layer.
    ///
    /// # Errors
    /// Heads or key/value heads out of place.
    pub fn target(&self) -> Result<Target> {
        let target = Target::new(self.d_model, self.heads, Direction::Causal)?
            .with_context(self.context)
            .with_layers(self.layers);
        Ok(target.with_kv_heads(self.block().kv_heads)?)
    }

    /// Checks sizes against the blocks' limits, and that the context is positive.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first field out of place.
    pub fn validate(&self) -> Result<()> {
        use posenc::limits::check;
        check("layers", self.layers, crate::MAX_LAYERS)?;
        check("vocab_size", self.vocab_size, crate::MAX_VOCAB)?;
        self.block().validate()?;
        crate::config::check_parameters(self.parameter_count())?;
        self.target()?.head_dim()?;
        posenc::limits::check_positive("context", self.context, posenc::limits::MAX_POSITIONS)?;
        Ok(())
    }
}

/// How many prompt tokens [`LanguageModel::step`] runs through the stack at once unless
/// told otherwise ([`LanguageModel::read_prompts_by`]): the activations of a prompt of any
/// length are those of this many tokens.
pub const PREFILL_CHUNK: usize = 512;

/// The largest prompt chunk [`LanguageModel::read_prompts_by`] takes: the attention
/// scores of one head over it and as many cached positions fit in 16 GiB of f32.
pub const MAX_PREFILL_CHUNK: usize = 1 << 16;

/// The largest key/value cache [`LanguageModel::check_cache`] lets a generation or an
/// evaluation allocate: 12 GiB, half of a 24 GiB machine.
pub const MAX_CACHE_BYTES: u128 = 12 << 30;

/// The decoder-only model: embeddings, a causal stack, a tied head.
#[derive(Debug, Clone)]
pub struct LanguageModel {
    cfg: LmConfig,
    embed: Embeddings,
    stack: Stack,
    head: Proj,
    /// The dtype [`LanguageModel::cache`] keeps keys and values in.
    cache_type: KvType,
    /// Tokens [`LanguageModel::step`] reads per pass.
    prefill_chunk: usize,
}

impl LanguageModel {
    /// Loads or creates every weight under `vb`: `embed.weight`, `encoding.*` (learned
    /// encodings), `stack.layers.N.*`, `stack.norm.*`, and `head.weight` if untied.
    pub fn new(cfg: &LmConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let encoding = cfg.encoding.build(&cfg.target()?, vb.pp("encoding"))?;
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
            stack: Stack::new(&cfg.block(), cfg.layers, encoding, vb.pp("stack"))?,
            head,
            cache_type: KvType::F32,
            prefill_chunk: PREFILL_CHUNK,
        })
    }

    /// The same model over the variables of `varmap` as plain tensors: no gradient can
    /// flow, so inference takes candle's fused kernels.
    pub fn frozen(cfg: &LmConfig, varmap: &VarMap, device: &Device) -> Result<Self> {
        Self::new(cfg, crate::weights::frozen(varmap, device))
    }

    /// The same weights with another positional encoding, built for causal attention:
    /// what a pretrained model does when its encoding's behaviour is swapped (position
    /// interpolation, another base, no encoding at all). Weights of the new encoding, if it
    /// has any, start untrained.
    ///
    /// # Errors
    /// An encoding that does not fit the model's heads.
    pub fn with_encoding(mut self, encoding: &EncodingConfig) -> Result<Self> {
        let target = self.cfg.target()?;
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

    /// The same model reading past its context with self-extend ([`SelfExtend`]): keys
    /// further than `window` from a query at grouped positions, with no training.
    ///
    /// # Errors
    /// A window wider than the trained context, or an encoding that does not rotate queries
    /// and keys or that adds anything else to the scores (self-extend regroups rotary
    /// positions; a bias or a decay would still read the true distances).
    pub fn with_self_extend(mut self, self_extend: SelfExtend) -> Result<Self> {
        self_extend.check_context(self.cfg.context)?;
        crate::self_extend::check_encoding(self.stack.encoding().as_ref())?;
        self.stack.set_self_extend(Some(self_extend));
        Ok(self)
    }

    /// Values per head: `d_model / heads`.
    fn head_dim(&self) -> usize {
        self.cfg.d_model / self.cfg.heads.max(1)
    }

    /// The device the weights live on.
    pub fn device(&self) -> candle_core::Device {
        self.embed.weight().device().clone()
    }

    /// Keeps the keys and values of the caches [`LanguageModel::cache`] makes as `kind`
    /// (f32 at first): f16 halves a long generation's memory, at a rounding of each key and
    /// value to 11 significant bits, as llama.cpp's default cache does; Q8_0 and Q4_0
    /// blocks (llama.cpp's `-ctk`/`-ctv`) take 0.53 and 0.28 of f16's bytes.
    ///
    /// # Errors
    /// Blocks the model's heads cannot fill (a head size that is not a multiple of 32).
    pub fn keep_cache_as(&mut self, kind: KvType) -> Result<()> {
        kind.row_bytes(self.head_dim())?;
        self.cache_type = kind;
        Ok(())
    }

    /// Reads prompts `tokens` at a time ([`PREFILL_CHUNK`] at first): fewer, larger passes
    /// over a long prompt, at activations (and, off the CPU's tiled kernel, attention
    /// scores) that grow with the chunk, as llama.cpp's `--ubatch-size`.
    ///
    /// # Errors
    /// A chunk of 0 or past [`MAX_PREFILL_CHUNK`].
    pub fn read_prompts_by(&mut self, tokens: usize) -> Result<()> {
        posenc::limits::check_positive("the prompt chunk", tokens, MAX_PREFILL_CHUNK)?;
        self.prefill_chunk = tokens;
        Ok(())
    }

    /// Tokens [`LanguageModel::step`] reads per pass.
    pub fn prefill_chunk(&self) -> usize {
        self.prefill_chunk
    }

    /// What the caches of [`LanguageModel::cache`] keep keys and values as.
    pub fn cache_type(&self) -> KvType {
        self.cache_type
    }

    /// An empty cache with room for `positions` ([`StackCache::with_capacity`]), kept as
    /// [`LanguageModel::cache_type`].
    pub fn cache(&self, positions: usize) -> StackCache {
        StackCache::with_capacity(positions).kept_as(self.cache_type)
    }

    /// An empty cache that rolls ([`Streaming`]): the first `sinks` tokens and the most
    /// recent ones, `window` positions in all, kept as [`LanguageModel::cache_type`]. With
    /// it [`LanguageModel::step`] and [`LanguageModel::logits_cached`] read any length in
    /// constant memory, each token at its place within the cache (StreamingLLM).
    ///
    /// # Errors
    /// A window past a learned encoding's table, or whose cache would pass
    /// [`MAX_CACHE_BYTES`].
    pub fn rolling_cache(&self, streaming: Streaming) -> Result<StackCache> {
        self.check_cache(1, streaming.window())?;
        Ok(StackCache::default()
            .kept_as(self.cache_type)
            .rolling(streaming))
    }

    /// The token embeddings, to quantize their table.
    pub fn embeddings_mut(&mut self) -> &mut Embeddings {
        &mut self.embed
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
    /// # Shapes
    /// - `ids`: `(batch, seq)`, `u32`
    /// - output: `(batch, seq, vocab)`
    ///
    /// # Errors
    /// A bad shape or token id; a sequence longer than a learned encoding's table, naming it.
    pub fn logits(&self, ids: &Tensor) -> Result<Tensor> {
        self.logits_at(ids, Positions::From(0))
    }

    /// [`LanguageModel::logits`] with the tokens at positions `at`, shared by every
    /// sequence of the batch (randomized positions train this way: Ruoss et al. 2023).
    ///
    /// # Errors
    /// As [`LanguageModel::logits`]; also a list that is not one increasing position per
    /// token.
    pub fn logits_at(&self, ids: &Tensor, at: Positions) -> Result<Tensor> {
        let seq = self.check(ids, at)?;
        let mask = Mask::causal(seq, seq, 0, ids.device())?;
        let x = self.embed.forward(ids, at)?;
        let input = StackInput {
            at,
            tokens: Some(Tokens::new(ids)),
            ..StackInput::new(&x, Some(&mask))
        };
        let (h, _) = self.stack.forward(input)?;
        Ok(self.head.forward(&h)?)
    }

    /// Every layer's self-attention weights `(batch, heads, seq, seq)` over `ids (batch,
    /// seq)` at positions `0, 1, …`: what each position attends to, each row summing to 1
    /// over the keys it may see (those before it and itself).
    ///
    /// # Shapes
    /// - `ids`: `(batch, seq)`, `u32`
    /// - output: one `(batch, heads, seq, seq)` tensor per layer
    ///
    /// # Errors
    /// As [`LanguageModel::logits`].
    pub fn attention_weights(&self, ids: &Tensor) -> Result<Vec<Tensor>> {
        let seq = self.check(ids, Positions::From(0))?;
        let mask = Mask::causal(seq, seq, 0, ids.device())?;
        let x = self.embed.forward(ids, Positions::From(0))?;
        let input = StackInput {
            weights: true,
            tokens: Some(Tokens::new(ids)),
            ..StackInput::new(&x, Some(&mask))
        };
        let (_, layers) = self.stack.forward(input)?;
        Ok(layers.into_iter().map(|w| w.self_attn).collect())
    }

    /// Runs `ids (batch, new)` after the positions in `cache` and returns the next-token
    /// scores `(batch, vocab)` after the last of them; the cache grows by `new`. Only that
    /// position goes through the head, so a long prompt costs no `new × vocab` product, and
    /// the prompt is read [`LanguageModel::prefill_chunk`] tokens at a time, so the
    /// activations stay `O(chunk × d_model)` whatever its length (chunked prefill).
    ///
    /// # Shapes
    /// - `ids`: `(batch, new)`, `u32`
    /// - output: `(batch, vocab)`
    ///
    /// # Errors
    /// A bad shape or token id; positions past a learned encoding's table; a batch that
    /// differs from the cache's.
    pub fn step(&self, ids: &Tensor, cache: &mut StackCache) -> Result<Tensor> {
        let new = self.check_cached(ids, cache)?;
        // Every chunk of the prompt is a piece of one sequence of this length (or of a
        // longer one, when the caller reads it in pieces and has said how long).
        cache.read_until(cache.reach().max(cache.len() + new));
        let mut last = None;
        for (start, len) in self.chunks(new, self.prefill_chunk, cache) {
            last = Some(self.hidden_cached(&ids.narrow(1, start, len)?, cache)?);
        }
        let h = last.ok_or_else(|| Error::Input("no tokens to run".into()))?;
        let n = h.dim(1)?;
        Ok(self.head.forward(&h.narrow(1, n - 1, 1)?.squeeze(1)?)?)
    }

    /// `(start, len)` of the pieces of `new` tokens read `size` at a time, or fewer where
    /// a rolling cache takes fewer at once ([`Streaming::most_new`]).
    fn chunks(&self, new: usize, size: usize, cache: &StackCache) -> Vec<(usize, usize)> {
        let size = cache
            .rolls()
            .map_or(size, |s| size.min(s.most_new()))
            .max(1);
        (0..new)
            .step_by(size)
            .map(|start| (start, size.min(new - start)))
            .collect()
    }

    /// Checks `ids` as [`LanguageModel::check`] does at the positions the cache puts them:
    /// after the cached ones, or within a rolling cache's window, which a learned table
    /// was checked to hold when the cache was made.
    fn check_cached(&self, ids: &Tensor, cache: &StackCache) -> Result<usize> {
        match cache.rolls() {
            None => self.check(ids, Positions::From(cache.len())),
            Some(_) => match *ids.dims() {
                [_, seq] if seq > 0 => {
                    self.check(&ids.narrow(1, 0, 1)?, 0.into())?;
                    Ok(seq)
                }
                _ => self.check(ids, 0.into()),
            },
        }
    }

    /// Runs `ids (batch, new)` after the positions in `cache`, as [`LanguageModel::step`]
    /// does, and returns the next-token scores at every one of them, `(batch, new, vocab)`:
    /// to score a long text chunk by chunk in memory that grows linearly with its length.
    ///
    /// # Errors
    /// As [`LanguageModel::step`].
    pub fn logits_cached(&self, ids: &Tensor, cache: &mut StackCache) -> Result<Tensor> {
        let new = self.check_cached(ids, cache)?;
        let mut parts = Vec::new();
        for (start, len) in self.chunks(new, new, cache) {
            let h = self.hidden_cached(&ids.narrow(1, start, len)?, cache)?;
            parts.push(self.head.forward(&h)?);
        }
        match parts.len() {
            1 => Ok(parts.swap_remove(0)),
            _ => Ok(Tensor::cat(&parts, 1)?),
        }
    }

    /// The stack's output for `ids` after the cached positions.
    fn hidden_cached(&self, ids: &Tensor, cache: &mut StackCache) -> Result<Tensor> {
        let at = match cache.rolls() {
            Some(_) => cache.positions(ids.dim(1)?),
            None => Positions::From(cache.len()),
        };
        let x = self.embed.forward_cached(ids, at, cache)?;
        self.stack.forward_cached(&x, None, None, cache)
    }

    /// The bytes of the key/value cache for `batch` sequences of `positions` tokens (kept
    /// as [`LanguageModel::cache_type`]): what a generation or a long evaluation holds
    /// besides the weights and one chunk's activations.
    pub fn cache_bytes(&self, batch: usize, positions: usize) -> u128 {
        let kv_heads = self.cfg.blocks.kv_heads.unwrap_or(self.cfg.heads) as u128;
        // `keep_cache_as` checked that the heads fill whole blocks.
        let row = (self.cache_type.row_bytes(self.head_dim())).unwrap_or(4 * self.head_dim());
        let per_position = 2 * self.cfg.layers as u128 * kv_heads * row as u128;
        per_position * batch as u128 * positions as u128
    }

    /// Checks, before anything is allocated, that a cache of `batch` sequences of
    /// `positions` tokens fits within [`MAX_CACHE_BYTES`] and the encoding's table.
    ///
    /// # Errors
    /// A cache too large, naming its size; positions past a learned encoding's table.
    pub fn check_cache(&self, batch: usize, positions: usize) -> Result<()> {
        let bytes = self.cache_bytes(batch, positions);
        if bytes > MAX_CACHE_BYTES {
            return Err(Error::Input(format!(
                "{positions} positions are too long: their key/value cache for {batch} sequence(s) would take {:.1} GiB, past the limit of {} GiB",
                bytes as f64 / (1u64 << 30) as f64,
                MAX_CACHE_BYTES >> 30
            )));
        }
        if let Some(max) = self.max_positions() {
            if positions > max {
                return Err(Error::Input(format!(
                    "{positions} positions are past the `{}` encoding's table of max_positions = {max}",
                    self.cfg.encoding.kind()
                )));
            }
        }
        Ok(())
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
