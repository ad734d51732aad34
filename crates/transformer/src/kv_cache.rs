//! The keys and values a self- or cross-attention has computed so far, kept for
//! incremental decoding: each generated token projects only its own key and value.
//!
//! A cache may also roll ([`Streaming`]): it keeps the first few tokens (the attention
//! sinks) and the most recent ones, so that a model reads or generates past any length in
//! constant memory (StreamingLLM, Xiao et al. 2024).

use candle_core::{DType, Tensor, D};
use posenc::{Decay, Positions};
use posenc_kernels::kv_blocks::{self, Kept};
use posenc_kernels::quantized::Format;

use crate::{Error, Result};

/// The most positions [`KvCache::reserve`] allocates ahead of those written.
pub const RESERVE_AHEAD: usize = 8192;

/// A rolling cache with attention sinks (StreamingLLM, Xiao et al. 2024): it holds at most
/// `window` positions, the first `sinks` tokens of the sequence and the `window − sinks`
/// most recent ones, and evicts the oldest of the others as new ones arrive.
///
/// Positions are assigned within the cache, as StreamingLLM does: its keys are kept as
/// they come, before any rotation, and every read presents them at positions
/// `0, 1, …, len − 1`, the new tokens after them; so a query never sits further than
/// `window − 1` from a key, whatever the sequence's length, and the encoding is asked only
/// about positions it was trained on. An encoding that decays ([`posenc::Decay`]) sums its
/// gates the same way, over the tokens the cache holds: the evicted ones' gates leave the
/// running sums with them.
///
/// ```
/// use posenc_transformer::Streaming;
/// let s = Streaming::new(4, 1020).unwrap();
/// assert_eq!((s.sinks(), s.window(), s.most_new()), (4, 1020, 1016));
/// assert!(Streaming::new(8, 8).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streaming {
    sinks: usize,
    window: usize,
}

impl Streaming {
    /// Keeps the first `sinks` tokens and the most recent `window − sinks`.
    ///
    /// # Errors
    /// A window that does not hold more than its sinks (no room for a recent token), or
    /// one past [`posenc::limits::MAX_POSITIONS`].
    pub fn new(sinks: usize, window: usize) -> Result<Self> {
        posenc::limits::check(
            "the streaming window",
            window,
            posenc::limits::MAX_POSITIONS,
        )?;
        if window <= sinks {
            return Err(Error::Input(format!(
                "a streaming window of {window} positions does not hold more than its {sinks} sink token(s): it needs room for recent ones"
            )));
        }
        Ok(Self { sinks, window })
    }

    /// The tokens kept from the start of the sequence.
    pub fn sinks(&self) -> usize {
        self.sinks
    }

    /// The most positions the cache holds, sinks included.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The most tokens one read may add: `window − sinks`, so that every one of them fits
    /// beside the sinks.
    pub fn most_new(&self) -> usize {
        self.window - self.sinks
    }
}

/// What a key/value cache keeps each key and value as, llama.cpp's `-ctk`/`-ctv`: values
/// (f32, exact; f16, rounded to 11 significant bits) or blocks of 32 with one f16 scale
/// each ([`posenc_kernels::kv_blocks`]: Q8_0, 8-bit codes; Q4_0, 4-bit codes), as they
/// come or turned first by a Walsh–Hadamard matrix ([`posenc_kernels::kv_blocks::turn`]),
/// as llama.cpp keeps a quantized cache unless `LLAMA_ATTN_ROT_DISABLE` is set: keys by the
/// largest order that divides a head (from 64 up), values by 64.
///
/// ```
/// use posenc_transformer::KvType;
/// assert_eq!(KvType::F16.row_bytes(64).unwrap(), 128);
/// assert_eq!(KvType::Q8_0.row_bytes(64).unwrap(), 68);
/// assert_eq!(KvType::Q4_0.row_bytes(64).unwrap(), 36);
/// assert_eq!(KvType::Q4_0Hadamard.row_bytes(64).unwrap(), 36);
/// assert!(KvType::Q8_0.row_bytes(48).is_err());
/// assert!(KvType::Q8_0Hadamard.row_bytes(32).is_err());
/// assert_eq!(KvType::Q4_0Hadamard.to_string(), "q4_0-hadamard");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvType {
    /// 4 bytes a value: exact.
    F32,
    /// 2 bytes a value.
    F16,
    /// 34 bytes per 32 values.
    #[serde(rename = "q8_0")]
    Q8_0,
    /// 18 bytes per 32 values.
    #[serde(rename = "q4_0")]
    Q4_0,
    /// Q8_0, each row turned first (llama.cpp's `-ctk q8_0` by default).
    #[serde(rename = "q8_0-hadamard")]
    Q8_0Hadamard,
    /// Q4_0, each row turned first (llama.cpp's `-ctk q4_0` by default).
    #[serde(rename = "q4_0-hadamard")]
    Q4_0Hadamard,
}

