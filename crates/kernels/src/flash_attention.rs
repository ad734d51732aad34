//! Attention whose memory grows linearly with length, at inference: the queries and keys
//! are taken in tiles, and the softmax is computed online, as FlashAttention-2 does (Dao
//! 2023, Algorithm 1).
//!
//! ```text
//! for each query tile Q_i (rows r) and each key tile K_j, V_j at or below the diagonal:
//!     S     = scale · Q_i K_jᵀ + B_ij            B_ij: the encoding's bias for this tile only
//!     m'_r  = max(m_r, max_c S_rc)                the running maximum of row r
//!     P_rc  = exp(S_rc − m'_r)                    0 for keys the row may not see
//!     ℓ_r   ← ℓ_r · exp(m_r − m'_r) + Σ_c P_rc    the running sum
//!     O_r   ← O_r · exp(m_r − m'_r) + (P V_j)_r
//!     m_r   ← m'_r
//! O_r ← O_r / ℓ_r   (a row that saw no key is 0)
//! ```
//!
//! No `(heads, q_len, k_len)` tensor exists, not for the scores, the weights or the bias:
//! what lives at once is one `(rows, key tile)` block per task. Key tiles past the causal
//! diagonal are never computed. The query heads that share a key/value head (grouped-query
//! attention) are stacked as the rows of one task and read that head in place, so each key
//! tile is loaded once for the group. Keys and values may be kept in f16 (a cache of half
//! the memory, as llama.cpp keeps its own), or in Q8_0 or Q4_0 blocks ([`crate::kv_blocks`],
//! llama.cpp's `-ctk`/`-ctv`): each tile is then widened to f32 as it is read, and every
//! product and sum stays f32 (llama.cpp also quantizes the queries to Q8_0 against a
//! quantized cache; here they stay f32).
//!
//! A decode step has one query row per head. When the tasks are fewer than the cores could
//! take, each task's key tiles are split into parts, each with its own running maximum and
//! sum, merged at the end (flash-decoding). A task of few rows does no matrix product: on
//! AVX-512 its scores are dot products over key rows read where they lie, f16 widened and
//! Q8_0 or Q4_0 codes scaled as they are loaded, and its weighted sum adds each value row
//! to every row's accumulator. Other tasks widen a tile of f16 or blocks into a buffer.

use std::ops::Range;

use candle_core::{DType, Result, Storage, Tensor};
use gemm::Parallelism;
use half::f16;
use rayon::prelude::*;

use super::attention::{cpu_f32, split_dims, Heads};
use super::kv_blocks::Kept;
use super::matmul::{gemm_into, Mat, OutPtr};
use super::packed_attention::check_inference;
use super::quantized::{dequantize_row, Format};
use super::simd::{self, exp, vectorized};

/// Query rows per tile (per query head).
const QUERY_TILE: usize = 64;
/// Keys per tile.
const KEY_TILE: usize = 256;

/// The position bias of one tile, `(heads, rows.len(), keys.len())` f32, for the query
/// rows `rows` (indices into the queries) and the keys `keys` (indices into the keys), or
/// `None` when there is none. It is asked for every tile a task computes, so it must not
/// hold a bias for the whole attention.
pub type TileBias<'a> =
    dyn Fn(Range<usize>, Range<usize>) -> candle_core::Result<Option<Tensor>> + Sync + 'a;

/// Which keys a causal query sees in [`flash_attention`]: query `i` sits at key index
/// `offset + i` and sees keys `0 ..= offset + i`, or, with a `window`, only the last
/// `window` of them (keys are positions: a sliding window). Key tiles wholly before every
/// row's window are skipped; the tiles that are read must still mask the keys past the
/// window through the bias, as the window's own encoding does.
///
/// ```
/// use posenc_kernels::Causal;
/// assert_eq!(Causal::from(7), Causal { offset: 7, window: None });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Causal {
    /// Keys before the first query (those cached).
    pub offset: usize,
    /// How many keys a query sees, itself included, if not all those before it.
    pub window: Option<usize>,
}

impl From<usize> for Causal {
    fn from(offset: usize) -> Self {
        Self {
            offset,
            window: None,
        }
    }
}

