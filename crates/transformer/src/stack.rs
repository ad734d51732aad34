//! A stack of `N` identical blocks with an optional final norm ("Attention Is All You
//! Need" §3.1): the encoder, the decoder and every causal language model.
//!
//! ```text
//! x ← Block_i(x, mask[, memory])   for i = 1 … N      (crate::block)
//! x ← Norm(x)                      (if final_norm)
//! ```
//!
//! The encoder's blocks have no cross-attention and attend under a padding mask; the
//! decoder's have cross-attention and a causal mask; a decoder-only model's are the
//! encoder's under a causal mask. The stack holds the positional encoding of its
//! self-attention (`LayerEncodings`: one for every block, or one per block): its bias is
//! computed once per forward and handed to every block. A [`StackCache`] runs the stack
//! one step at a time. Weights named as PyTorch's `nn.TransformerEncoder` /
//! `nn.TransformerDecoder`: `layers.N.…` and the final `norm`.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Module, VarBuilder};
use posenc::{PositionalEncoding, Positions, Tokens};

use crate::attention::{AttentionInput, Source};
use crate::block::{Block, BlockOutput, CrossInput};
use crate::kv_cache::{KvCache, KvType, Streaming};
use crate::layer_encodings::{bias_of, LayerEncodings};
use crate::linear::Proj;
use crate::mask::Mask;
use crate::sublayer::Norm;
use crate::BlockConfig;
use crate::{Error, Result, MAX_LAYERS};

/// Keys and values of every block, for a stack run one step at a time: each block's
/// self-attention cache, and its cross-attention's cache of the memory.
#[derive(Debug, Default)]
pub struct StackCache {
    layers: Vec<(KvCache, KvCache)>,
    reserved: usize,
    reach: usize,
    kind: Option<KvType>,
    streaming: Option<Streaming>,
    /// The ids run so far, `(batch, seen)`, kept for an encoding that reads the tokens.
    tokens: Option<Tensor>,
}

impl StackCache {
    /// A cache whose blocks allocate room for `positions` at their first write
    /// ([`KvCache::reserve`]): a generation of known length allocates once (up to
    /// [`crate::RESERVE_AHEAD`] positions ahead).
    pub fn with_capacity(positions: usize) -> Self {
        Self {
            reserved: positions,
            ..Self::default()
        }
    }

    /// The same empty cache, keeping its self-attention keys and values as `kind`
    /// ([`KvCache::kept_as`]).
    pub fn kept_as(self, kind: KvType) -> Self {
        Self {
            kind: Some(kind),
            ..self
        }
    }

    /// The same empty cache, rolling in every block ([`Streaming`]): it holds the first
    /// `sinks` tokens and the most recent ones, `window` positions in all, whatever the
    /// length read.
    pub fn rolling(self, streaming: Streaming) -> Self {
        Self {
            streaming: Some(streaming),
            ..self
        }
    }

    /// How the cache rolls, if it does.
    pub fn rolls(&self) -> Option<Streaming> {
        self.streaming
    }

    /// Positions run in all, those a rolling cache has evicted included.
    pub fn seen(&self) -> usize {
        self.layers.first().map_or(0, |(own, _)| own.seen())
    }

