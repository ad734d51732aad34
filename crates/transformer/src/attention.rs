//! Scaled dot-product attention over `h` heads ("Attention Is All You Need" §3.2).
//!
//! ```text
//! Attention(Q, K, V) = softmax(QKᵀ/√d_k + B + M) V
//! MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O,   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
//! ```
//!
//! In self-attention the positional encoding may rotate Q and K (RoPE) and supply the bias
//! `B` (ALiBi, T5), which the stack computes once per forward and hands to every layer;
//! `M` is the mask. Cross-attention relates target positions to source
//! positions, which no encoding orders, so it calls no positional hook (as T5 and Marian).
//!
//! The weights follow PyTorch's `nn.MultiheadAttention`: `in_proj_weight (3d, d)` packs
//! `W^Q, W^K, W^V`, with `in_proj_bias` and `out_proj`; a checkpoint that holds them apart
//! (`q_proj`, `k_proj`, `v_proj`, as Hugging Face's) loads as it is.
//!
//! The products, the softmax and attention itself are calls to [`posenc_kernels`], which
//! picks the path for the device and dtype: attention without a score bias is one op with
//! its own backward ([`kernels::attention`]), reading the projections with their heads
//! still merged; with a bias, the weights are [`kernels::attention_softmax`].

use std::ops::Range;
use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{init, Init, VarBuilder};
use posenc::{Decay, PositionalEncoding, Positions};
use posenc_kernels as kernels;

use crate::dropout;
use crate::kv_cache::{DecaySums, KvCache};
use crate::linear::Proj;
use crate::mask::Mask;
use crate::self_extend::{self, SelfExtend};
use crate::{BlockConfig, Error, Result};
use posenc_kernels::kv_blocks::Kept;

/// Multi-head attention, self or cross. Self-attention holds the positional encoding;
/// cross-attention relates two sequences that no encoding orders, and holds none.
#[derive(Debug, Clone)]
pub struct MultiHeadAttention {
    q_proj: Proj,
    k_proj: Proj,
    v_proj: Proj,
    out_proj: Proj,
    heads: usize,
    head_dim: usize,
    dropout: f32,
    encoding: Option<Arc<dyn PositionalEncoding>>,
    /// Self-extend's grouped reading of far keys, when set ([`SelfExtend`]).
    self_extend: Option<SelfExtend>,
}

/// Queries taken at once by attention with self-extend: its scores span this many rows.
const SELF_EXTEND_ROWS: usize = 64;

/// Where the keys and values of an attention call come from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// The queries themselves (self-attention), at positions `at`, with the encoding's
    /// position `bias` `(heads, q_len, k_len)` for these queries and keys if it has one
    /// ([`PositionalEncoding::attention_bias`]).
    Own {
        /// The queries' positions.
        at: Positions<'a>,
        /// The position bias, computed once per forward by the stack.
        bias: Option<&'a Tensor>,
    },
    /// Another sequence, `(batch, k_len, d_model)`: cross-attention over an encoder's output.
    Memory(&'a Tensor),
    /// Distinct key and value inputs, `(batch, k_len, d_model)` each, with no positional
    /// hooks: PyTorch's `nn.MultiheadAttention(query, key, value)`.
    KeysValues(&'a Tensor, &'a Tensor),
}

/// One attention call's inputs.
///
/// ```
/// # use candle_core::{Device, Tensor};
/// # use posenc_transformer::attention::AttentionInput;
/// let x = Tensor::zeros((1, 3, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
/// let input = AttentionInput::own(&x).with_weights();
/// assert!(input.weights && input.mask.is_none() && input.cache.is_none());
/// ```
#[derive(Debug)]
pub struct AttentionInput<'a> {
    /// The queries' input `(batch, q_len, d_model)`.
    pub x: &'a Tensor,
    /// Where keys and values come from.
    pub source: Source<'a>,
    /// Which keys each query may see.
    pub mask: Option<&'a Mask>,
    /// Keys and values computed before. For self-attention `x` holds the new positions
    /// only: they are appended and attend to everything cached. For cross-attention the
    /// memory's keys and values are projected once and reused.
    pub cache: Option<&'a mut KvCache>,
    /// Return the attention weights. Without a mask or weights, cached self-attention runs
    /// tile by tile, so that at long lengths no `(q_len, k_len)` matrix exists at all.
    pub weights: bool,
}

impl<'a> AttentionInput<'a> {
    /// Self-attention of `x` at positions `0, 1, …`: no bias, mask or cache, no weights.
    pub fn own(x: &'a Tensor) -> Self {
        Self {
            x,
            source: Source::Own {
                at: Positions::From(0),
                bias: None,
            },
            mask: None,
            cache: None,
            weights: false,
        }
    }

    /// The same input with its mask.
    pub fn with_mask(self, mask: Option<&'a Mask>) -> Self {
        Self { mask, ..self }
    }

    /// The same input with a cache.
    pub fn with_cache(self, cache: &'a mut KvCache) -> Self {
        Self {
            cache: Some(cache),
            ..self
        }
    }

    /// The same input, asking for the weights.
    pub fn with_weights(self) -> Self {
        Self {
            weights: true,
            ..self
        }
    }
}