/// How a [`KvType`] keeps a row.
enum Form {
    Values(DType),
    /// Blocks, and whether their rows are turned first.
    Blocks(Format, bool),
}

/// The smallest order llama.cpp turns a row by, and the one it turns values by.
const TURN: usize = 64;

impl KvType {
    /// The bytes one cached value takes: 4, 2, or a quantized block's bytes over its 32
    /// values (what a decode step reads of the cache per value).
    pub fn bytes_per_value(self) -> f64 {
        match self {
            Self::F32 => 4.0,
            Self::F16 => 2.0,
            Self::Q8_0 | Self::Q8_0Hadamard => 34.0 / 32.0,
            Self::Q4_0 | Self::Q4_0Hadamard => 18.0 / 32.0,
        }
    }

    fn form(self) -> Form {
        match self {
            Self::F32 => Form::Values(DType::F32),
            Self::F16 => Form::Values(DType::F16),
            Self::Q8_0 => Form::Blocks(Format::Q8_0, false),
            Self::Q4_0 => Form::Blocks(Format::Q4_0, false),
            Self::Q8_0Hadamard => Form::Blocks(Format::Q8_0, true),
            Self::Q4_0Hadamard => Form::Blocks(Format::Q4_0, true),
        }
    }

    /// The dtype of a cache of values; `None` for blocks.
    pub fn dtype(self) -> Option<DType> {
        match self.form() {
            Form::Values(dtype) => Some(dtype),
            Form::Blocks(..) => None,
        }
    }