    /// Where `new` tokens run next sit ([`KvCache`]'s positions): after the cached ones, or
    /// in a rolling cache, after the ones that stay.
    pub fn positions(&self, new: usize) -> Positions<'static> {
        self.layers
            .first()
            .map_or(Positions::From(0), |(own, _)| own.positions(new))
    }

    /// What the self-attention keys and values are kept as, if it was named.
    pub fn kind(&self) -> Option<KvType> {
        self.kind
    }

    /// Number of positions held: run so far, less those a rolling cache has evicted.
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, |(own, _)| own.len())
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
        let layers = self
            .layers
            .iter()
            .map(|(own, cross)| Ok::<_, Error>((own.try_clone()?, cross.try_clone()?)));
        Ok(Self {
            layers: layers.collect::<Result<_>>()?,
            // Never written in place: a shared tensor is a copy of its own.
            tokens: self.tokens.clone(),
            ..*self
        })
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

    /// Keeps batch entries `indices` (u32), in that order, in every block: beam search
    /// reorders hypotheses.
    ///
    /// # Errors
    /// Indices past the batch.
    pub fn select(&mut self, indices: &Tensor) -> Result<()> {
        for (own, cross) in &mut self.layers {
            own.select(indices)?;
            cross.select(indices)?;
        }
        if let Some(tokens) = &self.tokens {
            self.tokens = Some(tokens.index_select(indices, 0)?);
        }
        Ok(())
    }

    /// The ids run so far `(batch, seen)`, where they were kept ([`StackCache::keep_tokens`]).
    pub fn tokens(&self) -> Option<&Tensor> {
        self.tokens.as_ref()
    }

    /// Keeps `ids (batch, new)`, run next, after those kept: for an encoding that reads
    /// the tokens ([`posenc::Capabilities::reads_tokens`]).
    ///
    /// # Errors
    /// Ids whose batch differs from those kept.
    pub fn keep_tokens(&mut self, ids: &Tensor) -> Result<()> {
        let ids = ids.to_dtype(candle_core::DType::U32)?;
        self.tokens = Some(match &self.tokens {
            None => ids,
            Some(kept) => Tensor::cat(&[kept, &ids], 1)?,
        });
        Ok(())
    }
}

/// The encoder's output that every block's cross-attention reads.
#[derive(Debug, Clone, Copy)]
pub struct Memory<'a> {
    /// `(batch, memory_len, d_model)`.
    pub states: &'a Tensor,
    /// Which memory positions may be seen (the source's padding).
    pub mask: Option<&'a Mask>,
}

/// One forward's inputs.
#[derive(Debug, Clone, Copy)]
pub struct StackInput<'a> {
    /// The embedded sequence `(batch, seq, d_model)`.
    pub x: &'a Tensor,
    /// Its positions (`0, 1, …` usually; randomized positions train at others).
    pub at: Positions<'a>,
    /// Which keys each query may see: padding, causal, or both.
    pub mask: Option<&'a Mask>,
    /// The encoder's output, for blocks with cross-attention.
    pub memory: Option<Memory<'a>>,
    /// Return every block's attention weights.
    pub weights: bool,
    /// The token ids of `x`, for an encoding that reads them in attention
    /// ([`posenc::Capabilities::reads_tokens`]);
    /// `None`, it is not given them.
    pub tokens: Option<Tokens<'a>>,
}

impl<'a> StackInput<'a> {
    /// `x` at positions `0, 1, …` under `mask`, with no memory, no weights asked for.
    pub fn new(x: &'a Tensor, mask: Option<&'a Mask>) -> Self {
        Self {
            x,
            at: Positions::From(0),
            mask,
            memory: None,
            weights: false,
            tokens: None,
        }
    }
}

/// The attention weights of one block.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// Self-attention, `(batch, heads, seq, seq)`.
    pub self_attn: Tensor,
    /// Cross-attention, `(batch, heads, seq, memory_len)`, for a block that has one.
    pub cross_attn: Option<Tensor>,
}

/// `N` blocks and an optional final norm.
#[derive(Debug, Clone)]
pub struct Stack {
    layers: Vec<Block>,
    norm: Option<Norm>,
    encodings: LayerEncodings,
}

impl Stack {
    /// Loads or creates `layers` blocks of `cfg` under `vb` (`layers.N`, and `norm` if
    /// `cfg.final_norm`); `encoding` serves their self-attention.
    ///
    /// # Errors
    /// More than [`MAX_LAYERS`] blocks; a configuration [`BlockConfig::validate`] refuses;
    /// a missing or mis-shaped weight.
    pub fn new(
        cfg: &BlockConfig,
        layers: usize,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        posenc::limits::check("layers", layers, MAX_LAYERS)?;
        cfg.validate()?;
        let encodings = LayerEncodings::new(encoding, layers);
        let blocks = (0..layers)
            .map(|i| {
                Block::new(
                    cfg,
                    encodings.layer(i).clone(),
                    vb.pp(format!("layers.{i}")),
                )
            })
            .collect::<Result<_>>()?;
        let norm = cfg
            .final_norm
            .then(|| Norm::of(cfg, vb.pp("norm")))
            .transpose()?;
        Ok(Self {
            layers: blocks,
            norm,
            encodings,
        })
    }