/// What an attention call returns.
#[derive(Debug, Clone)]
pub struct Attended {
    /// `(batch, q_len, d_model)`.
    pub output: Tensor,
    /// `(batch, heads, q_len, k_len)`, when they were asked for.
    pub weights: Option<Tensor>,
}

impl MultiHeadAttention {
    /// Attention as `cfg` describes it: its width, heads, key/value heads, biases and
    /// dropout. `encoding` supplies the positional hooks of self-attention (`None` for
    /// cross-attention).
    ///
    /// The projections load from PyTorch's packed `in_proj_weight ((heads + 2·kv_heads)·d_k,
    /// d_model)` (with `in_proj_bias` if `cfg.bias`), or from `q_proj`, `k_proj` and
    /// `v_proj` when `vb` holds those and no packed one; a new model creates the packed
    /// form. Then `out_proj`.
    ///
    /// # Errors
    /// Heads that do not divide the width; missing or mis-shaped weights.
    pub fn new(
        cfg: &BlockConfig,
        encoding: Option<Arc<dyn PositionalEncoding>>,
        vb: VarBuilder,
    ) -> Result<Self> {
        cfg.validate()?;
        let (d_model, bias) = (cfg.d_model, cfg.bias);
        let head_dim = cfg.head_dim();
        let kv_dim = cfg.kv_heads * head_dim;
        let [q_proj, k_proj, v_proj] =
            if !vb.contains_tensor("in_proj_weight") && vb.contains_tensor("q_proj.weight") {
                let load = |name: &str, rows: usize| Proj::load(d_model, rows, bias, vb.pp(name));
                [
                    load("q_proj", d_model)?,
                    load("k_proj", kv_dim)?,
                    load("v_proj", kv_dim)?,
                ]
            } else {
                packed(d_model, kv_dim, bias, &vb)?
            };
        Ok(Self {
            q_proj,
            k_proj,
            v_proj,
            out_proj: Proj::load(d_model, d_model, bias, vb.pp("out_proj"))?,
            heads: cfg.heads,
            head_dim,
            dropout: cfg.dropout,
            encoding,
            self_extend: None,
        })
    }

    /// Replaces the positional encoding of self-attention.
    pub(crate) fn set_encoding(&mut self, encoding: Arc<dyn PositionalEncoding>) {
        self.encoding = Some(encoding);
    }

    /// Reads far keys at grouped positions from now on ([`SelfExtend`]), or as they are
    /// (`None`).
    pub(crate) fn set_self_extend(&mut self, self_extend: Option<SelfExtend>) {
        self.self_extend = self_extend;
    }

    /// The same attention with self-extend ([`SelfExtend`]): its encoding must rotate
    /// ([`crate::self_extend::check_encoding`]; [`crate::LanguageModel::with_self_extend`]
    /// checks it for a whole model).
    pub fn with_self_extend(mut self, self_extend: SelfExtend) -> Self {
        self.set_self_extend(Some(self_extend));
        self
    }