/// The tiled attention of [`crate::cpu::flash_attention`] where it runs: `q` f32 and `k`,
/// `v` f32, f16 or blocks ([`Kept`]) on the CPU, with no gradient to track. `None`
/// elsewhere, where the caller composes the same attention (a causal mask and the ordinary
/// path).
///
/// # Shapes
/// As [`crate::cpu::flash_attention`].
///
/// # Errors
/// As [`crate::cpu::flash_attention`], where it runs.
pub fn flash_attention(
    q: &Tensor,
    k: impl Into<Kept>,
    v: impl Into<Kept>,
    head_dim: usize,
    scale: f32,
    causal: Option<Causal>,
    bias: Option<&TileBias>,
) -> Result<Option<Tensor>> {
    let (k, v) = (k.into(), v.into());
    let readable = |t: &Kept| match t {
        Kept::Dense(t) => matches!(t.dtype(), DType::F32 | DType::F16),
        Kept::Blocks { .. } => true,
    };
    let runs = q.dtype() == DType::F32
        && readable(&k)
        && readable(&v)
        && q.device().is_cpu()
        && ![q, k.tensor(), v.tensor()].iter().any(|t| t.track_op());
    if !runs {
        return Ok(None);
    }
    flash_attention_cpu(q, k, v, head_dim, scale, causal, bias).map(Some)
}