    /// Every block's projections, named `layers.N.…` ([`Block::projections_mut`]).
    pub fn projections_mut(&mut self) -> Vec<(String, &mut Proj)> {
        let layers = self.layers.iter_mut().enumerate();
        layers
            .flat_map(|(i, layer)| {
                let named = layer.projections_mut().into_iter();
                named.map(move |(n, p)| (format!("layers.{i}.{n}"), p))
            })
            .collect()
    }

    /// Replaces the positional encoding of the stack and of every block's self-attention.
    pub(crate) fn set_encoding(&mut self, encoding: Arc<dyn PositionalEncoding>) {
        self.encodings = LayerEncodings::new(encoding, self.layers.len());
        for (i, layer) in self.layers.iter_mut().enumerate() {
            layer.set_encoding(self.encodings.layer(i).clone());
        }
    }

    /// Self-extend in every block's self-attention ([`crate::SelfExtend`]), or none.
    pub(crate) fn set_self_extend(&mut self, self_extend: Option<crate::SelfExtend>) {
        for layer in &mut self.layers {
            layer.set_self_extend(self_extend);
        }
    }

    /// The positional encoding of this stack.
    pub fn encoding(&self) -> &Arc<dyn PositionalEncoding> {
        self.encodings.stack()
    }

    /// Runs the embedded `input.x` through every block, all positions at once.
    ///
    /// # Shapes
    /// - `input.x`: `(batch, seq, d_model)`
    /// - output: `(batch, seq, d_model)`, and one [`LayerWeights`] per block if asked for
    ///
    /// # Errors
    /// Inputs of the wrong shape; memory missing for (or given to) blocks that do (or do
    /// not) have cross-attention; positions the encoding refuses.
    pub fn forward(&self, input: StackInput) -> Result<(Tensor, Vec<LayerWeights>)> {
        let StackInput {
            x,
            at,
            mask,
            memory,
            weights,
            tokens,
        } = input;
        let seq = x.dim(1)?;
        let (keys, k_len) = at.keys(seq);
        let biases = self.encodings.biases(tokens, seq, k_len, at, keys)?;
        let mut x = x.clone();
        let mut all = Vec::with_capacity(if weights { self.layers.len() } else { 0 });
        for (i, layer) in self.layers.iter().enumerate() {
            x = self.encodings.input(i, x, at)?;
            let own = AttentionInput {
                x: &x,
                source: Source::Own {
                    at,
                    bias: bias_of(&biases, i),
                },
                mask,
                cache: None,
                weights,
            };
            let cross = memory.map(|m| CrossInput {
                states: m.states,
                mask: m.mask,
                cache: None,
                weights,
            });
            let BlockOutput {
                hidden,
                self_weights,
                cross_weights,
            } = layer.forward(own, cross)?;
            x = hidden;
            if let Some(self_attn) = self_weights {
                all.push(LayerWeights {
                    self_attn,
                    cross_attn: cross_weights,
                });
            }
        }
        Ok((self.final_norm(x)?, all))
    }

