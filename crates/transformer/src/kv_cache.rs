//! The keys and values a self- or cross-attention has computed so far, kept for
//! incremental decoding: each generated token projects only its own key and value.
//!
//! A cache may also roll ([`Streaming`]): it keeps the first few tokens (the attention
//! sinks) and the most recent ones, so that a model reads or generates past any length in
//! constant memory (StreamingLLM, Xiao et al. 2024).

use candle_core::{DType, Tensor, D};
use posenc::Positions;

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
/// about positions it was trained on.
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

/// Keys and values computed so far, for incremental decoding.
///
/// They live in one buffer per tensor, `(batch, kv_heads, capacity, head_dim)`, written in
/// place as positions arrive: a generation of `n` tokens copies each key once, where
/// concatenating the cache with every new token would copy `O(n²)`. The capacity is what
/// [`KvCache::reserve`] asked for, or else doubles when it runs out. Not `Clone`: a shallow
/// clone would share the buffers that the next write changes; [`KvCache::try_clone`] copies.
///
/// Keys and values are kept in the dtype they come in, or in the one
/// [`KvCache::store_as`] names: f16 halves the cache of an f32 model, as llama.cpp keeps
/// its own, and [`posenc_kernels::flash_attention`] reads it tile by tile in f32.
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
    /// The dtype keys and values are kept in, if not their own.
    dtype: Option<DType>,
    /// Whether and how the cache rolls.
    streaming: Option<Streaming>,
    /// Positions written in all, evicted ones included.
    seen: usize,
}

impl KvCache {
    /// Says that what is read next belongs to a sequence that will reach `total`
    /// positions: the encoding then sees each piece as [`Positions::Within`] it (dynamic
    /// NTK takes `total`'s frequencies, as one forward over the whole would), and the next
    /// allocation makes room for all of them. Positions past `total` are read as themselves.
    pub fn read_until(&mut self, total: usize) {
        self.reach = total;
    }

    /// An empty cache that rolls ([`Streaming`]), keeping keys and values as `dtype` if
    /// one is given.
    pub fn streaming(streaming: Streaming, dtype: Option<DType>) -> Self {
        Self {
            dtype,
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

    /// An empty cache that keeps keys and values as `dtype` ([`KvCache::store_as`]).
    pub fn kept_as(dtype: DType) -> Self {
        Self {
            dtype: Some(dtype),
            ..Self::default()
        }
    }

    /// Keeps what is written from now on as `dtype` (f16 to halve an f32 cache);
    /// [`KvCache::get`] and [`KvCache::append`] then hand back `dtype`.
    ///
    /// # Errors
    /// A cache that already holds positions in another dtype.
    pub fn store_as(&mut self, dtype: DType) -> Result<()> {
        if let Some((k, _)) = &self.buffers {
            if k.dtype() != dtype {
                return Err(Error::Input(format!(
                    "the key/value cache already holds {:?}: it cannot be kept as {dtype:?}",
                    k.dtype()
                )));
            }
        }
        self.dtype = Some(dtype);
        Ok(())
    }

    /// The dtype keys and values are kept in: the one [`KvCache::store_as`] named, or else
    /// that of the first write (`None` before it).
    pub fn dtype(&self) -> Option<DType> {
        self.dtype
            .or_else(|| self.buffers.as_ref().map(|(k, _)| k.dtype()))
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
    /// a generation of known length allocates its cache once; at most [`RESERVE_AHEAD`]
    /// positions past what is written or surely read ([`KvCache::read_until`]), so that a
    /// long generation that stops early does not hold memory it never used (past that, the
    /// cache doubles as it fills).
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
    /// Keys and values are converted to the cache's dtype ([`KvCache::store_as`]) if it
    /// has one, so what comes back may be of another dtype than `k` and `v`.
    ///
    /// # Errors
    /// Keys or values whose batch, heads or width differ from those cached, or whose dtype
    /// differs from the cache's when [`KvCache::store_as`] named none.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (k, v) = match self.dtype {
            Some(dtype) => (&k.to_dtype(dtype)?, &v.to_dtype(dtype)?),
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
        if let Some((ck, cv)) = &self.buffers {
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
        if let Some(s) = self.streaming {
            self.evict(s, new)?;
        }
        let end = self.len + new;
        if end > self.capacity() {
            // The sequence surely reaches `certain`: a prompt read in pieces allocates its
            // whole cache at the first, where growing piece by piece would leave the
            // smaller buffers behind, freed but held by the allocator.
            let certain = end.max(self.reach);
            let reserved = self.reserved.min(certain.saturating_add(RESERVE_AHEAD));
            let capacity = certain.max(reserved).max(2 * self.capacity());
            let fresh = |d| Tensor::zeros((b, heads, capacity, d), k.dtype(), k.device());
            let (nk, nv) = (fresh(d)?, fresh(d_v)?);
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
        self.seen += new;
        self.get()?
            .ok_or_else(|| Error::Input("an empty write to the key/value cache".into()))
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
        if let (Some((k, v)), true) = (&self.buffers, kept > 0) {
            for buffer in [k, v] {
                // A copy first: the rows move down within the same buffer.
                let recent = buffer
                    .narrow(2, s.sinks + gone, kept)?
                    .copy()?
                    .contiguous()?;
                buffer.slice_set(&recent, 2, s.sinks)?;
            }
        }
        self.len -= gone;
        Ok(())
    }

    /// Keeps batch entries `indices` (u32), in that order: beam search reorders hypotheses.
    pub fn select(&mut self, indices: &Tensor) -> Result<()> {
        if let Some((k, v)) = &self.buffers {
            self.buffers = Some((k.index_select(indices, 0)?, v.index_select(indices, 0)?));
        }
        Ok(())
    }
}