    /// The projections `W^Q, W^K, W^V, W^O`, named `q`, `k`, `v`, `out`: to swap in
    /// quantized weights ([`Proj::quantize`]).
    pub fn projections_mut(&mut self) -> [(&'static str, &mut Proj); 4] {
        [
            ("q", &mut self.q_proj),
            ("k", &mut self.k_proj),
            ("v", &mut self.v_proj),
            ("out", &mut self.out_proj),
        ]
    }

    /// Attention of the queries `input.x` over the keys and values its
    /// [`Source`] names, under its mask, with its cache; the weights only if asked for.
    ///
    /// Self-attention with a cache, no mask and no weights asked for is causal over the
    /// cached positions and the new ones, at the cache's positions
    /// ([`KvCache::read_until`]); where the kernels can it runs as [`kernels::flash_attention`], so
    /// memory grows with the cache, not with its square, and the encoding's bias is asked
    /// for tile by tile.
    ///
    /// # Shapes
    /// - `input.x`: `(batch, q_len, d_model)`
    /// - memory, keys, values: `(batch, k_len, d_model)`
    /// - output: `(batch, q_len, d_model)`; weights `(batch, heads, q_len, k_len)`
    ///
    /// # Errors
    /// Inputs of the wrong width; a batch that differs from the cache's.
    pub fn forward(&self, input: AttentionInput) -> Result<Attended> {
        let AttentionInput {
            x,
            source,
            mask,
            cache,
            weights,
        } = input;
        self.check(x, "query")?;
        let (output, w) = match (source, cache) {
            (Source::Own { bias: None, .. }, Some(cache)) if mask.is_none() && !weights => {
                (self.cached_self_attention(x, cache)?, None)
            }
            (Source::Own { at, bias }, cache) => self.self_attention(x, at, mask, bias, cache)?,
            (Source::Memory(memory), cache) => self.cross_attention(x, memory, mask, cache)?,
            (Source::KeysValues(key, value), _) => self.forward_qkv(x, key, value, mask)?,
        };
        Ok(Attended {
            output,
            weights: weights.then_some(w).flatten(),
        })
    }

    /// Self-attention of `x` at positions `at`, after what `cache` holds if there is one.
    fn self_attention(
        &self,
        x: &Tensor,
        at: Positions,
        mask: Option<&Mask>,
        bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        self.check(x, "query")?;
        let [q, k, v] = Proj::forward_fused([&self.q_proj, &self.k_proj, &self.v_proj], x)?;
        if let Some(se) = self.self_extend {
            let Positions::From(offset) = at else {
                return Err(Error::Input(
                    "self-extend reads tokens at consecutive positions".into(),
                ));
            };
            return self.self_extended(se, &q, &k, &v, offset, mask, cache);
        }
        let q = self.rotate(&q, at, Role::Query)?;
        let k = self.rotate(&k, at, Role::Key)?;
        let decay = self.decay(x)?;
        let Some(cache) = cache else {
            let decay = decay.map(|d| d.bias()).transpose()?;
            let bias = ScoreBias {
                position: bias,
                decay: decay.as_ref(),
                sink: None,
            };
            return self.attend(&q, &k, &v, bias, mask, true);
        };
        if cache.rolls().is_some() {
            return Err(Error::Input(
                "a rolling key/value cache runs causally with neither a mask nor weights".into(),
            ));
        }
        let (k, v, sums) = self.append(cache, &k, &v, decay.as_ref())?;
        let (k, v) = (dense(&k, &q)?, dense(&v, &q)?);
        // After a cache the keys reach further than the queries: the bias of these
        // positions, which the stack (computing one bias for all) did not give.
        let bias = match (bias, &self.encoding) {
            (Some(bias), _) => Some(bias.clone()),
            (None, Some(e)) => e.attention_bias(x.dim(1)?, k.dim(2)?, at, 0.into())?,
            (None, None) => None,
        };
        let decay = sums.map(|s| s.bias()).transpose()?;
        let bias = ScoreBias {
            position: bias.as_ref(),
            decay: decay.as_ref(),
            sink: None,
        };
        self.attend(&q, &k, &v, bias, mask, true)
    }

    /// Causal self-attention of the new positions `x` after those in `cache`, at
    /// inference ([`MultiHeadAttention::forward`]).
    fn cached_self_attention(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        self.check(x, "query")?;
        let new = x.dim(1)?;
        let at = cache.positions(new);
        let offset = at.get(0);
        let [q, k, v] = Proj::forward_fused([&self.q_proj, &self.k_proj, &self.v_proj], x)?;
        if let Some(se) = self.self_extend {
            let causal = Mask::causal(new, offset + new, offset, x.device())?;
            return Ok(self
                .self_extended(se, &q, &k, &v, offset, Some(&causal), Some(cache))?
                .0);
        }
        let q = self.rotate(&q, at, Role::Query)?;
        let decay = self.decay(x)?;
        let (k, v, sums) = match cache.rolls() {
            None => self.append(cache, &self.rotate(&k, at, Role::Key)?, &v, decay.as_ref())?,
            Some(_) => {
                // A rolling cache keeps its keys as they came: all of them are turned to
                // their places in it at every read, the new ones last.
                let (k, v, sums) = self.append(cache, &k, &v, decay.as_ref())?;
                let k = self.rotate(&dense(&k, &q)?, 0.into(), Role::Key)?;
                (Kept::Dense(k), v, sums)
            }
        };
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        // Tile by tile where the kernels can (they decide), with the encoding's bias asked
        // for each tile; an encoding that reads the scores, or has sinks, needs them whole.
        // The tiled kernel reads queries, keys and values of one width.
        let q_width = match q.rank() {
            4 => q.dim(3)?,
            _ => self.head_dim,
        };
        let same_width = Some(&q_width) == v.dims().get(3);
        // A decay's bias differs between the sequences of a batch; the tiles take one.
        let tiled = !self.whole_scores() && same_width && (sums.is_none() || q.dim(0)? == 1);
        if let (true, Some(encoding)) = (tiled, &self.encoding) {
            let tiles = sums.as_ref().map(DecayTiles::new).transpose()?;
            let bias = |rows: Range<usize>, keys: Range<usize>| {
                let (q_at, k_at) = (Positions::From(offset + rows.start), keys.start.into());
                let position = encoding
                    .attention_bias(rows.len(), keys.len(), q_at, k_at)
                    .map_err(candle_core::Error::wrap)?;
                let decay = tiles.as_ref().map(|t| t.tile(rows, keys)).transpose()?;
                Ok(match (position, decay) {
                    (Some(p), Some(d)) => Some((p + d)?),
                    (p, d) => p.or(d),
                })
            };
            // A sliding window's bias masks the keys past it; the kernel skips their tiles.
            let causal = Some(kernels::Causal {
                offset,
                window: encoding.reach(),
            });
            if let Some(out) = kernels::flash_attention(
                &q,
                k.clone(),
                v.clone(),
                self.head_dim,
                scale as f32,
                causal,
                Some(&bias),
            )? {
                return Ok(self.out_proj.forward(&out)?);
            }
        }
        let (k, v) = (dense(&k, &q)?, dense(&v, &q)?);
        let len = offset + new;
        let mask = Mask::causal(new, len, offset, x.device())?;
        let bias = match &self.encoding {
            Some(encoding) => encoding.attention_bias(new, len, at, 0.into())?,
            None => None,
        };
        let decay = sums.map(|s| s.bias()).transpose()?;
        let bias = ScoreBias {
            position: bias.as_ref(),
            decay: decay.as_ref(),
            sink: None,
        };
        Ok(self.attend(&q, &k, &v, bias, Some(&mask), true)?.0)
    }

    /// Self-attention with self-extend ([`SelfExtend`]) of the projected, unrotated `q`, `k`,
    /// `v (batch, new, ·)` of tokens at `offset, offset + 1, …`, after what `cache` holds
    /// (which keeps keys unrotated), under `mask (…, new, offset + new)`: every key is
    /// rotated at its own position and at its group's, and the queries, 64 at a time, read
    /// the near keys one way and the far ones the other, in one softmax.
    #[allow(clippy::too_many_arguments)]
    fn self_extended(
        &self,
        se: SelfExtend,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        offset: usize,
        mask: Option<&Mask>,
        cache: Option<&mut KvCache>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let encoding = self.encoding.as_ref().ok_or_else(|| {
            Error::Config("self-extend needs a rotary encoding; attention holds none".into())
        })?;
        let (k, v) = match cache {
            Some(cache) if cache.rolls().is_some() => {
                return Err(Error::Input(
                    "self-extend and a rolling key/value cache each move far keys: use one".into(),
                ))
            }
            Some(cache) => {
                let (k, v, _) = self.append(cache, k, v, None)?;
                (dense(&k, q)?, dense(&v, q)?)
            }
            None => (self.split(k)?, self.split(v)?),
        };
        let (q, keys) = (self.split(q)?, k.dim(2)?);
        let grouped = self_extend::positions(0..keys, |j| se.key_position(j))?;
        let near_k = encoding.rotate_keys(&k, 0.into())?;
        let far_k = encoding.rotate_keys(&k, Positions::At(&grouped))?;
        let (mut outs, mut weights) = (Vec::new(), Vec::new());
        let sink = self.sink(true)?;
        for start in (0..q.dim(2)?).step_by(SELF_EXTEND_ROWS) {
            let len = SELF_EXTEND_ROWS.min(q.dim(2)? - start);
            let rows = offset + start..offset + start + len;
            let part = q.narrow(2, start, len)?;
            let near_q = encoding.rotate(&part, rows.start.into())?;
            let at = self_extend::positions(rows.clone(), |i| se.query_position(i))?;
            let far_q = encoding.rotate(&part, Positions::At(&at))?;
            // Keys before `a` are far for every query of these rows, from `b` on near.
            let (a, b) = se.bands(rows.clone(), keys);
            let far = self.scores(&far_q, &far_k.narrow(2, 0, b)?)?;
            let near = self.scores(&near_q, &near_k.narrow(2, a, keys - a)?)?;
            let pick: Vec<u8> = (rows.clone())
                .flat_map(|i| (a..b).map(move |j| u8::from(j > i || se.near(i, j))))
                .collect();
            let pick = Tensor::from_vec(pick, (1, 1, len, b - a), q.device())?;
            let band_near = near.narrow(3, 0, b - a)?;
            let band = (pick.broadcast_as(band_near.shape())?)
                .where_cond(&band_near, &far.narrow(3, a, b - a)?)?;
            let parts = [far.narrow(3, 0, a)?, band, near.narrow(3, b - a, keys - b)?];
            let parts: Vec<&Tensor> = parts
                .iter()
                .filter(|t| t.dim(3).is_ok_and(|n| n > 0))
                .collect();
            let scores = Tensor::cat(&parts, 3)?;
            let mask = mask.map(|m| m.rows(start, len)).transpose()?;
            let bias = ScoreBias {
                sink: sink.as_ref(),
                ..ScoreBias::default()
            };
            let (out, w) = self.weigh(&near_q, scores, &v, bias, mask.as_ref(), true)?;
            outs.push(out);
            weights.extend(w);
        }
        // `weigh` gives every slice its weights: one per slice of rows.
        let weights = match weights.is_empty() {
            true => None,
            false => Some(Tensor::cat(&weights, 2)?),
        };
        // W^O once over every row, as attention without self-extend applies it (a quantized
        // product may take another path for fewer rows).
        Ok((self.out_proj.forward(&Tensor::cat(&outs, 1)?)?, weights))
    }

    /// Writes the new keys and values `k, v (batch, new, kv_heads·d_k)` to `cache`, with the
    /// gates of a `decay` if the encoding reads one, and returns all it holds, split into
    /// heads and as it keeps them ([`KvCache::kept`]), and the gates' running sums for the
    /// new positions and for all of them.
    fn append(
        &self,
        cache: &mut KvCache,
        k: &Tensor,
        v: &Tensor,
        decay: Option<&Decay>,
    ) -> Result<(Kept, Kept, Option<DecaySums>)> {
        if decay.is_some_and(|d| d.after.is_some()) {
            return Err(Error::Input(
                "a key/value cache serves causal attention: it cannot keep a decay of the keys after a query".into(),
            ));
        }
        let gates = decay.map(|d| &d.before);
        let sums = cache.write_decayed(&self.split(k)?, &self.split(v)?, gates)?;
        let (k, v) = (cache.kept()?)
            .ok_or_else(|| Error::Input("an empty write to the key/value cache".into()))?;
        Ok((k, v, sums))
    }

    /// Self-attention within sequences packed end to end along the rows of
    /// `x (1, n, d_model)`, `lens` tokens each, with no padding: each sequence attends to
    /// its own tokens only, at positions `0, 1, …`. `bias` is the encoding's position bias
    /// `(heads, t, t)` for the longest sequence, if it has one. On every real token this is
    /// self-attention of the padded batch with a padding mask, without
    /// the products spent on padding. Returns the output `(1, n, d_model)`; no weights are
    /// kept, and there is no dropout.
    ///
    /// In f32 on the CPU with no gradient to track, one op ([`kernels::packed_attention`]);
    /// otherwise each sequence goes through the ordinary path in turn (differentiable).
    ///
    /// # Errors
    /// `x` not `(1, n, d_model)`, lengths that do not add up to `n`, a bias too small.
    pub(crate) fn packed_self_attention(
        &self,
        x: &Tensor,
        lens: &[usize],
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.check(x, "query")?;
        check_packed(x, lens)?;
        let [q, k, v] = [&self.q_proj, &self.k_proj, &self.v_proj].map(|p| p.forward(x));
        let (raw_q, raw_k, v) = (q?, k?, v?);
        let q = self.rotate_packed(&raw_q, lens, Role::Query)?;
        let k = self.rotate_packed(&raw_k, lens, Role::Key)?;
        // Queries and keys as wide as they came (not PoPE's) stay packed.
        let packed = q.dim(2)? == raw_q.dim(2)? && k.dim(2)? == raw_k.dim(2)?;
        let decay = self.decay(x)?;
        if packed && !self.whole_scores() && decay.is_none() {
            let scale = 1.0 / (self.head_dim as f32).sqrt();
            if let Some(out) =
                kernels::packed_attention(&q, &k, &v, self.head_dim, lens, bias, scale)?
            {
                return Ok(self.out_proj.forward(&out)?);
            }
        }
        let mut outs = Vec::with_capacity(lens.len());
        for (start, len) in segments(lens) {
            let part = |t: &Tensor| t.narrow(1, start, len);
            let bias = bias
                .map(|b| b.narrow(1, 0, len)?.narrow(2, 0, len))
                .transpose()?;
            let gates = |g: &Tensor| g.narrow(2, start, len);
            let decay = (decay.as_ref())
                .map(|d| -> Result<Tensor> {
                    let after = d.after.as_ref().map(gates).transpose()?;
                    let before = gates(&d.before)?;
                    Ok(Decay { before, after }.bias()?)
                })
                .transpose()?;
            let score_bias = ScoreBias {
                position: bias.as_ref(),
                decay: decay.as_ref(),
                sink: None,
            };
            // Wider ones are rotated again, each sequence on its own, with their heads apart.
            let (q, k) = match packed {
                true => (part(&q)?, part(&k)?),
                false => (
                    self.rotate(&part(&raw_q)?, 0.into(), Role::Query)?,
                    self.rotate(&part(&raw_k)?, 0.into(), Role::Key)?,
                ),
            };
            outs.push(self.attend(&q, &k, &part(&v)?, score_bias, None, true)?.0);
        }
        match outs.is_empty() {
            true => Ok(x.zeros_like()?),
            false => Ok(Tensor::cat(&outs, 1)?),
        }
    }

    /// Cross-attention of `x` over `memory`; with a cache, the memory's keys and values are
    /// projected once and reused.
    fn cross_attention(
        &self,
        x: &Tensor,
        memory: &Tensor,
        mask: Option<&Mask>,
        cache: Option<&mut KvCache>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        self.check(memory, "memory")?;
        let q = self.q_proj.forward(x)?;
        let memory_kv = || -> Result<(Tensor, Tensor)> {
            Ok((self.k_proj.forward(memory)?, self.v_proj.forward(memory)?))
        };
        let (k, v) = match cache {
            Some(cache) => match cache.get()? {
                Some(kv) => kv,
                None => {
                    let (k, v) = memory_kv()?;
                    cache.append(&self.split(&k)?, &self.split(&v)?)?
                }
            },
            None => memory_kv()?,
        };
        self.attend(&q, &k, &v, ScoreBias::default(), mask, false)
    }

    /// Attention over distinct key and value inputs, with no positional hooks.
    fn forward_qkv(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Mask>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        for (t, name) in [(query, "query"), (key, "key"), (value, "value")] {
            self.check(t, name)?;
        }
        let q = self.q_proj.forward(query)?;
        let k = self.k_proj.forward(key)?;
        let v = self.v_proj.forward(value)?;
        self.attend(&q, &k, &v, ScoreBias::default(), mask, false)
    }

    fn check(&self, x: &Tensor, what: &str) -> Result<()> {
        let d = self.heads * self.head_dim;
        match x.dims() {
            &[_, _, w] if w == d => Ok(()),
            dims => Err(Error::Input(format!(
                "attention {what} must be (batch, seq, {d}), got {dims:?}"
            ))),
        }
    }

    /// A projection `(batch, seq, heads·d_k)` split into its heads,
    /// `(batch, heads, seq, d_k)`: a strided view (no copy). Split heads pass through.
    ///
    /// Projections stay merged until something needs the heads apart (a rotation, the
    /// cache, the composite path): the fused attention reads them either way, and every
    /// reshape or transpose would be a graph node whose gradient candle zeroes and adds.
    fn split(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match *x.dims() {
            [b, t, hd] => x
                .reshape((b, t, hd / self.head_dim, self.head_dim))?
                .transpose(1, 2)?,
            _ => x.clone(),
        })
    }