    /// The type's name in ggml (llama.cpp's `-ctk`): f32, f16, q8_0 or q4_0, turned or not.
    pub fn ggml_name(self) -> &'static str {
        match self.form() {
            Form::Values(DType::F16) => "f16",
            Form::Values(_) => "f32",
            Form::Blocks(Format::Q8_0, _) => "q8_0",
            Form::Blocks(..) => "q4_0",
        }
    }

    /// Whether rows are turned by a Walsh–Hadamard matrix before they are rounded.
    pub fn turned(self) -> bool {
        matches!(self.form(), Form::Blocks(_, true))
    }

    /// The type that keeps `dtype` as it is, if a cache keeps it (f32 and f16).
    pub fn of(dtype: DType) -> Option<Self> {
        match dtype {
            DType::F32 => Some(Self::F32),
            DType::F16 => Some(Self::F16),
            _ => None,
        }
    }

    /// Bytes per row of `width` values (one head's key or value at one position).
    ///
    /// # Errors
    /// Blocks over a width that is not a whole number of them (a multiple of 32); turned
    /// blocks over one that is not a multiple of 64.
    pub fn row_bytes(self, width: usize) -> Result<usize> {
        match self.form() {
            Form::Values(dtype) => Ok(width * dtype.size_in_bytes()),
            Form::Blocks(_, true) if !width.is_multiple_of(TURN) => Err(Error::Input(format!(
                "a {self} key/value cache turns rows {TURN} values at a time: heads of {width} cannot be turned (use {})",
                self.ggml_name()
            ))),
            Form::Blocks(format, _) => kv_blocks::row_bytes(format, width).ok_or_else(|| {
                Error::Input(format!(
                    "a {self} key/value cache keeps blocks of 32 values: heads of {width} cannot be blocked (use f16 or f32)"
                ))
            }),
        }
    }

    /// The order a row of `width` is turned by, if this type turns it: keys by the largest
    /// power of two from 64 up that divides the width, values by 64, as llama.cpp does
    /// (`build_input_k_rot`, `build_input_v_rot`).
    fn turn(self, width: usize, keys: bool) -> Option<usize> {
        if !self.turned() {
            return None;
        }
        let mut n = TURN;
        while keys && 2 * n <= kv_blocks::MAX_ORDER && width.is_multiple_of(2 * n) {
            n *= 2;
        }
        Some(n)
    }

    /// Keeps `x (…, width)`, keys or values, as this type: converted, or quantized to
    /// `u8 (…, row bytes)`, turned first if the type turns.
    fn keep(self, x: &Tensor, keys: bool) -> Result<Tensor> {
        let width = x.dim(D::Minus1)?;
        self.row_bytes(width)?;
        Ok(match (self.form(), self.turn(width, keys)) {
            (Form::Values(dtype), _) => x.to_dtype(dtype)?,
            (Form::Blocks(format, _), Some(n)) => {
                kv_blocks::quantize(&kv_blocks::turn(x, n)?, format)?
            }
            (Form::Blocks(format, _), None) => kv_blocks::quantize(x, format)?,
        })
    }

    /// What `buffer` (a view of a cache's keys or values) holds, as the kernels read it.
    fn kept(self, buffer: Tensor, keys: bool) -> Kept {
        match self.form() {
            Form::Blocks(format, _) => {
                let bytes = buffer.dims().last().copied().unwrap_or(0);
                let width = bytes / format.block_bytes() * posenc_kernels::quantized::BLOCK;
                Kept::Blocks {
                    rows: buffer,
                    format,
                    turned: self.turn(width, keys),
                }
            }
            Form::Values(_) => Kept::Dense(buffer),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q8_0Hadamard => "q8_0-hadamard",
            Self::Q4_0Hadamard => "q4_0-hadamard",
        })
    }
}

/// The running sums of an encoding's decay gates ([`KvCache::append_decayed`]), f32.
#[derive(Debug, Clone)]
pub struct DecaySums {
    /// The new positions', `(batch, heads, new)`: the queries' of this read.
    pub queries: Tensor,
    /// Every cached position's, the new ones last, `(batch, heads, len)`: the keys'.
    pub keys: Tensor,
}

impl DecaySums {
    /// The decay bias of the queries against the keys, `(batch, heads, new, len)`
    /// ([`Decay::between`]).
    ///
    /// # Errors
    /// Sums whose batch or heads differ.
    pub fn bias(&self) -> Result<Tensor> {
        Ok(Decay::between(&self.queries, &self.keys)?)
    }
}

/// `gates` as f32, checked to be `(batch, heads, new)`.
fn check_gates(gates: &Tensor, batch: usize, new: usize) -> Result<Tensor> {
    match gates.dims() {
        &[b, _, n] if (b, n) == (batch, new) => Ok(gates.to_dtype(DType::F32)?),
        dims => Err(Error::Input(format!(
            "decay gates {dims:?} must be (batch {batch}, heads, {new} new positions)"
        ))),
    }
}

