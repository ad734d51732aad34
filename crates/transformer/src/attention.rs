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
//! `W^Q, W^K, W^V`, with `in_proj_bias` and `out_proj`. In f32 on the CPU, attention
//! without a score bias is one op with its own backward ([`ops::attention`]), which reads
//! the projections with their heads still merged; with a bias, the scale, bias, mask and
//! softmax are one fused kernel ([`ops::masked_softmax`]); other dtypes take the
//! differentiable composition.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{DType, Tensor, D};
use candle_nn::{init, Init, VarBuilder};
use posenc::{PositionalEncoding, Positions};

use crate::linear::Proj;
use crate::mask::Mask;
use crate::ops;
use crate::{Config, Error, Result};

/// Keys and values computed so far, for incremental decoding.
///
/// They live in one buffer per tensor, `(batch, kv_heads, capacity, head_dim)`, written in
/// place as positions arrive: a generation of `n` tokens copies each key once, where
/// concatenating the cache with every new token would copy `O(n²)`. The capacity is what
/// [`KvCache::reserve`] asked for, or else doubles when it runs out. Not `Clone`: a shallow
/// clone would share the buffers that the next write changes; [`KvCache::try_clone`] copies.
#[derive(Debug, Default)]
pub struct KvCache {
    /// The buffers, `(batch, kv_heads, capacity, head_dim)`, contiguous.
    buffers: Option<(Tensor, Tensor)>,
    /// Positions written.
    len: usize,
    /// The capacity to allocate on the first write.
    reserved: usize,
    /// The length the sequence being read will reach ([`KvCache::read_until`]).
    reach: usize,
}

impl KvCache {
    /// Says that what is read next belongs to a sequence that will reach `total`
    /// positions: the encoding then sees each piece as [`Positions::Within`] it (dynamic
    /// NTK takes `total`'s frequencies, as one forward over the whole would). Positions past
    /// `total` are read as themselves.
    pub fn read_until(&mut self, total: usize) {
        self.reach = total;
    }

    /// Where `new` tokens after the cached ones sit.
    pub(crate) fn positions(&self, new: usize) -> Positions<'static> {
        match self.reach > self.len + new {
            true => Positions::Within {
                offset: self.len,
                total: self.reach,
            },
            false => Positions::From(self.len),
        }
    }

    /// Number of positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy with buffers of its own, to continue two ways from one prefix.
    ///
    /// # Errors
    /// The copy's own failure.
    pub fn try_clone(&self) -> Result<Self> {
        let buffers = match &self.buffers {
            Some((k, v)) => Some((k.copy()?, v.copy()?)),
            None => None,
        };
        Ok(Self { buffers, ..*self })
    }

    /// Positions the buffers hold room for (0 before the first write).
    pub fn capacity(&self) -> usize {
        self.buffers
            .as_ref()
            .map_or(0, |(k, _)| k.dim(2).unwrap_or(0))
    }

    /// Makes room for `positions` in all at the first write (or the next growth), so that
    /// a generation of known length allocates its cache once.
    pub fn reserve(&mut self, positions: usize) {
        self.reserved = self.reserved.max(positions);
    }

    /// The cached keys and values, `(batch, kv_heads, len, head_dim)` each: views of the
    /// buffers, no copy.
    pub fn get(&self) -> Result<Option<(Tensor, Tensor)>> {
        match &self.buffers {
            Some((k, v)) if self.len > 0 => {
                Ok(Some((k.narrow(2, 0, self.len)?, v.narrow(2, 0, self.len)?)))
            }
            _ => Ok(None),
        }
    }

    /// Writes `k, v (batch, kv_heads, new, head_dim)` after the cached positions and returns
    /// all of them ([`KvCache::get`]).
    ///
    /// # Errors
    /// Keys or values whose batch, heads, width or dtype differ from those cached.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, heads, new, d) = k.dims4()?;
        if v.dims() != k.dims() {
            return Err(Error::Input(format!(
                "cached keys {:?} and values {:?} must have one shape",
                k.dims(),
                v.dims()
            )));
        }
        if let Some((ck, _)) = &self.buffers {
            let (cb, ch, _, cd) = ck.dims4()?;
            if (cb, ch, cd) != (b, heads, d) || ck.dtype() != k.dtype() {
                return Err(Error::Input(format!(
                    "new keys {:?} ({:?}) do not fit a cache of (batch {cb}, heads {ch}, width {cd}) ({:?})",
                    k.dims(),
                    k.dtype(),
                    ck.dtype()
                )));
            }
        }
        let end = self.len + new;
        if end > self.capacity() {
            let capacity = end.max(self.reserved).max(2 * self.capacity());
            let fresh = || Tensor::zeros((b, heads, capacity, d), k.dtype(), k.device());
            let (nk, nv) = (fresh()?, fresh()?);
            if let Some((ok, ov)) = self.get()? {
                nk.slice_set(&ok.contiguous()?, 2, 0)?;
                nv.slice_set(&ov.contiguous()?, 2, 0)?;
            }
            self.buffers = Some((nk, nv));
        }
        if let Some((bk, bv)) = &self.buffers {
            bk.slice_set(&k.contiguous()?, 2, self.len)?;
            bv.slice_set(&v.contiguous()?, 2, self.len)?;
        }
        self.len = end;
        self.get()?
            .ok_or_else(|| Error::Input("an empty write to the key/value cache".into()))
    }

    /// Keeps batch entries `indices` (u32), in that order: beam search reorders hypotheses.
    pub fn select(&mut self, indices: &Tensor) -> Result<()> {
        if let Some((k, v)) = &self.buffers {
            self.buffers = Some((k.index_select(indices, 0)?, v.index_select(indices, 0)?));
        }
        Ok(())
    }
}