    /// The encoding's rotation of projected queries or keys `(batch, seq, heads·d_k)` at
    /// positions `at`, on their heads; if the encoding leaves them as they are (returns
    /// its input), they are handed on merged.
    fn rotate(&self, x: &Tensor, at: Positions, role: Role) -> Result<Tensor> {
        let Some(encoding) = &self.encoding else {
            return Ok(x.clone());
        };
        let heads = self.split(x)?;
        let rotated = match role {
            Role::Query => encoding.rotate(&heads, at)?,
            Role::Key => encoding.rotate_keys(&heads, at)?,
        };
        Ok(match rotated.id() == heads.id() {
            true => x.clone(),
            false => rotated,
        })
    }

    /// Packed queries or keys `(1, n, heads·d_k)`, each sequence rotated at positions
    /// `0, 1, …` by the encoding, with its heads merged again; handed on as they are if the
    /// encoding leaves them alone (it then does so for every sequence).
    fn rotate_packed(&self, x: &Tensor, lens: &[usize], role: Role) -> Result<Tensor> {
        let mut parts = Vec::with_capacity(lens.len());
        for (start, len) in segments(lens) {
            let part = x.narrow(1, start, len)?;
            let rotated = self.rotate(&part, 0.into(), role)?;
            if rotated.id() == part.id() {
                return Ok(x.clone());
            }
            let (_, heads, len, width) = rotated.dims4()?;
            parts.push(rotated.transpose(1, 2)?.reshape((1, len, heads * width))?);
        }
        match parts.is_empty() {
            true => Ok(x.clone()),
            false => Ok(Tensor::cat(&parts, 1)?),
        }
    }