/// Keys and values computed so far, for incremental decoding.
///
/// They live in one buffer per tensor, `(batch, kv_heads, capacity, head_dim)`, written in
/// place as positions arrive: a generation of `n` tokens copies each key once, where
/// concatenating the cache with every new token would copy `O(n²)`. The capacity is what
/// [`KvCache::reserve`] asked for, or else doubles when it runs out. Not `Clone`: a shallow
/// clone would share the buffers that the next write changes; [`KvCache::try_clone`] copies.
///
/// Keys and values are kept in the dtype they come in, or as the [`KvType`]
/// [`KvCache::store_as`] names: f16 halves the cache of an f32 model, as llama.cpp keeps
/// its own, and Q8_0 and Q4_0 blocks take 0.53 and 0.28 of f16's bytes;
/// [`posenc_kernels::flash_attention`] reads any of them tile by tile in f32.
#[derive(Debug, Default)]
pub struct KvCache {
    /// The buffers, contiguous: keys and values `(batch, kv_heads, capacity, head_dim)`
    /// (blocks: `u8`, the last dimension a row's bytes), then, for an encoding that decays ([`posenc::Decay`]), the running sums of its
    /// log-gates `(batch, heads, capacity, 1)` (f32); empty before the first write.
    buffers: Vec<Tensor>,
    /// Positions written.
    len: usize,
    /// The capacity to allocate on the first write.
    reserved: usize,
    /// The length the sequence being read will reach ([`KvCache::read_until`]).
    reach: usize,
    /// What keys and values are kept as, if not as they come.
    kind: Option<KvType>,
    /// Whether and how the cache rolls.
    streaming: Option<Streaming>,
    /// Positions written in all, evicted ones included.
    seen: usize,
    /// The last rows of the attention's input, for an encoding that reads some before the
    /// new ones ([`posenc::Capabilities::input_history`]): `(batch, rows, d_model)`.
    input_tail: Option<Tensor>,
}

impl KvCache {
    /// Says that what is read next belongs to a sequence that will reach `total`
    /// positions: the encoding then sees each piece as [`Positions::Within`] it (dynamic
    /// NTK takes `total`'s frequencies, as one forward over the whole would), and the next
    /// allocation makes room for all of them. Positions past `total` are read as themselves.
    pub fn read_until(&mut self, total: usize) {
        self.reach = total;
    }

    /// An empty cache that rolls ([`Streaming`]), keeping keys and values as `kind` if
    /// one is given.
    pub fn streaming(streaming: Streaming, kind: Option<KvType>) -> Self {
        Self {
            kind,
            streaming: Some(streaming),
            reserved: streaming.window,
            ..Self::default()
        }
    }

    /// How the cache rolls, if it does.
    pub fn rolls(&self) -> Option<Streaming> {
        self.streaming
    }