/// `O (b, tq, h·d)`: the attention of queries `q (b, h, tq, d)` over keys and values
/// `k, v (b, kv, tk, d)` (each also accepted with its heads merged, `(b, len, heads·d)`,
/// any strides; `d = head_dim`), with scores scaled by `scale`, plus `bias` per tile.
///
/// With `causal = Some(offset)`, query `i` sits at key index `offset + i` and sees keys
/// `0 ..= offset + i` (a chunk of new tokens after `offset` cached ones: `tk` must be at
/// least `offset + tq`), the last `window` of them if [`Causal::window`] says so; with
/// `None` every query sees every key. Query head `i` reads
/// key/value head `i / (h / kv)`. On the CPU, at inference: there is no backward. `q` is
/// f32; `k` and `v` are f32, f16 or Q8_0 or Q4_0 blocks ([`Kept::Blocks`]), widened to
/// f32 a tile at a time. Keys turned before they were rounded ([`crate::kv_blocks::turn`])
/// are read by the queries turned alike, and turned values' sum is turned back.
///
/// # Shapes
/// - `q`: `(b, h, tq, d)` or `(b, tq, h·d)`
/// - `k`, `v`: `(b, kv, tk, d)` or `(b, tk, kv·d)` (blocks: `d` counted in values)
/// - output: `(b, tq, h·d)`
///
/// # Errors
/// Other dtypes or devices; inputs that carry a gradient; shapes that do not fit together;
/// a causal offset that leaves queries past the last key; a bias of the wrong shape, or
/// the bias callback's own error.
pub fn flash_attention_cpu(
    q: &Tensor,
    k: impl Into<Kept>,
    v: impl Into<Kept>,
    head_dim: usize,
    scale: f32,
    causal: Option<Causal>,
    bias: Option<&TileBias>,
) -> Result<Tensor> {
    let (k, v) = (&k.into(), &v.into());
    let shape = |dims: &[usize]| split_dims(dims, head_dim);
    let (Some([b, h, tq, d]), Some([kb, kv, tk, kd]), Some(vs)) =
        (shape(q.dims()), shape(&k.dims()), shape(&v.dims()))
    else {
        candle_core::bail!(
            "flash attention: q {:?}, k {:?}, v {:?} must each be (b, heads, len, {head_dim}) or (b, len, heads·{head_dim})",
            q.dims(),
            k.dims(),
            v.dims()
        );
    };
    if (kb, kd) != (b, d) || vs != [b, kv, tk, d] || kv == 0 || h % kv != 0 {
        candle_core::bail!(
            "flash attention: q {:?}, k {:?}, v {:?} must be (b, h, tq, d), (b, kv, tk, d) twice, kv dividing h",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    check_inference("flash attention", [q, q, q])?;
    for (kept, what) in [(k, "keys"), (v, "values")] {
        let t = kept.tensor();
        let dense = matches!(t.dtype(), DType::F32 | DType::F16);
        let blocks = matches!(
            kept,
            Kept::Blocks {
                format: Format::Q8_0 | Format::Q4_0,
                ..
            }
        ) && t.dtype() == DType::U8;
        if !(dense || blocks) || !t.device().is_cpu() {
            candle_core::bail!(
                "flash attention: the {what} must be f32, f16, or q8_0 or q4_0 blocks, on the CPU, got {:?} {:?}",
                t.dtype(),
                t.device().location()
            );
        }
        if t.track_op() {
            candle_core::bail!("flash attention is for inference: the {what} carry a gradient");
        }
    }
    if let Some(Causal { offset, window }) = causal {
        if offset + tq > tk {
            candle_core::bail!(
                "flash attention: {tq} causal queries after {offset} cached positions need at least {} keys, got {tk}",
                offset + tq
            );
        }
        if window == Some(0) {
            candle_core::bail!("flash attention: a window of 0 keys leaves a query nothing");
        }
    }
    // Keys turned before they were rounded are read by queries turned alike, and a sum of
    // turned values is turned back (`kv_blocks::turn`): the same scores and output.
    let turned_q;
    let q = match k.turned() {
        Some(n) => {
            turned_q = crate::kv_blocks::turn(q, n)?;
            &turned_q
        }
        None => q,
    };
    let out = attend_tiles(
        q,
        k,
        v,
        [b, h, tq, d],
        [kv, tk],
        head_dim,
        scale,
        causal,
        bias,
    )?;
    match v.turned() {
        Some(n) => crate::kv_blocks::turn(&out, n),
        None => Ok(out),
    }
}

/// [`flash_attention_cpu`] past its checks: `q (b, h, tq, d)` over `kv` key/value heads of
/// `tk` positions.
#[allow(clippy::too_many_arguments)]
fn attend_tiles(
    q: &Tensor,
    k: &Kept,
    v: &Kept,
    [b, h, tq, d]: [usize; 4],
    [kv, tk]: [usize; 2],
    head_dim: usize,
    scale: f32,
    causal: Option<Causal>,
    bias: Option<&TileBias>,
) -> Result<Tensor> {
    let mut out: Vec<f32> = vec![0.0; b * tq * h * d];
    if out.is_empty() || tk == 0 {
        return Tensor::from_vec(out, (b, tq, h * d), q.device());
    }
    let guards = [q, k.tensor(), v.tensor()].map(|t| t.storage_and_layout());
    let qh = Heads::new(cpu_f32(&guards[0].0, "q")?, guards[0].1, head_dim)?;
    let (kh, vh) = (
        Stored::new(&guards[1], k, head_dim)?,
        Stored::new(&guards[2], v, head_dim)?,
    );
    let tiles = Tiles {
        h,
        group: h / kv,
        tq,
        tk,
        d,
        scale,
        causal: causal.map(|c| c.offset),
        window: causal.and_then(|c| c.window),
    };
    let dst = OutPtr(out.as_mut_ptr());
    let q_tiles = tq.div_ceil(QUERY_TILE);
    // One task per (batch entry, key/value head, query tile), each over all its key tiles;
    // or, when that leaves cores idle (a decode step: one query row per head, and fewer
    // key/value heads than twice the cores), the key tiles are split into parts whose
    // results are then merged, as flash-decoding does (Dao et al. 2023).
    let tasks = b * kv * q_tiles;
    let parts = (2 * rayon::current_num_threads())
        .div_ceil(tasks)
        .clamp(1, tk.div_ceil(KEY_TILE).max(1));
    let at = |task: usize| {
        let (bi, rest) = (task / (kv * q_tiles), task % (kv * q_tiles));
        (bi, rest / q_tiles, rest % q_tiles * QUERY_TILE)
    };
    let inputs = (&qh, &kh, &vh);
    if parts == 1 {
        (0..tasks).into_par_iter().try_for_each(|task| {
            let (bi, g, q0) = at(task);
            let part = tiles.part(bi, g, q0, (0, 1), inputs, bias)?;
            tiles.write(bi, g, q0, &[part], dst);
            Ok::<_, candle_core::Error>(())
        })?;
    } else {
        let done: Vec<Part> = (0..tasks * parts)
            .into_par_iter()
            .map(|i| {
                let (bi, g, q0) = at(i / parts);
                tiles.part(bi, g, q0, (i % parts, parts), inputs, bias)
            })
            .collect::<Result<_>>()?;
        for (task, parts) in done.chunks_exact(parts).enumerate() {
            let (bi, g, q0) = at(task);
            tiles.write(bi, g, q0, parts, dst);
        }
    }
    drop(guards);
    Tensor::from_vec(out, (b, tq, h * d), q.device())
}

/// Keys or values as they are kept: f32, read in place, or f16 or blocks, widened a tile
/// at a time.
enum Stored<'a> {
    F32(Heads<'a>),
    F16(Heads<'a, f16>),
    /// Rows of `bytes` bytes, blocks of `format`: `Heads` over bytes, a row per position.
    Blocks {
        heads: Heads<'a, u8>,
        format: Format,
        bytes: usize,
    },
}

impl<'a> Stored<'a> {
    fn new(
        (storage, layout): &'a (impl std::ops::Deref<Target = Storage>, &candle_core::Layout),
        kept: &Kept,
        head_dim: usize,
    ) -> Result<Self> {
        match (&**storage, kept) {
            (Storage::Cpu(candle_core::CpuStorage::U8(data)), &Kept::Blocks { format, .. }) => {
                let bytes = head_dim / super::quantized::BLOCK * format.block_bytes();
                let heads = Heads::new(data.as_slice(), layout, bytes)?;
                if heads.strided(0, 0).2 != 1 {
                    candle_core::bail!("flash attention: each row of blocks must lie in one piece");
                }
                Ok(Self::Blocks {
                    heads,
                    format,
                    bytes,
                })
            }
            (Storage::Cpu(candle_core::CpuStorage::F16(data)), _) => {
                Ok(Self::F16(Heads::new(data, layout, head_dim)?))
            }
            (s, _) => Ok(Self::F32(Heads::new(
                cpu_f32(s, "keys and values")?,
                layout,
                head_dim,
            )?)),
        }
    }

    /// Rows `k0 .. k0 + cols` of matrix `(bi, g)` (`d` columns) as f32: in place, or
    /// widened into `scratch` (at least `cols · d` long).
    fn rows(
        &self,
        bi: usize,
        g: usize,
        k0: usize,
        cols: usize,
        d: usize,
        scratch: &mut [f32],
    ) -> Mat {
        match self {
            Self::F32(h) => h.at(bi, g).skip_rows(k0),
            Self::F16(h) => {
                let (ptr, rs, cs) = h.strided(bi, g);
                let out = &mut scratch[..cols * d];
                let start = ptr.wrapping_offset(k0 as isize * rs);
                if cs == 1 && rs == d as isize {
                    // SAFETY: rows `k0 .. k0 + cols` (`≤ tk`) of a matrix whose rows of `d`
                    // follow one another in the storage the layout describes, as a cache's do.
                    simd::widen(unsafe { std::slice::from_raw_parts(start, cols * d) }, out);
                } else {
                    for (r, out) in out.chunks_exact_mut(d).enumerate() {
                        let row = start.wrapping_offset(r as isize * rs);
                        for (c, o) in out.iter_mut().enumerate() {
                            // SAFETY: row `k0 + r < tk`, column `c < d` of the layout.
                            *o = unsafe { *row.offset(c as isize * cs) }.to_f32();
                        }
                    }
                }
                Mat::rows(scratch, d)
            }
            Self::Blocks {
                heads,
                format,
                bytes,
            } => {
                let (ptr, rs, _) = heads.strided(bi, g);
                // Compiled for the CPU's vector instructions: a block's values widen and
                // scale in a few instructions.
                vectorized(
                    #[inline(always)]
                    || {
                        for (r, out) in scratch[..cols * d].chunks_exact_mut(d).enumerate() {
                            let row = ptr.wrapping_offset((k0 + r) as isize * rs);
                            // SAFETY: row `k0 + r < tk` of the layout, its `bytes` side by
                            // side (checked in `new`).
                            let row = unsafe { std::slice::from_raw_parts(row, *bytes) };
                            dequantize_row(*format, row, out);
                        }
                    },
                );
                Mat::rows(scratch, d)
            }
        }
    }

    /// Rows `k0 ..` of matrix `(bi, g)` where they lie, for [`few_rows`]: `None` unless
    /// each row's values (or blocks) are side by side.
    fn in_place(&self, bi: usize, g: usize, k0: usize) -> Option<few_rows::Rows> {
        fn rows<T>(
            h: &Heads<T>,
            (bi, g, k0): (usize, usize, usize),
            kind: few_rows::Kind,
        ) -> Option<few_rows::Rows> {
            let (p, rs, cs) = h.strided(bi, g);
            let ptr = p.wrapping_offset(k0 as isize * rs).cast::<u8>();
            let stride = rs * std::mem::size_of::<T>() as isize;
            (cs == 1).then_some(few_rows::Rows { ptr, stride, kind })
        }
        let at = (bi, g, k0);
        match self {
            Self::F32(h) => rows(h, at, few_rows::Kind::F32),
            Self::F16(h) => rows(h, at, few_rows::Kind::F16),
            Self::Blocks { heads, format, .. } => match format {
                Format::Q8_0 => rows(heads, at, few_rows::Kind::Q8_0),
                _ => rows(heads, at, few_rows::Kind::Q4_0),
            },
        }
    }

    /// Whether a task needs a buffer of its own to widen tiles into (`few`: whether it
    /// reads them in place with [`few_rows`]).
    fn widened(&self, few: bool) -> bool {
        !matches!(self, Self::F32(_)) && !few
    }
}

/// One query tile's result over some of its key tiles: the output rows `acc` (`n × d`)
/// before they are divided by the sums, and each row's running maximum and sum.
struct Part {
    acc: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
}

/// Where a tile's values are read from: in place (by `few_rows`), or as a matrix.
enum Values {
    InPlace(few_rows::Rows),
    Tile(Mat),
}

/// The sizes every task shares.
struct Tiles {
    h: usize,
    group: usize,
    tq: usize,
    tk: usize,
    d: usize,
    scale: f32,
    /// The causal offset ([`Causal::offset`]).
    causal: Option<usize>,
    /// The causal window ([`Causal::window`]).
    window: Option<usize>,
}

impl Tiles {
    /// The query tile from row `q0` of the `group` query heads of key/value head `g` in batch
    /// entry `bi`, over part `p` of `parts` of the key tiles it may see (all of them when
    /// `parts` is 1): its output rows before they are divided by their sums, their maxima
    /// and their sums.
    fn part(
        &self,
        bi: usize,
        g: usize,
        q0: usize,
        (p, parts): (usize, usize),
        (qh, kh, vh): (&Heads, &Stored, &Stored),
        bias: Option<&TileBias>,
    ) -> Result<Part> {
        let Self { group, d, .. } = *self;
        let rows = QUERY_TILE.min(self.tq - q0);
        let n = group * rows;
        // The group's query rows stacked: head `g·group + hh`, row `r` is row `hh·rows + r`.
        let mut qs = vec![0f32; n * d];
        for hh in 0..group {
            let m = qh.at(bi, g * group + hh).skip_rows(q0);
            for r in 0..rows {
                for (c, x) in qs[(hh * rows + r) * d..][..d].iter_mut().enumerate() {
                    // SAFETY: row `q0 + r < tq`, column `c < d` of a matrix the layout holds.
                    *x = unsafe { *m.ptr.offset(r as isize * m.rs + c as isize * m.cs) };
                }
            }
        }
        let (mut acc, mut max, mut sum) =
            (vec![0f32; n * d], vec![f32::NEG_INFINITY; n], vec![0f32; n]);
        let mut s = vec![0f32; n * KEY_TILE];
        let end = self
            .causal
            .map_or(self.tk, |o| (o + q0 + rows).min(self.tk));
        let tile = KEY_TILE.min(end) * d;
        // Few query rows (a decode step), on a CPU that runs `few_rows`, over keys and
        // values whose rows can be read where they lie: dot products over each key row
        // (f16 widened as it is loaded), where a matrix product would first widen the tile
        // into a buffer of its own and then spend most of its time packing it.
        let few = n <= few_rows::ROWS
            && few_rows::runs(d)
            && kh.in_place(bi, g, 0).is_some()
            && vh.in_place(bi, g, 0).is_some();
        let scratch = |kept: &Stored| vec![0f32; if kept.widened(few) { tile } else { 0 }];
        let (mut kbuf, mut vbuf) = (scratch(kh), scratch(vh));
        // Key tiles from the one that holds the first row's first key in its window.
        let begin = match (self.causal, self.window) {
            (Some(o), Some(w)) => (o + q0 + 1).saturating_sub(w) / KEY_TILE,
            _ => 0,
        };
        let span = end.div_ceil(KEY_TILE) - begin;
        let (first, last) = (begin + span * p / parts, begin + span * (p + 1) / parts);
        for k0 in (first * KEY_TILE..(last * KEY_TILE).min(end)).step_by(KEY_TILE) {
            let cols = KEY_TILE.min(end - k0);
            let in_place = match few {
                true => kh.in_place(bi, g, k0).zip(vh.in_place(bi, g, k0)),
                false => None,
            };
            let values = match in_place {
                Some((kr, vr)) => {
                    // SAFETY: K's rows `k0 .. k0 + cols` exist (`end ≤ tk`), `d` values each.
                    unsafe { few_rows::scores(&qs, d, kr, cols, self.scale, &mut s) };
                    Values::InPlace(vr)
                }
                None => {
                    let km = kh.rows(bi, g, k0, cols, d, &mut kbuf);
                    // SAFETY: `s` holds `n` rows of `cols ≤ KEY_TILE`; K's rows
                    // `k0 .. k0 + cols` exist (`end ≤ tk`).
                    unsafe {
                        gemm_into(
                            (n, cols, d),
                            s.as_mut_ptr(),
                            cols,
                            false,
                            Mat::rows(&qs, d),
                            km.t(),
                            self.scale,
                            Parallelism::None,
                        )
                    };
                    Values::Tile(vh.rows(bi, g, k0, cols, d, &mut vbuf))
                }
            };
            let tile_bias = bias
                .map(|f| f(q0..q0 + rows, k0..k0 + cols))
                .transpose()?
                .flatten()
                .map(|t| self.check_bias(t, rows, cols))
                .transpose()?;
            let tile_bias = tile_bias.as_ref().map(|t| t.storage_and_layout());
            let tile_bias = match &tile_bias {
                Some((st, l)) => Some(&cpu_f32(st, "the bias")?[l.start_offset()..]),
                None => None,
            };
            vectorized(
                #[inline(always)]
                || {
                    for (row, scores) in s[..n * cols].chunks_mut(cols).enumerate() {
                        let (hh, r) = (row / rows, row % rows);
                        if let Some(b) = tile_bias {
                            let at = ((g * group + hh) * rows + r) * cols;
                            scores
                                .iter_mut()
                                .zip(&b[at..at + cols])
                                .for_each(|(s, b)| *s += b);
                        }
                        // Keys this row may see in the tile: `k0 ..= offset + q0 + r`.
                        let seen = self
                            .causal
                            .map_or(cols, |o| (o + q0 + r + 1).saturating_sub(k0).min(cols));
                        let tile_max = simd::max(&scores[..seen]);
                        if tile_max == f32::NEG_INFINITY {
                            scores.fill(0.0);
                            continue;
                        }
                        let new_max = max[row].max(tile_max);
                        let rescale = exp(max[row] - new_max);
                        scores[..seen]
                            .iter_mut()
                            .for_each(|s| *s = exp(*s - new_max));
                        scores[seen..].fill(0.0);
                        sum[row] = sum[row] * rescale + simd::sum(&scores[..seen]);
                        max[row] = new_max;
                        if rescale != 1.0 {
                            acc[row * d..][..d].iter_mut().for_each(|a| *a *= rescale);
                        }
                    }
                },
            );
            match values {
                // SAFETY: V's rows `k0 .. k0 + cols` exist, `d` values each.
                Values::InPlace(vr) => unsafe { few_rows::weighted(&s, cols, vr, d, &mut acc) },
                // SAFETY: `acc` is `n × d`; `s` holds the tile's `n × cols` weights; V's rows
                // `k0 .. k0 + cols` exist.
                Values::Tile(vm) => unsafe {
                    gemm_into(
                        (n, d, cols),
                        acc.as_mut_ptr(),
                        d,
                        true,
                        Mat::rows(&s, cols),
                        vm,
                        1.0,
                        Parallelism::None,
                    )
                },
            }
        }
        Ok(Part { acc, max, sum })
    }

    /// Merges the parts of one query tile and writes its rows of the output:
    /// `O_r = Σ_p e^(m_pr − m_r) O_pr / Σ_p e^(m_pr − m_r) ℓ_pr` with `m_r = max_p m_pr`
    /// (a row that saw no key is 0; a part that saw none of a row's keys weighs nothing).
    fn write(&self, bi: usize, g: usize, q0: usize, parts: &[Part], dst: OutPtr) {
        let Self { group, d, .. } = *self;
        let rows = QUERY_TILE.min(self.tq - q0);
        let width = self.h * d;
        for hh in 0..group {
            for r in 0..rows {
                let row = hh * rows + r;
                let top = parts
                    .iter()
                    .map(|p| p.max[row])
                    .fold(f32::NEG_INFINITY, f32::max);
                let weight = |p: &Part| match p.max[row] {
                    f32::NEG_INFINITY => 0.0,
                    m => (m - top).exp(),
                };
                let sum: f32 = parts.iter().map(|p| weight(p) * p.sum[row]).sum();
                let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                let at = (bi * self.tq + q0 + r) * width + (g * group + hh) * d;
                // SAFETY: this task alone writes row `q0 + r` of its batch entry, columns of
                // head `g·group + hh`, inside the `(b, tq, h·d)` output.
                let out = unsafe { std::slice::from_raw_parts_mut(dst.at(at), d) };
                for (i, part) in parts.iter().enumerate() {
                    let (w, acc) = (weight(part) * inv, &part.acc[row * d..][..d]);
                    match i {
                        0 => out.iter_mut().zip(acc).for_each(|(o, a)| *o = a * w),
                        _ => out.iter_mut().zip(acc).for_each(|(o, a)| *o += a * w),
                    }
                }
            }
        }
    }

    /// The tile's bias as a contiguous f32 `(heads, rows, cols)` on the CPU, or an error
    /// naming what came instead.
    fn check_bias(&self, t: Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        if t.dims() != [self.h, rows, cols] || t.dtype() != DType::F32 || !t.device().is_cpu() {
            candle_core::bail!(
                "flash attention: the bias of a ({rows}, {cols}) tile must be f32 ({}, {rows}, {cols}) on the CPU, got {:?} {:?}",
                self.h,
                t.dtype(),
                t.dims()
            );
        }
        t.contiguous()
    }
}

/// Attention products for a task of few stacked query rows (a decode step), on AVX-512:
/// each score a dot product over a row of keys, four keys at a time, and the weighted sum
/// of values one value row at a time, broadcast over each query row's accumulator; keys
/// and values are read where they lie, f16 widened and blocks' codes scaled sixteen at a
/// time as they are loaded.
mod few_rows {
    /// The most stacked query rows these kernels take.
    pub(super) const ROWS: usize = 8;

    /// What a row holds: values (f32, f16), or blocks of 32 (an f16 scale then 32 bytes
    /// of 8-bit codes, or 16 bytes of 4-bit ones).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Kind {
        F32,
        F16,
        Q8_0,
        Q4_0,
    }

    /// Rows of `kind`: the first at `ptr`, each `stride` bytes after the one before, its
    /// values (or blocks) side by side.
    #[derive(Clone, Copy)]
    pub(super) struct Rows {
        pub(super) ptr: *const u8,
        pub(super) stride: isize,
        pub(super) kind: Kind,
    }

    /// Whether they run here for rows of `d` values: AVX-512F, and `d` a multiple of 16.
    pub(super) fn runs(d: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            static AVX512: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            let has = *AVX512.get_or_init(|| std::arch::is_x86_feature_detected!("avx512f"));
            has && d > 0 && d.is_multiple_of(16)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = d;
            false
        }
    }

    /// `s[r·cols + j] = scale · q_r · k_j` for the rows `q_r` of `q` (`d` each) and the
    /// rows `k_j`, `j < cols`, of `k`.
    ///
    /// # Safety
    /// [`runs`]`(d)`; `k` has `cols` rows of `d` values; `s` holds `q.len() / d` rows of
    /// `cols`.
    pub(super) unsafe fn scores(
        q: &[f32],
        d: usize,
        k: Rows,
        cols: usize,
        scale: f32,
        s: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's promise.
        unsafe {
            use x86::{F16, F32, Q4_0, Q8_0};
            match k.kind {
                Kind::F32 => x86::scores::<F32>(q, d, k, cols, scale, s),
                Kind::F16 => x86::scores::<F16>(q, d, k, cols, scale, s),
                Kind::Q8_0 => x86::scores::<Q8_0>(q, d, k, cols, scale, s),
                Kind::Q4_0 => x86::scores::<Q4_0>(q, d, k, cols, scale, s),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!(
            "runs() is false off x86-64: {:?}",
            (q.len(), d, k.kind, cols, scale, s.len())
        )
    }

    /// `acc_r += Σ_j w[r·cols + j] v_j` for the rows `acc_r` of `acc` (`d` each) and the
    /// rows `v_j`, `j < cols`, of `v`.
    ///
    /// # Safety
    /// As [`scores`], for `v`, `w` (`acc.len() / d` rows of `cols`) and `acc`.
    pub(super) unsafe fn weighted(w: &[f32], cols: usize, v: Rows, d: usize, acc: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's promise.
        unsafe {
            use x86::{F16, F32, Q4_0, Q8_0};
            match v.kind {
                Kind::F32 => x86::weighted::<F32>(w, cols, v, d, acc),
                Kind::F16 => x86::weighted::<F16>(w, cols, v, d, acc),
                Kind::Q8_0 => x86::weighted::<Q8_0>(w, cols, v, d, acc),
                Kind::Q4_0 => x86::weighted::<Q4_0>(w, cols, v, d, acc),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!(
            "runs() is false off x86-64: {:?}",
            (w.len(), cols, v.kind, d, acc.len())
        )
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use super::Rows;
        use std::arch::x86_64::*;

        pub(in super::super) const F32: u8 = 0;
        pub(in super::super) const F16: u8 = 1;
        pub(in super::super) const Q8_0: u8 = 2;
        pub(in super::super) const Q4_0: u8 = 3;

        /// Values `i .. i + 16` (`i` a multiple of 16) of the row at `p`, of kind `K`, as
        /// f32. A block's value is its scale times its code (Q4_0: less 8), each product
        /// exact in f32, so that the values are those `dequantize_row` writes.
        #[target_feature(enable = "avx512f")]
        #[inline]
        unsafe fn load16<const K: u8>(p: *const u8, i: usize) -> __m512 {
            // SAFETY: the caller's 16 values, in the whole block that holds them.
            unsafe {
                match K {
                    F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.add(2 * i).cast())),
                    Q8_0 => {
                        let block = p.add(i / 32 * 34);
                        let d = _mm512_cvtph_ps(_mm256_set1_epi16(
                            block.cast::<i16>().read_unaligned(),
                        ));
                        let codes = _mm_loadu_si128(block.add(2 + i % 32).cast());
                        _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)))
                    }
                    Q4_0 => {
                        let block = p.add(i / 32 * 18);
                        let d = _mm512_cvtph_ps(_mm256_set1_epi16(
                            block.cast::<i16>().read_unaligned(),
                        ));
                        let bytes = _mm_loadu_si128(block.add(2).cast());
                        // Values 0..16 are the low nibbles, 16..32 the high ones.
                        let bytes = match i % 32 {
                            0 => bytes,
                            _ => _mm_srli_epi16::<4>(bytes),
                        };
                        let nibbles = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
                        let codes = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(nibbles));
                        _mm512_mul_ps(d, _mm512_sub_ps(codes, _mm512_set1_ps(8.0)))
                    }
                    _ => _mm512_loadu_ps(p.add(4 * i).cast()),
                }
            }
        }

        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn scores<const K: u8>(
            q: &[f32],
            d: usize,
            k: Rows,
            cols: usize,
            scale: f32,
            s: &mut [f32],
        ) {
            let n = q.len() / d;
            assert!(s.len() >= n * cols);
            let row = |j: usize| k.ptr.wrapping_offset(j as isize * k.stride);
            // SAFETY (all of this function): rows `j < cols` of `k` and `r < n` of `q`,
            // `d` values each, `c + 16 ≤ d`; `r·cols + j < s.len()`.
            unsafe {
                let mut j = 0;
                while j + 4 <= cols {
                    let ks = [row(j), row(j + 1), row(j + 2), row(j + 3)];
                    for r in 0..n {
                        let qr = q.as_ptr().add(r * d);
                        let mut acc = [_mm512_setzero_ps(); 4];
                        for c in (0..d).step_by(16) {
                            let qv = _mm512_loadu_ps(qr.add(c));
                            for t in 0..4 {
                                let kv = load16::<K>(ks[t], c);
                                acc[t] = _mm512_fmadd_ps(qv, kv, acc[t]);
                            }
                        }
                        for (t, acc) in acc.iter().enumerate() {
                            *s.get_unchecked_mut(r * cols + j + t) =
                                scale * _mm512_reduce_add_ps(*acc);
                        }
                    }
                    j += 4;
                }
                for j in j..cols {
                    for r in 0..n {
                        let qr = q.as_ptr().add(r * d);
                        let mut acc = _mm512_setzero_ps();
                        for c in (0..d).step_by(16) {
                            let kv = load16::<K>(row(j), c);
                            acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr.add(c)), kv, acc);
                        }
                        *s.get_unchecked_mut(r * cols + j) = scale * _mm512_reduce_add_ps(acc);
                    }
                }
            }
        }

        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn weighted<const K: u8>(
            w: &[f32],
            cols: usize,
            v: Rows,
            d: usize,
            acc: &mut [f32],
        ) {
            let n = acc.len() / d;
            assert!(w.len() >= n * cols);
            // SAFETY (all of this function): rows `j < cols` of `v` and `r < n` of `acc`,
            // `d` values each, `c + 16 ≤ d`; `r·cols + j < w.len()`.
            unsafe {
                for r in 0..n {
                    for c in (0..d).step_by(16) {
                        let out = acc.as_mut_ptr().add(r * d + c);
                        let mut a = _mm512_loadu_ps(out);
                        for j in 0..cols {
                            let wj = _mm512_set1_ps(*w.get_unchecked(r * cols + j));
                            let vj = v.ptr.wrapping_offset(j as isize * v.stride);
                            a = _mm512_fmadd_ps(wj, load16::<K>(vj, c), a);
                        }
                        _mm512_storeu_ps(out, a);
                    }
                }
            }
        }
    }
}