    /// Scaled dot-product attention of projected `q`, `k`, `v` with the encoding's `bias`
    /// (position and decay) and, for self-attention (`own`) under an encoding that reads
    /// the scores, its [`score_bias`](posenc::PositionalEncoding::score_bias) on the
    /// logits. Returns the output and the weights (which the fused path keeps for its
    /// backward anyway).
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        bias: ScoreBias,
        mask: Option<&Mask>,
        own: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let (b, h, tq, d_k) = self.split(q)?.dims4()?;
        let d_v = self.split(v)?.dim(3)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let k_len = self.split(k)?.dim(2)?;
        let dropout = dropout::active(q, self.dropout);
        let content = own && self.reads_scores();
        let sink = self.sink(own)?;
        let bias = ScoreBias {
            sink: sink.as_ref(),
            ..bias
        };
        let biased = bias.position.is_some() || bias.decay.is_some();
        if !biased && !content && sink.is_none() && d_k == d_v {
            // One op for scores, mask, softmax, dropout and weighted sum, heads merged: the
            // CPU's kernel in f32, candle's ops under one node elsewhere.
            let sample = dropout
                .then(|| dropout::uniform((b, h, tq, k_len), q.device()))
                .transpose()?
                .map(|u| (self.dropout, u));
            let keep = mask
                .map(|m| m.broadcast_to_shape(&[b, h, tq, k_len]))
                .transpose()?;
            let (out, weights) =
                kernels::attention(q, k, v, d_k, keep.as_ref(), scale as f32, sample)?;
            return Ok((self.out_proj.forward(&out)?, Some(weights)));
        }
        let scores = self.scores(q, k)?;
        let (out, weights) = self.weigh(q, scores, v, bias, mask, own)?;
        Ok((self.out_proj.forward(&out)?, weights))
    }

    /// The scores `QKᵀ (b, h, q_len, k_len)` of projected queries and keys, unscaled.
    fn scores(&self, q: &Tensor, k: &Tensor) -> Result<Tensor> {
        // candle's matmul needs each head's rows contiguous.
        let (q, k) = (&self.split(q)?.contiguous()?, &self.split(k)?.contiguous()?);
        let (b, h, tq, d_k) = q.dims4()?;
        // Grouped-query attention without copying keys: the `h / kv` query heads that share
        // a key head are stacked as rows of one product, `(b, kv, h/kv · tq, d_k) · Kᵀ`.
        let kv = k.dim(1)?;
        let rows = q.reshape((b, kv, (h / kv) * tq, d_k))?;
        Ok(kernels::matmul(&rows, &k.t()?)?.reshape((b, h, tq, k.dim(2)?))?)
    }

    /// Attention from its `scores (b, h, q_len, k_len)` ([`Self::scores`]): scaled, biased,
    /// read by the encoding (`own`, with the queries `q`), masked, softmaxed beside any
    /// sink, dropped out, then the weighted sum of `v`, its heads merged, before `W^O`.
    /// Returns that sum `(b, q_len, h·d_v)` and the weights.
    fn weigh(
        &self,
        q: &Tensor,
        scores: Tensor,
        v: &Tensor,
        bias: ScoreBias,
        mask: Option<&Mask>,
        own: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let ScoreBias {
            position: bias,
            decay,
            sink,
        } = bias;
        let (b, h, tq, k_len) = scores.dims4()?;
        let v = &self.split(v)?.contiguous()?;
        let (kv, d_v) = (v.dim(1)?, v.dim(3)?);
        let grouped =
            |x: &Tensor, rows: usize, cols: usize| x.reshape((b, kv, (h / kv) * rows, cols));
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let dropout = dropout::active(q, self.dropout);
        let content = own && self.reads_scores();
        let q = &self.split(q)?.contiguous()?;
        // A decay's bias differs between the sequences of a batch, and an encoding that
        // reads the scores gets the logits, masked, and adds to them: both form the logits.
        // A bias read from the tokens may differ between sequences, `(b, h, q, k)`: it is
        // added to the logits as a decay is.
        let per_sequence = bias.is_some_and(|b| b.rank() == 4);
        let (scores, bias, scale) = match content || decay.is_some() || per_sequence {
            false => (scores, bias.cloned(), scale),
            true => {
                let mut logits = (scores * scale)?;
                if let Some(bias) = bias {
                    let bias = bias.to_dtype(logits.dtype())?;
                    let bias = match per_sequence {
                        true => bias,
                        false => bias.unsqueeze(0)?,
                    };
                    logits = logits.broadcast_add(&bias)?;
                }
                if let Some(decay) = decay {
                    let decay = decay.to_dtype(logits.dtype())?;
                    logits = (logits + decay)?;
                }
                if content {
                    let masked = match mask {
                        Some(mask) => mask.fill(&logits)?,
                        None => logits.clone(),
                    };
                    let encoding = self.encoding.as_ref().ok_or_else(|| {
                        Error::Config("attention reads the scores but holds no encoding".into())
                    })?;
                    if let Some(extra) = encoding.score_bias(q, &masked)? {
                        logits = (logits + extra.to_dtype(masked.dtype())?)?;
                    }
                }
                (logits, None, 1.0)
            }
        };
        let keep = mask.map(|m| m.broadcast_to(&scores)).transpose()?;
        let weights = match sink {
            None => kernels::attention_softmax(&scores, bias.as_ref(), keep.as_ref(), scale)?,
            Some(sink) => with_sink(&scores, bias.as_ref(), keep.as_ref(), scale, sink)?,
        };
        let dropped = if dropout {
            dropout::dropout(&weights, self.dropout)?
        } else {
            weights.clone()
        };
        let out = kernels::matmul(&grouped(&dropped, tq, k_len)?, v)?
            .reshape((b, h, tq, d_v))?
            .transpose(1, 2)?
            .reshape((b, tq, h * d_v))?;
        Ok((out, Some(weights)))
    }

    /// The logits of the encoding's sink per head, if it has one, in self-attention (`own`).
    fn sink(&self, own: bool) -> Result<Option<Tensor>> {
        match (own, &self.encoding) {
            (true, Some(encoding)) => Ok(encoding.sink_logits()?),
            _ => Ok(None),
        }
    }

    /// The decay the encoding reads from the attention's input `x`, if it reads one.
    fn decay(&self, x: &Tensor) -> Result<Option<Decay>> {
        match &self.encoding {
            Some(encoding) => Ok(encoding.decay(x)?),
            None => Ok(None),
        }
    }

    /// Whether the encoding reads the attention scores (CoPE).
    fn reads_scores(&self) -> bool {
        self.encoding.as_ref().is_some_and(|e| e.reads_scores())
    }

    /// Whether self-attention needs its scores whole, and so its composite path: the
    /// encoding reads them, or gives each head a sink.
    fn whole_scores(&self) -> bool {
        self.reads_scores()
            || (self.encoding.as_ref())
                .is_some_and(|e| e.sink_logits().is_ok_and(|sink| sink.is_some()))
    }
}