/// Multi-head attention, self or cross.
#[derive(Debug, Clone)]
pub struct MultiHeadAttention {
    q_proj: Proj,
    k_proj: Proj,
    v_proj: Proj,
    out_proj: Proj,
    heads: usize,
    head_dim: usize,
    dropout: f32,
    encoding: Arc<dyn PositionalEncoding>,
}

/// What one attention call returns: the output `(batch, q_len, d_model)` and the weights
/// `(batch, heads, q_len, k_len)`.
pub type Attended = (Tensor, Tensor);

impl MultiHeadAttention {
    /// The paper's attention (as PyTorch's): `heads` query, key and value heads, with
    /// biases. Loads or creates the projections under `vb` (PyTorch's names); `encoding`
    /// supplies the positional hooks of self-attention.
    pub fn new(
        d_model: usize,
        heads: usize,
        dropout: f32,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        Self::build(d_model, heads, heads, true, dropout, encoding, vb)
    }

    /// Attention as `cfg` describes it: its width, heads, dropout and
    /// [`BlockOptions`](crate::BlockOptions) (key/value heads, biases).
    pub fn from_config(
        cfg: &Config,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let kv_heads = cfg.blocks.kv_heads.unwrap_or(cfg.heads);
        let bias = cfg.blocks.bias;
        Self::build(
            cfg.d_model,
            cfg.heads,
            kv_heads,
            bias,
            cfg.dropout,
            encoding,
            vb,
        )
    }

    /// `in_proj_weight ((heads + 2·kv_heads)·d_k, d_model)` packs `W^Q, W^K, W^V` (with
    /// `in_proj_bias` if `bias`), then `out_proj`.
    fn build(
        d_model: usize,
        heads: usize,
        kv_heads: usize,
        bias: bool,
        dropout: f32,
        encoding: Arc<dyn PositionalEncoding>,
        vb: VarBuilder,
    ) -> Result<Self> {
        let head_dim = posenc::limits::head_dim(d_model, heads)?;
        crate::config::check_kv_heads(heads, kv_heads)?;
        let kv_dim = kv_heads * head_dim;
        let rows = d_model + 2 * kv_dim;
        // Xavier-uniform like PyTorch's _reset_parameters, biases zero.
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
        let part = |start: usize, len: usize| -> Result<Proj> {
            let bias = b.as_ref().map(|b| b.narrow(0, start, len)).transpose()?;
            Ok(Proj::new(w.narrow(0, start, len)?, bias))
        };
        Ok(Self {
            q_proj: part(0, d_model)?,
            k_proj: part(d_model, kv_dim)?,
            v_proj: part(d_model + kv_dim, kv_dim)?,
            out_proj: Proj::load(d_model, d_model, bias, vb.pp("out_proj"))?,
            heads,
            head_dim,
            dropout,
            encoding,
        })
    }