    /// Runs the embedded `x` causally after the positions in `cache` and adds them to it,
    /// at inference: how a decoder-only model reads a prompt and generates, and how a
    /// decoder translates token by token. Without a `mask` no attention weights exist, and
    /// self-attention's memory is linear in the cached length
    /// ([`crate::attention::MultiHeadAttention::forward`]); a `mask` `(new, cached + new)`
    /// takes the composite path under it. An encoding that reads the tokens in attention
    /// ([`posenc::Capabilities::reads_tokens`]) is given those the cache keeps (the
    /// embeddings keep them, `x`'s last: [`Embeddings::forward_cached`](crate::embeddings::Embeddings::forward_cached)):
    /// its bias is computed once for the new queries against every key, which then take
    /// the composite path under a causal mask.
    ///
    /// # Shapes
    /// - `x`: `(batch, new, d_model)`; `mask`: broadcastable to `(batch, heads, new, cached + new)`
    /// - output: `(batch, new, d_model)`
    ///
    /// # Errors
    /// `x` of the wrong width, or a batch that differs from the cache's; memory missing for
    /// (or given to) blocks that do (or do not) have cross-attention.
    pub fn forward_cached(
        &self,
        x: &Tensor,
        mask: Option<&Mask>,
        memory: Option<Memory>,
        cache: &mut StackCache,
    ) -> Result<Tensor> {
        let (reserved, kind, streaming) = (cache.reserved, cache.kind, cache.streaming);
        cache.layers.resize_with(self.layers.len(), || {
            let own = match streaming {
                Some(s) => KvCache::streaming(s, kind),
                None => {
                    let mut own = kind.map_or_else(KvCache::default, KvCache::kept_as);
                    own.reserve(reserved);
                    own
                }
            };
            (own, KvCache::default())
        });
        // The bias an encoding reads from the kept tokens, and the causal mask it then needs.
        let new = x.dim(1)?;
        let read = match cache.tokens() {
            Some(kept) if self.encodings.reads_tokens() && streaming.is_none() => {
                let cached = cache.len();
                if kept.dim(1)? != cached + new {
                    return Err(Error::Input(format!(
                        "the cache keeps {} token ids for {cached} cached and {new} new positions: \
                         run the embeddings' forward_cached first",
                        kept.dim(1)?
                    )));
                }
                let (before, ids) = (kept.narrow(1, 0, cached)?, kept.narrow(1, cached, new)?);
                let tokens = Tokens {
                    ids: &ids,
                    before: (cached > 0).then_some(&before),
                };
                let at = Positions::From(cached);
                let biases =
                    self.encodings
                        .biases(Some(tokens), new, cached + new, at, 0.into())?;
                match biases.iter().any(Option::is_some) {
                    true => Some((biases, Mask::causal(new, cached + new, cached, x.device())?)),
                    false => None,
                }
            }
            _ => None,
        };
        let mask = mask.or(read.as_ref().map(|(_, causal)| causal));
        let mut x = x.clone();
        for (i, (layer, (own, cross))) in self.layers.iter().zip(&mut cache.layers).enumerate() {
            own.read_until(cache.reach);
            let at = own.positions(new);
            x = self.encodings.input(i, x, at)?;
            let bias = read.as_ref().and_then(|(biases, _)| bias_of(biases, i));
            let input = AttentionInput {
                x: &x,
                source: Source::Own { at, bias },
                mask,
                cache: Some(own),
                weights: false,
            };
            let memory = memory.map(|m| CrossInput {
                states: m.states,
                mask: m.mask,
                cache: Some(cross),
                weights: false,
            });
            x = layer.forward(input, memory)?.hidden;
        }
        self.final_norm(x)
    }

    /// Runs sequences packed end to end along the rows of embedded `x`, `lens` tokens each,
    /// at inference: no product is spent on padding. Each sequence sits at positions
    /// `0, 1, …` and attends to its own tokens only, so on every real token the output
    /// equals [`Stack::forward`] of the padded batch with its padding mask. Bidirectional:
    /// for an encoder, not a causal model; and not for blocks with cross-attention.
    ///
    /// # Shapes
    /// - `x`: `(1, n, d_model)` with `n` the sum of `lens`
    /// - output: `(1, n, d_model)`
    ///
    /// # Errors
    /// `x` not `(1, n, d_model)`.
    pub fn forward_packed(&self, x: &Tensor, lens: &[usize]) -> Result<Tensor> {
        let longest = crate::attention::check_packed(x, lens)?;
        let from0 = Positions::From(0);
        let biases = self
            .encodings
            .biases(None, longest, longest, from0, from0)?;
        let mut x = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = self.packed_input(i, x, lens)?;
            x = layer.through(&x, |attention, x| {
                attention.packed_self_attention(x, lens, bias_of(&biases, i))
            })?;
        }
        self.final_norm(x)
    }

    /// The input of block `i` of sequences packed along the rows of `x (1, n, d_model)`,
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