/// Keys or values as kept, expanded to `q`'s dtype.
fn dense(kept: &Kept, q: &Tensor) -> Result<Tensor> {
    Ok(kept.dense()?.to_dtype(q.dtype())?)
}

/// One sequence's decay sums on the host ([`DecaySums`]), for the tiled kernel, which asks
/// for its bias tile by tile: a tile is `c_i − c_j` for its query rows and keys, made in one
/// pass here where tensor ops would allocate and broadcast several times a tile.
struct DecayTiles {
    /// `(heads, new)`, row-major.
    queries: Vec<f32>,
    /// `(heads, len)`, row-major.
    keys: Vec<f32>,
    heads: usize,
    device: candle_core::Device,
}

impl DecayTiles {
    /// The sums of a batch of one.
    fn new(sums: &DecaySums) -> Result<Self> {
        let flat = |t: &Tensor| -> Result<Vec<f32>> {
            Ok(t.squeeze(0)?
                .contiguous()?
                .flatten_all()?
                .to_vec1::<f32>()?)
        };
        Ok(Self {
            queries: flat(&sums.queries)?,
            keys: flat(&sums.keys)?,
            heads: sums.keys.dim(1)?,
            device: sums.keys.device().clone(),
        })
    }

    /// The bias `(heads, rows, keys)` of queries `rows` (indices into the new positions)
    /// against keys `keys` (indices into the cache).
    fn tile(&self, rows: Range<usize>, keys: Range<usize>) -> candle_core::Result<Tensor> {
        let (new, len) = (
            self.queries.len() / self.heads,
            self.keys.len() / self.heads,
        );
        let mut values = Vec::with_capacity(self.heads * rows.len() * keys.len());
        for h in 0..self.heads {
            let k = &self.keys[h * len..][keys.clone()];
            for &q in &self.queries[h * new..][rows.clone()] {
                values.extend(k.iter().map(|&k| q - k));
            }
        }
        Tensor::from_vec(values, (self.heads, rows.len(), keys.len()), &self.device)
    }
}