    /// Replaces the positional encoding of self-attention.
    pub(crate) fn set_encoding(&mut self, encoding: Arc<dyn PositionalEncoding>) {
        self.encoding = encoding;
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

    /// Self-attention of `x (batch, seq, d_model)` at positions `at`. With a cache, `x`
    /// holds the new positions only; they are appended to the cache and attend to
    /// everything in it. `bias` is the encoding's `(heads, q_len, k_len)` position bias for
    /// these queries and keys ([`posenc::PositionalEncoding::attention_bias`]), if it has one.
    pub fn self_attention(
        &self,
        x: &Tensor,
        at: Positions,
        mask: Option<&Mask>,
        bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        train: bool,
    ) -> Result<Attended> {
        self.check(x, "query")?;
        let q = self.rotate(&self.q_proj.forward(x)?, at, Role::Query)?;
        let k = self.rotate(&self.k_proj.forward(x)?, at, Role::Key)?;
        let v = self.v_proj.forward(x)?;
        let (k, v) = match cache {
            Some(cache) => cache.append(&self.split(&k)?, &self.split(&v)?)?,
            None => (k, v),
        };
        self.attend(&q, &k, &v, bias, mask, true, train)
    }

    /// Causal self-attention of the new positions `x (batch, new, d_model)` after those in
    /// `cache`, at inference: they are written to the cache, and each attends to the cached
    /// positions and to the new ones up to itself. Returns the output `(batch, new,
    /// d_model)`; no weights exist.
    ///
    /// In f32 on the CPU this is [`ops::flash_attention`]: memory grows with the cache, not
    /// with its square, and the encoding's position bias is asked for tile by tile
    /// ([`posenc::PositionalEncoding::attention_bias`] at the tile's positions), so no
    /// `(heads, new, len)` bias exists either. Elsewhere the composite path runs with a
    /// causal mask.
    ///
    /// # Shapes
    /// - `x`: `(batch, new, d_model)`
    /// - output: `(batch, new, d_model)`
    ///
    /// # Errors
    /// `x` of the wrong width, or a batch that differs from the cache's.
    pub fn cached_self_attention(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        self.check(x, "query")?;
        let (offset, new) = (cache.len(), x.dim(1)?);
        let at = cache.positions(new);
        let q = self.rotate(&self.q_proj.forward(x)?, at, Role::Query)?;
        let k = self.split(&self.rotate(&self.k_proj.forward(x)?, at, Role::Key)?)?;
        let v = self.split(&self.v_proj.forward(x)?)?;
        let (k, v) = cache.append(&k, &v)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let fused = q.dtype() == DType::F32 && q.device().is_cpu() && !self.encoding.reads_scores();
        if fused && ![&q, &k, &v].iter().any(|t| t.track_op()) {
            let encoding = &self.encoding;
            let bias = |rows: Range<usize>, keys: Range<usize>| {
                let (q_at, k_at) = (Positions::From(offset + rows.start), keys.start.into());
                encoding
                    .attention_bias(rows.len(), keys.len(), q_at, k_at)
                    .map_err(candle_core::Error::wrap)
            };
            let causal = Some(offset);
            let out =
                ops::flash_attention(&q, &k, &v, self.head_dim, scale as f32, causal, Some(&bias))?;
            return Ok(self.out_proj.forward(&out)?);
        }
        let len = offset + new;
        let mask = Mask::causal(new, len, offset, x.device())?;
        let bias = self.encoding.attention_bias(new, len, at, 0.into())?;
        Ok(self
            .attend(&q, &k, &v, bias.as_ref(), Some(&mask), true, false)?
            .0)
    }

    /// Self-attention within sequences packed end to end along the rows of
    /// `x (1, n, d_model)`, `lens` tokens each, with no padding: each sequence attends to
    /// its own tokens only, at positions `0, 1, …`. `bias` is the encoding's position bias
    /// `(heads, t, t)` for the longest sequence, if it has one. On every real token this is
    /// [`MultiHeadAttention::self_attention`] of the padded batch with a padding mask, without
    /// the products spent on padding. Returns the output `(1, n, d_model)`; no weights are
    /// kept, and there is no dropout.
    ///
    /// In f32 on the CPU with no gradient to track, one op ([`ops::packed_attention`]);
    /// otherwise each sequence goes through the ordinary path in turn (differentiable).
    ///
    /// # Errors
    /// `x` not `(1, n, d_model)`, lengths that do not add up to `n`, a bias too small.
    pub fn packed_self_attention(
        &self,
        x: &Tensor,
        lens: &[usize],
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.check(x, "query")?;
        check_packed(x, lens)?;
        let fused = x.dtype() == DType::F32 && x.device().is_cpu() && !self.encoding.reads_scores();
        let q = self.rotate_packed(&self.q_proj.forward(x)?, lens, Role::Query)?;
        let k = self.rotate_packed(&self.k_proj.forward(x)?, lens, Role::Key)?;
        let v = self.v_proj.forward(x)?;
        if fused && ![&q, &k, &v].iter().any(|t| t.track_op()) {
            let scale = 1.0 / (self.head_dim as f32).sqrt();
            let out = ops::packed_attention(&q, &k, &v, self.head_dim, lens, bias, scale)?;
            return Ok(self.out_proj.forward(&out)?);
        }
        let mut outs = Vec::with_capacity(lens.len());
        for (start, len) in segments(lens) {
            let part = |t: &Tensor| t.narrow(1, start, len);
            let bias = bias
                .map(|b| b.narrow(1, 0, len)?.narrow(2, 0, len))
                .transpose()?;
            let (q, k, v) = (part(&q)?, part(&k)?, part(&v)?);
            outs.push(self.attend(&q, &k, &v, bias.as_ref(), None, true, false)?.0);
        }
        match outs.is_empty() {
            true => Ok(x.zeros_like()?),
            false => Ok(Tensor::cat(&outs, 1)?),
        }
    }

    /// Cross-attention of `x (batch, q_len, d_model)` over `memory (batch, k_len, d_model)`.
    /// With a cache, the memory's keys and values are projected once and reused.
    pub fn cross_attention(
        &self,
        x: &Tensor,
        memory: &Tensor,
        mask: Option<&Mask>,
        cache: Option<&mut KvCache>,
        train: bool,
    ) -> Result<Attended> {
        self.check(x, "query")?;
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
        self.attend(&q, &k, &v, None, mask, false, train)
    }

    /// PyTorch's `nn.MultiheadAttention(query, key, value)` for distinct key and value
    /// inputs, with no positional hooks.
    pub fn forward_qkv(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Mask>,
    ) -> Result<Attended> {
        for (t, name) in [(query, "query"), (key, "key"), (value, "value")] {
            self.check(t, name)?;
        }
        let q = self.q_proj.forward(query)?;
        let k = self.k_proj.forward(key)?;
        let v = self.v_proj.forward(value)?;
        self.attend(&q, &k, &v, None, mask, false, false)
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
        let heads = self.split(x)?;
        let rotated = match role {
            Role::Query => self.encoding.rotate(&heads, at)?,
            Role::Key => self.encoding.rotate_keys(&heads, at)?,
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
            parts.push(rotated.transpose(1, 2)?.reshape(part.shape())?);
        }
        match parts.is_empty() {
            true => Ok(x.clone()),
            false => Ok(Tensor::cat(&parts, 1)?),
        }
    }

    /// Scaled dot-product attention of projected `q`, `k`, `v` with the encoding's position
    /// `bias` and, for self-attention (`own`) under an encoding that reads the scores, its
    /// [`score_bias`](posenc::PositionalEncoding::score_bias) on the logits.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        bias: Option<&Tensor>,
        mask: Option<&Mask>,
        own: bool,
        train: bool,
    ) -> Result<Attended> {
        let (b, h, tq, d_k) = self.split(q)?.dims4()?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let k_len = self.split(k)?.dim(2)?;
        let dropout = train && self.dropout > 0.0;
        let content = own && self.encoding.reads_scores();
        if bias.is_none() && !content && q.dtype() == DType::F32 && q.device().is_cpu() {
            // One op for scores, mask, softmax, dropout and weighted sum, heads merged.
            let sample = dropout
                .then(|| Tensor::rand(0f32, 1f32, (b, h, tq, k_len), q.device()))
                .transpose()?
                .map(|u| (self.dropout, u));
            let keep = mask
                .map(|m| m.broadcast_to_shape(&[b, h, tq, k_len]))
                .transpose()?;
            let (out, weights) = ops::attention(q, k, v, d_k, keep.as_ref(), scale as f32, sample)?;
            return Ok((self.out_proj.forward(&out)?, weights));
        }
        // candle's matmul needs each head's rows contiguous.
        let heads = |x: &Tensor| -> Result<Tensor> { Ok(self.split(x)?.contiguous()?) };
        let (q, k, v) = (&heads(q)?, &heads(k)?, &heads(v)?);
        // Grouped-query attention without copying keys: the `h / kv` query heads that share
        // a key head are stacked as rows of one product, `(b, kv, h/kv · tq, d_k) · Kᵀ`.
        let kv = k.dim(1)?;
        let grouped =
            |x: &Tensor, rows: usize, cols: usize| x.reshape((b, kv, (h / kv) * rows, cols));
        let scores = ops::matmul(&grouped(q, tq, d_k)?, &k.t()?)?.reshape((b, h, tq, k.dim(2)?))?;
        // An encoding that reads the scores gets the logits, masked, and adds to them.
        let (scores, bias, scale) = match content {
            false => (scores, bias.cloned(), scale),
            true => {
                let mut logits = (scores * scale)?;
                if let Some(bias) = bias {
                    let bias = bias.to_dtype(logits.dtype())?.unsqueeze(0)?;
                    logits = logits.broadcast_add(&bias)?;
                }
                let masked = match mask {
                    Some(mask) => mask.fill(&logits)?,
                    None => logits.clone(),
                };
                if let Some(extra) = self.encoding.score_bias(q, &masked)? {
                    logits = (logits + extra.to_dtype(masked.dtype())?)?;
                }
                (logits, None, 1.0)
            }
        };
        let bias = bias.as_ref();
        let keep = mask.map(|m| m.broadcast_to(&scores)).transpose()?;
        let weights = if scores.dtype() == DType::F32 && scores.device().is_cpu() {
            // One fused pass: scale, bias, mask, softmax, empty rows to zero.
            match bias {
                Some(bias) => ops::masked_softmax(
                    &(scores * scale)?.broadcast_add(&bias.unsqueeze(0)?)?,
                    keep.as_ref(),
                    1.0,
                )?,
                None => ops::masked_softmax(&scores, keep.as_ref(), scale as f32)?,
            }
        } else {
            let mut scores = (scores * scale)?;
            if let Some(bias) = bias {
                scores = scores.broadcast_add(&bias.to_dtype(scores.dtype())?.unsqueeze(0)?)?;
            }
            if let Some(mask) = mask {
                scores = mask.fill(&scores)?;
            }
            let weights = if scores.track_op() {
                candle_nn::ops::softmax(&scores, D::Minus1)?
            } else {
                candle_nn::ops::softmax_last_dim(&scores)?
            };
            match mask {
                Some(mask) => mask.zero_empty_rows(&weights)?,
                None => weights,
            }
        };
        let dropped = if dropout {
            candle_nn::ops::dropout(&weights, self.dropout)?
        } else {
            weights.clone()
        };
        let out = ops::matmul(&grouped(&dropped, tq, k_len)?, v)?
            .reshape((b, h, tq, d_k))?
            .transpose(1, 2)?
            .reshape((b, tq, h * d_k))?;
        Ok((self.out_proj.forward(&out)?, weights))
    }
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