    /// Positions written in all, those a rolling cache has evicted included.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Where the keys a read finds sit, when the cache keeps them as they came and they
    /// are turned at every read: a rolling cache's keys take their places in its window,
    /// `0, 1, …`, the new ones last. `None`: keys are turned once, at the positions they
    /// were written at ([`KvCache::positions`]), and kept so.
    pub(crate) fn key_positions(&self) -> Option<Positions<'static>> {
        self.streaming.map(|_| Positions::From(0))
    }

    /// Where `new` tokens after the cached ones sit: after them, or, in a rolling cache
    /// whose window they would overflow, after the ones that stay.
    pub(crate) fn positions(&self, new: usize) -> Positions<'static> {
        if let Some(s) = self.streaming {
            return Positions::From(self.len.min(s.window.saturating_sub(new)));
        }
        match self.reach > self.len + new {
            true => Positions::Within {
                offset: self.len,
                total: self.reach,
            },
            false => Positions::From(self.len),
        }
    }

    /// An empty cache that keeps keys and values as `kind` ([`KvCache::store_as`]).
    pub fn kept_as(kind: KvType) -> Self {
        Self {
            kind: Some(kind),
            ..Self::default()
        }
    }

    /// Keeps what is written from now on as `kind` (f16 to halve an f32 cache, Q8_0 or
    /// Q4_0 blocks to quarter it or less); [`KvCache::get`] and [`KvCache::append`] then
    /// hand back f16 for f16, and f32 for blocks, expanded.
    ///
    /// # Errors
    /// A cache that already holds positions kept otherwise.
    pub fn store_as(&mut self, kind: KvType) -> Result<()> {
        match self.kind() {
            Some(held) if !self.buffers.is_empty() && held != kind => Err(Error::Input(format!(
                "the key/value cache already holds {held}: it cannot be kept as {kind}"
            ))),
            _ => {
                self.kind = Some(kind);
                Ok(())
            }
        }
    }

    /// What keys and values are kept as: the type [`KvCache::store_as`] named, or else
    /// that of the first write (`None` before it, or for a dtype no [`KvType`] names).
    pub fn kind(&self) -> Option<KvType> {
        self.kind
            .or_else(|| self.buffers.first().and_then(|k| KvType::of(k.dtype())))
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
        let buffers = self
            .buffers
            .iter()
            .map(|b| b.copy())
            .collect::<candle_core::Result<_>>()?;
        let input_tail = self.input_tail.as_ref().map(|t| t.copy()).transpose()?;
        Ok(Self {
            buffers,
            input_tail,
            ..*self
        })
    }

    /// Positions the buffers hold room for (0 before the first write).
    pub fn capacity(&self) -> usize {
        self.buffers.first().map_or(0, |k| k.dim(2).unwrap_or(0))
    }

    /// Makes room for `positions` in all at the first write (or the next growth), so that
    /// a generation of known length allocates its cache once; at most [`RESERVE_AHEAD`]
    /// positions past what is written or surely read ([`KvCache::read_until`]), so that a
    /// long generation that stops early does not hold memory it never used (past that, the
    /// cache doubles as it fills).
    pub fn reserve(&mut self, positions: usize) {
        self.reserved = self.reserved.max(positions);
    }

    /// The cached keys and values, `(batch, kv_heads, len, head_dim)` each: views of the
    /// buffers, no copy; blocks are expanded to f32 (a copy: [`KvCache::kept`] reads them
    /// as they lie).
    pub fn get(&self) -> Result<Option<(Tensor, Tensor)>> {
        Ok(match self.kept()? {
            Some((k, v)) => Some((k.dense()?, v.dense()?)),
            None => None,
        })
    }

    /// The cached keys and values as they are kept, for [`posenc_kernels::flash_attention`]:
    /// views of the buffers, blocks as blocks.
    pub fn kept(&self) -> Result<Option<(Kept, Kept)>> {
        match self.buffers.as_slice() {
            [k, v, ..] if self.len > 0 => {
                let (k, v) = (k.narrow(2, 0, self.len)?, v.narrow(2, 0, self.len)?);
                Ok(Some(match self.kind {
                    Some(kind) => (kind.kept(k, true), kind.kept(v, false)),
                    None => (Kept::Dense(k), Kept::Dense(v)),
                }))
            }
            _ => Ok(None),
        }
    }

    /// The running sums of the log-gates of the cached keys, `(batch, heads, len)`, for an
    /// encoding that decays; `None` for one that does not.
    pub fn decay_sums(&self) -> Result<Option<Tensor>> {
        match self.buffers.get(2) {
            Some(sums) if self.len > 0 => Ok(Some(sums.narrow(2, 0, self.len)?.squeeze(3)?)),
            _ => Ok(None),
        }
    }

    /// Writes `k, v (batch, kv_heads, new, head_dim)` after the cached positions and returns
    /// all of them ([`KvCache::get`]).
    ///
    /// Keys and values are converted to the cache's dtype ([`KvCache::store_as`]) if it
    /// has one, so what comes back may be of another dtype than `k` and `v`.
    ///
    /// # Errors
    /// Keys or values whose batch, heads or width differ from those cached, or whose dtype
    /// differs from the cache's when [`KvCache::store_as`] named none.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (k, v, _) = self.append_decayed(k, v, None)?;
        Ok((k, v))
    }

    /// [`KvCache::append`], with the log-gates `(batch, heads, new)` of an encoding that
    /// decays ([`posenc::Decay::before`]): the cache keeps their running sum past every
    /// key, evicted ones included, and returns it for the new positions and for all it
    /// holds ([`DecaySums`]).
    ///
    /// # Errors
    /// As [`KvCache::append`]; gates whose batch or length differ from the keys', or a
    /// cache that holds keys written with gates now written without, or the other way.
    pub fn append_decayed(
        &mut self,
        k: &Tensor,
        v: &Tensor,
        gates: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Option<DecaySums>)> {
        let sums = self.write_decayed(k, v, gates)?;
        let (k, v) = self
            .get()?
            .ok_or_else(|| Error::Input("an empty write to the key/value cache".into()))?;
        Ok((k, v, sums))
    }

    /// [`KvCache::append_decayed`], without reading the cache back: the running sums of
    /// the gates, if given ([`KvCache::kept`] reads the keys and values as kept).
    ///
    /// # Errors
    /// As [`KvCache::append_decayed`]; rows a quantized cache cannot block (a width that is
    /// not a multiple of 32).
    pub fn write_decayed(
        &mut self,
        k: &Tensor,
        v: &Tensor,
        gates: Option<&Tensor>,
    ) -> Result<Option<DecaySums>> {
        let (k, v) = match self.kind {
            Some(kind) => (&kind.keep(k, true)?, &kind.keep(v, false)?),
            None => (k, v),
        };
        let (b, heads, new, d) = k.dims4()?;
        let d_v = v.dim(D::Minus1)?;
        // Values may be narrower than keys (PoPE's keys are twice as wide), no more.
        if v.dims()[..3] != k.dims()[..3] {
            return Err(Error::Input(format!(
                "cached keys {:?} and values {:?} must have one batch, head count and length",
                k.dims(),
                v.dims()
            )));
        }
        if let [ck, cv, ..] = self.buffers.as_slice() {
            let (cb, ch, _, cd) = ck.dims4()?;
            let fits = (cb, ch, cd, cv.dim(D::Minus1)?) == (b, heads, d, d_v);
            if !fits || ck.dtype() != k.dtype() {
                return Err(Error::Input(format!(
                    "new keys {:?} and values {:?} ({:?}) do not fit a cache of (batch {cb}, heads {ch}, widths {cd} and {}) ({:?})",
                    k.dims(),
                    v.dims(),
                    k.dtype(),
                    cv.dim(D::Minus1)?,
                    ck.dtype()
                )));
            }
        }
        let gates = gates.map(|g| check_gates(g, b, new)).transpose()?;
        if !self.buffers.is_empty() && gates.is_some() != (self.buffers.len() == 3) {
            return Err(Error::Input(
                "a key/value cache holds keys with and without decay gates: one encoding writes it"
                    .into(),
            ));
        }
        if let Some(s) = self.streaming {
            self.evict(s, new)?;
        }
        // After the cached keys' sums: the last one's, plus the new gates' running sums.
        let sums = match (gates, self.decay_sums()?) {
            (Some(g), Some(cached)) => {
                let last = cached.narrow(2, self.len - 1, 1)?;
                Some(Decay::running_sums(&g)?.broadcast_add(&last)?)
            }
            (Some(g), None) => Some(Decay::running_sums(&g)?),
            (None, _) => None,
        };
        let end = self.len + new;
        let mut writes = vec![k.contiguous()?, v.contiguous()?];
        writes.extend((sums.as_ref().map(|s| s.unsqueeze(3)?.contiguous())).transpose()?);
        if end > self.capacity() {
            // The sequence surely reaches `certain`: a prompt read in pieces allocates its
            // whole cache at the first, where growing piece by piece would leave the
            // smaller buffers behind, freed but held by the allocator.
            let certain = end.max(self.reach);
            let reserved = self.reserved.min(certain.saturating_add(RESERVE_AHEAD));
            let capacity = certain.max(reserved).max(2 * self.capacity());
            let mut grown = Vec::with_capacity(writes.len());
            for (i, w) in writes.iter().enumerate() {
                let (b, h, _, d) = w.dims4()?;
                let fresh = Tensor::zeros((b, h, capacity, d), w.dtype(), w.device())?;
                if let (Some(old), true) = (self.buffers.get(i), self.len > 0) {
                    fresh.slice_set(&old.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                }
                grown.push(fresh);
            }
            self.buffers = grown;
        }
        for (buffer, w) in self.buffers.iter().zip(&writes) {
            buffer.slice_set(w, 2, self.len)?;
        }
        self.len = end;
        self.seen += new;
        Ok(match (sums, self.decay_sums()?) {
            (Some(queries), Some(keys)) => Some(DecaySums { queries, keys }),
            _ => None,
        })
    }

    /// Makes room in a rolling cache for `new` positions: the oldest ones after the sinks
    /// leave, and the rest move down to follow the sinks.
    fn evict(&mut self, s: Streaming, new: usize) -> Result<()> {
        if new > s.most_new() {
            return Err(Error::Input(format!(
                "{new} new tokens do not fit a streaming window of {} beside its {} sink(s): read at most {} at a time",
                s.window,
                s.sinks,
                s.most_new()
            )));
        }
        let gone = (self.len + new).saturating_sub(s.window);
        if gone == 0 {
            return Ok(());
        }
        let kept = self.len - s.sinks - gone;
        if kept > 0 {
            for (i, buffer) in self.buffers.iter().enumerate() {
                // A copy first: the rows move down within the same buffer.
                let mut recent = buffer.narrow(2, s.sinks + gone, kept)?.copy()?;
                if i == 2 {
                    // Decay sums, as within the cache: the evicted tokens' gates leave them.
                    let last_evicted = buffer.narrow(2, s.sinks + gone - 1, 1)?;
                    let evicted = match s.sinks {
                        0 => last_evicted,
                        n => (last_evicted - buffer.narrow(2, n - 1, 1)?)?,
                    };
                    recent = recent.broadcast_sub(&evicted)?;
                }
                buffer.slice_set(&recent.contiguous()?, 2, s.sinks)?;
            }
        }
        self.len -= gone;
        Ok(())
    }

    /// Keeps batch entries `indices` (u32), in that order: beam search reorders hypotheses.
    pub fn select(&mut self, indices: &Tensor) -> Result<()> {
        self.buffers = (self.buffers.iter())
            .map(|b| b.index_select(indices, 0))
            .collect::<candle_core::Result<_>>()?;
        self.input_tail = (self.input_tail.as_ref())
            .map(|t| t.index_select(indices, 0))
            .transpose()?;
        Ok(())
    }

    /// The context an encoding reads the attention's new input `x` in: after the last rows
    /// of the input kept by [`KvCache::keep_input`], if any.
    pub(crate) fn input_context<'a>(&'a self, x: &'a Tensor) -> posenc::InputContext<'a> {
        posenc::InputContext {
            input: x,
            before: self.input_tail.as_ref(),
        }
    }

    /// Keeps the last `rows` rows of the input read so far, `x (batch, new, d_model)` after
    /// those kept before.
    pub(crate) fn keep_input(&mut self, x: &Tensor, rows: usize) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let all = match &self.input_tail {
            Some(t) => Tensor::cat(&[t, x], 1)?,
            None => x.clone(),
        };
        let n = all.dim(1)?;
        self.input_tail = Some(all.narrow(1, n.saturating_sub(rows), n.min(rows))?.copy()?);
        Ok(())
    }

    /// Writes `keys (batch, kv_heads, len, head_dim)` over every cached key: the frame of an
    /// encoding that turns its keys along the sequence ([`posenc::householder`]).
    ///
    /// # Errors
    /// Keys of another shape than those cached; a cache that keeps blocks or rolls, whose
    /// keys cannot be turned in place.
    pub(crate) fn overwrite_keys(&mut self, keys: &Tensor) -> Result<()> {
        if self.streaming.is_some() || matches!(self.kind.map(KvType::form), Some(Form::Blocks(..)))
        {
            return Err(Error::Input(
                "keys turned along the sequence (`path`) are kept as values, in a cache that does not roll: keep them as f32 or f16".into(),
            ));
        }
        let Some(buffer) = self.buffers.first() else {
            return Err(Error::Input("no keys cached to turn".into()));
        };
        let (b, h, _, d) = buffer.dims4()?;
        if keys.dims() != [b, h, self.len, d] {
            return Err(Error::Input(format!(
                "turned keys {:?} must be the cached (batch {b}, heads {h}, {} positions, width {d})",
                keys.dims(),
                self.len
            )));
        }
        buffer.slice_set(&keys.to_dtype(buffer.dtype())?.contiguous()?, 2, 0)?;
        Ok(())
    }
}