/// What attention adds to its scaled scores beside the mask.
#[derive(Debug, Clone, Copy, Default)]
struct ScoreBias<'a> {
    /// The encoding's position bias, `(heads, q_len, k_len)`.
    position: Option<&'a Tensor>,
    /// The bias of an encoding that decays ([`Decay`]), `(batch, heads, q_len, k_len)`.
    decay: Option<&'a Tensor>,
    /// The logits of each head's sink, `(heads)`, a column more in the softmax (`attend`
    /// sets it from the encoding).
    sink: Option<&'a Tensor>,
}

/// The softmax weights of `scores (b, h, q, k)` (times `scale`, plus `bias (h, q, k)`,
/// under `keep`) beside a sink per head with logits `sink (h)`: a key every query sees, of
/// value zero ([`posenc::sink`]). The sink is a column more in the softmax, dropped after,
/// so the weights on the real keys add up to `1 − w_sink`; a query that sees no key puts all
/// its weight on the sink.
fn with_sink(
    scores: &Tensor,
    bias: Option<&Tensor>,
    keep: Option<&Tensor>,
    scale: f64,
    sink: &Tensor,
) -> Result<Tensor> {
    let (b, h, q, k) = scores.dims4()?;
    let column = sink
        .to_dtype(scores.dtype())?
        .reshape((1, h, 1, 1))?
        .broadcast_as((b, h, q, 1))?;
    let scores = Tensor::cat(&[&(scores * scale)?, &column], 3)?;
    let bias = bias
        .map(|bias| {
            let zero = Tensor::zeros((h, q, 1), bias.dtype(), bias.device())?;
            Tensor::cat(&[bias, &zero], 2)
        })
        .transpose()?;
    let keep = keep
        .map(|keep| {
            let seen = Tensor::ones((b, h, q, 1), keep.dtype(), keep.device())?;
            Tensor::cat(&[&keep.broadcast_as((b, h, q, k))?, &seen], 3)
        })
        .transpose()?;
    let weights = kernels::attention_softmax(&scores, bias.as_ref(), keep.as_ref(), 1.0)?;
    Ok(weights.narrow(3, 0, k)?)
}

