//! The key/value cache's engine: new queries against every cached key, causally, tile by
//! tile through the long-context kernel where it can (no `(q_len, k_len)` matrix exists),
//! else densely through the core ([`MultiHeadAttention::attend`]).

use std::ops::Range;

use candle_core::Tensor;
use posenc::householder::Householders;
use posenc::{BiasContext, Decay, Positions, Role};
use posenc_kernels as kernels;
use posenc_kernels::kv_blocks::Kept;

use super::{DecayRows, MultiHeadAttention, ScoreBias, Turned};
use crate::kv_cache::{DecaySums, KvCache};
use crate::linear::Proj;
use crate::mask::Mask;
use crate::{Error, Result};

impl MultiHeadAttention {
    /// Self-attention of the projected, rotated `q`, `k`, `v` of new positions `at` after
    /// what `cache` holds, under a `mask` (or asked for its weights): the keys of the whole
    /// cache are read densely, with the position `bias` given for them (else the encoding's
    /// for these queries against every key) and the decay's running sums.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn masked_cached(
        &self,
        cache: &mut KvCache,
        x: &Tensor,
        [q, k, v]: [&Tensor; 3],
        at: Positions,
        mask: Option<&Mask>,
        bias: Option<&Tensor>,
        weights: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        if cache.rolls().is_some() {
            return Err(Error::Input(
                "a rolling key/value cache runs causally with neither a mask nor weights".into(),
            ));
        }
        let read = self.read_input(cache.input_context(x))?;
        if let Some(path) = read.transforms {
            let read = (path, read.decay);
            return self.turned_cached(cache, x, [q, k, v], at, mask, read, weights);
        }
        let (k, v, sums) = self.append(cache, k, v, read.decay.as_ref())?;
        let (k, v) = (dense(&k, q)?, dense(&v, q)?);
        // After a cache the keys reach further than the queries: the bias of these
        // positions, which the stack (computing one bias for all) did not give.
        let bias = match (bias, &self.encoding) {
            (Some(bias), _) => Some(bias.clone()),
            (None, Some(e)) => {
                let q_len = self.split(q)?.dim(2)?;
                e.bias(&BiasContext::new(q_len, k.dim(2)?, at, 0))?
            }
            (None, None) => None,
        };
        let decay = sums.map(|s| s.bias()).transpose()?;
        let bias = ScoreBias::new(bias.as_ref(), decay.as_ref());
        self.attend(q, &k, &v, bias, mask, true)
    }

    /// Causal self-attention of the new positions `x` after those in `cache`, at
    /// inference ([`MultiHeadAttention::forward`]).
    pub(super) fn cached_self_attention(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
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
        let read = self.read_input(cache.input_context(x))?;
        let decay = read.decay;
        if let Some(path) = read.transforms {
            let k = self.rotate(&k, at, Role::Key)?;
            let causal = Mask::causal(new, offset + new, offset, x.device())?;
            let (parts, read) = ([&q, &k, &v], (path, decay));
            return Ok(self
                .turned_cached(cache, x, parts, at, Some(&causal), read, false)?
                .0);
        }
        // Keys are turned where the cache says they sit: once, as written, or (a rolling
        // cache) at every read, to their places in its window.
        let (k, v, sums) = match cache.key_positions() {
            None => self.append(cache, &self.rotate(&k, at, Role::Key)?, &v, decay.as_ref())?,
            Some(keys_at) => {
                let (k, v, sums) = self.append(cache, &k, &v, decay.as_ref())?;
                let k = self.rotate(&dense(&k, &q)?, keys_at, Role::Key)?;
                (Kept::Dense(k), v, sums)
            }
        };
        let scale = self.scale();
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
                let cx = BiasContext::new(rows.len(), keys.len(), offset + rows.start, keys.start);
                let position = encoding.bias(&cx).map_err(candle_core::Error::wrap)?;
                let decay = tiles.as_ref().map(|t| t.tile(rows, keys)).transpose()?;
                Ok(match (position, decay) {
                    (Some(p), Some(d)) => Some((p + d)?),
                    (p, d) => p.or(d),
                })
            };
            // A sliding window's bias masks the keys past it; the kernel skips their tiles.
            let causal = Some(kernels::Causal {
                offset,
                window: self.caps.reach,
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
            Some(encoding) => encoding.bias(&BiasContext::new(new, len, at, 0))?,
            None => None,
        };
        let decay = sums.map(|s| s.bias()).transpose()?;
        let bias = ScoreBias::new(bias.as_ref(), decay.as_ref());
        Ok(self.attend(&q, &k, &v, bias, Some(&mask), true)?.0)
    }

    /// Self-attention of new positions `at` after a cache, for an encoding that turns its
    /// keys along the sequence (PaTH), with its transforms and any decay (`read`): the new
    /// queries score against the cache's frame of turned keys and their own, and the
    /// frame, turned by the new tokens' transforms and extended by their keys, is written
    /// back over the cached keys.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn turned_cached(
        &self,
        cache: &mut KvCache,
        x: &Tensor,
        [q, k, v]: [&Tensor; 3],
        at: Positions,
        mask: Option<&Mask>,
        (path, decay): (Householders, Option<Decay>),
        weights: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let frame = cache.get()?.map(|(k, _)| k);
        let (_, v, sums) = self.append(cache, k, v, decay.as_ref())?;
        let v = dense(&v, q)?;
        let new = self.split(q)?.dim(2)?;
        let len = frame.as_ref().map_or(Ok(0), |f| f.dim(2))? + new;
        let position = match &self.encoding {
            Some(encoding) => encoding.bias(&BiasContext::new(new, len, at, 0))?,
            None => None,
        };
        let turned = Turned {
            path: &path,
            frame: frame.as_ref(),
            position: position.as_ref(),
            decay: sums.map(DecayRows::Sums),
        };
        let (out, weights, frame) = self.turned([q, k, &v], turned, mask, weights)?;
        cache.overwrite_keys(&frame)?;
        cache.keep_input(x, self.caps.input_history)?;
        Ok((out, weights))
    }

    /// Writes the new keys and values `k, v (batch, new, kv_heads·d_k)` to `cache`, with the
    /// gates of a `decay` if the encoding reads one, and returns all it holds, split into
    /// heads and as it keeps them ([`KvCache::kept`]), and the gates' running sums for the
    /// new positions and for all of them.
    pub(super) fn append(
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
}

/// Keys or values as kept, expanded to `q`'s dtype.
pub(super) fn dense(kept: &Kept, q: &Tensor) -> Result<Tensor> {
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