/// Xavier-uniform `W^Q, W^K, W^V` packed in `in_proj_weight` (as PyTorch's
/// `_reset_parameters`), biases zero, as views of the packed tensors.
fn packed(d_model: usize, kv_dim: usize, bias: bool, vb: &VarBuilder) -> Result<[Proj; 3]> {
    let rows = d_model + 2 * kv_dim;
    let bound = (6.0 / (rows + d_model) as f64).sqrt();
    let w = vb.get_with_hints(
        (rows, d_model),
        "in_proj_weight",
        Init::Uniform {
            lo: -bound,
            up: bound,
        },
    )?;
    let b = bias
        .then(|| vb.get_with_hints(rows, "in_proj_bias", init::ZERO))
        .transpose()?;
    let part = |start: usize, len: usize| Proj::rows_of(&w, b.as_ref(), start..start + len);
    Ok([
        part(0, d_model)?,
        part(d_model, kv_dim)?,
        part(d_model + kv_dim, kv_dim)?,
    ])
}

/// `(start, len)` of each non-empty sequence of lengths `lens` packed end to end.
fn segments(lens: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let starts = lens.iter().scan(0, |at, &len| {
        *at += len;
        Some(*at - len)
    });
    starts.zip(lens.iter().copied()).filter(|&(_, len)| len > 0)
}

/// Checks that `x (1, n, …)` holds sequences of lengths `lens` packed end to end, and
/// returns the longest.
pub(crate) fn check_packed(x: &Tensor, lens: &[usize]) -> Result<usize> {
    let total: usize = lens.iter().sum();
    match x.dims() {
        [1, n, _] if *n == total => Ok(lens.iter().copied().max().unwrap_or(0)),
        dims => Err(Error::Input(format!(
            "packed sequences of lengths adding up to {total} must be (1, {total}, d_model), got {dims:?}"
        ))),
    }
}

/// Whether projected vectors are queries or keys, for the encoding's rotation: an encoding
/// may treat them apart ([`posenc::PositionalEncoding::rotate_keys`]).
#[derive(Debug, Clone, Copy)]
enum Role {
    Query,
    Key,
}
