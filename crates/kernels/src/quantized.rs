//! `x Wᵀ` over a weight kept in llama.cpp's blocks (Q4_0, Q4_1, Q8_0 of 32 values; the
//! K-quants Q4_K and Q6_K of 256), never expanded to f32: the product a quantized model's
//! decode step is made of.
//!
//! Each row of `x` is first quantized per block of 32 as llama.cpp's x86 kernels do (Q8_0,
//! Q8_1): `d = max|x| / 127`, `q = round(x / d)` (half to even), with `d` and `s = d Σ q`
//! kept as f16, so that greedy text follows llama.cpp's as closely as the order of the sums
//! allows. A block's dot product is then one integer sum of 32 byte products and a scale:
//!
//! - Q8_0, `w = d_w q_w`:            `d_w d Σ q_w q`
//! - Q4_0, `w = d_w (q_w − 8)`:      `d_w d (Σ q_w q − 8 Σ q)`
//! - Q4_1, `w = d_w q_w + m_w`:      `d_w d Σ q_w q + m_w s`
//! - Q4_K, 8 sub-blocks of 32, `w = d_w sc_j q_w − d_min m_j` (6-bit `sc_j`, `m_j`):
//!   `d_w sc_j d Σ q_w q − d_min m_j d Σ q` per sub-block
//! - Q6_K, 16 sub-blocks of 16, `w = d_w sc_j (q_w − 32)` (8-bit signed `sc_j`): one byte
//!   sum per 16 values, `d_w sc_j d Σ (q_w − 32) q`
//!
//! The K-quants' activations are the same 32-value blocks (llama.cpp quantizes them per
//! 256, Q8_K, with an f32 scale): each of their sub-blocks meets one block of `x` or half
//! of one, and a finer scale rounds `x` less.
//!
//! The byte sums run on AVX-512 VNNI (`vpdpbusd`, unsigned × signed bytes into i32) where
//! the CPU has it, else on AVX2 (`vpmaddubsw` then `vpmaddwd`), else in plain Rust; the
//! choice is made once, at run time, so one binary runs everywhere. Rows of `W` are split
//! over the cores. candle 0.11 has AVX kernels for Q4_0, Q8_0 and the K-quants, but its
//! Q4_1 product (the format of the SmolLM2 file we ship a fetch script for) is scalar, and
//! the repacked layout of its Q8_0 and Q4_K kernels, fast on a weight in the cache, streams
//! from memory at half our speed (`cargo bench -p posenc-bench --bench quantized`).
//!
//! Quantizing `x` costs accuracy against the dequantized f32 product (about 0.5% of a
//! block's largest value, relative); it is what llama.cpp and candle do too, and what
//! makes the integer instructions usable. The f32 path (`Precision::F32`) never comes here.
//! Tests compare each kernel with dequantize-then-multiply and with a scalar computation
//! of the same formula, on random blocks and at edge sizes.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use half::f16;

use super::softmax::contiguous_f32;

/// Values per block.
pub const BLOCK: usize = 32;

/// The block formats with kernels here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `d: f16`, 16 bytes of 4-bit `q`; `w = d (q − 8)`.
    Q4_0,
    /// `d: f16`, `m: f16`, 16 bytes of 4-bit `q`; `w = d q + m`.
    Q4_1,
    /// `d: f16`, 32 signed bytes `q`; `w = d q`.
    Q8_0,
    /// Super-blocks of 256: `d, d_min: f16`, 12 bytes of eight 6-bit scales and mins, 128
    /// bytes of 4-bit `q`; `w = d sc_j q − d_min m_j` in sub-block `j` of 32.
    Q4K,
    /// Super-blocks of 256: 128 bytes of low 4 bits, 64 of high 2 bits, sixteen `i8`
    /// scales, `d: f16`; `w = d sc_j (q − 32)` in sub-block `j` of 16.
    Q6K,
}

impl Format {
    /// Every format with a kernel here.
    pub const ALL: [Self; 5] = [Self::Q4_0, Self::Q4_1, Self::Q8_0, Self::Q4K, Self::Q6K];

    /// The GGML dtype of this format.
    pub const fn dtype(self) -> GgmlDType {
        match self {
            Self::Q4_0 => GgmlDType::Q4_0,
            Self::Q4_1 => GgmlDType::Q4_1,
            Self::Q8_0 => GgmlDType::Q8_0,
            Self::Q4K => GgmlDType::Q4K,
            Self::Q6K => GgmlDType::Q6K,
        }
    }

    /// The format of a GGML dtype, if it has a kernel here.
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.dtype() == dtype)
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
            Self::Q4K => 144,
            Self::Q6K => 210,
        }
    }

    /// Values per block: 32, or 256 for the K-quants.
    pub const fn values(self) -> usize {
        match self {
            Self::Q4_0 | Self::Q4_1 | Self::Q8_0 => BLOCK,
            Self::Q4K | Self::Q6K => K_BLOCK,
        }
    }
}

/// Values per K-quant super-block.
pub const K_BLOCK: usize = 256;

/// Sub-block `j`'s scale and min of a Q4_K super-block, from its 12 packed bytes: six
/// bits each, the first four in the low bits of bytes `j` and `j + 4`, the last four split
/// between the low nibbles of bytes 8–11 and the top two bits of bytes 0–7 (llama.cpp's
/// `get_scale_min_k4`).
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All eight of a Q4_K super-block's scales and mins at once ([`scale_min_k4`] on four
/// 32-bit words, as llama.cpp's AVX kernels unpack them).
#[inline(always)]
fn scales_mins_k4(packed: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let word = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (a, b, c) = (word(0), word(1), word(2));
    let (six, low, top) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x0303_0303);
    let scales = [a & six, (c & low) | (((a >> 6) & top) << 4)];
    let mins = [b & six, ((c >> 4) & low) | (((b >> 6) & top) << 4)];
    let bytes = |w: [u32; 2]| {
        let [x, y] = w.map(u32::to_le_bytes);
        [x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3]]
    };
    (bytes(scales), bytes(mins))
}

/// The 32 unsigned values of a Q6_K super-block's group `g` (`0..8`, 32 values each, in
/// order), 6 bits each before the offset of 32 is taken off.
#[inline(always)]
fn q6k_group(blk: &[u8], g: usize) -> [u8; BLOCK] {
    let (n, g) = (g / 4, g % 4);
    let (ql, qh) = (&blk[64 * n..], &blk[128 + 32 * n..]);
    std::array::from_fn(|l| {
        let low = match g {
            0 => ql[l] & 0xf,
            1 => ql[l + 32] & 0xf,
            2 => ql[l] >> 4,
            _ => ql[l + 32] >> 4,
        };
        low | (((qh[l] >> (2 * g)) & 3) << 4)
    })
}

/// The instructions a kernel runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI on 256-bit vectors, with AVX2, FMA and F16C.
    Vnni,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// Plain Rust.
    Scalar,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn detected() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            if avx2 && has!("avx512f") && has!("avx512vl") && has!("avx512vnni") {
                return Self::Vnni;
            }
            if avx2 {
                return Self::Avx2;
            }
        }
        Self::Scalar
    }

    /// Every kernel this CPU runs, fastest first.
    pub fn available() -> Vec<Self> {
        let all = [Self::Vnni, Self::Avx2, Self::Scalar];
        let from = all.iter().position(|&k| k == Self::detected()).unwrap_or(2);
        all[from..].to_vec()
    }

    fn cached() -> Self {
        static KERNEL: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *KERNEL.get_or_init(Self::detected)
    }
}

/// Rows of activations quantized per block: scale `d`, `s = d Σ q` (both rounded to
/// f16, as llama.cpp stores them), `Σ q`, `d Σ q` over each half of the block (for Q6_K's
/// offset of 32, per sub-block of 16), and the bytes `q`.
#[derive(Debug, Clone, Default)]
struct QuantizedRows {
    d: Vec<f32>,
    s: Vec<f32>,
    sum: Vec<i32>,
    halves: Vec<f32>,
    q: Vec<i8>,
}

/// One quantized row as the kernels read it.
#[derive(Clone, Copy)]
struct Row<'a> {
    d: &'a [f32],
    s: &'a [f32],
    sum: &'a [i32],
    halves: &'a [f32],
    q: &'a [i8],
}

impl QuantizedRows {
    /// Quantizes `x`, rows of `k` values (`k` a multiple of [`BLOCK`]).
    fn new(x: &[f32], k: usize) -> Self {
        let mut rows = Self::default();
        rows.fill(x, k);
        rows
    }

    /// Quantizes `x` into these buffers, reusing their memory.
    fn fill(&mut self, x: &[f32], k: usize) {
        debug_assert!(k.is_multiple_of(BLOCK) && x.len().is_multiple_of(k.max(1)));
        let blocks = x.len() / BLOCK;
        self.d.resize(blocks, 0.0);
        self.s.resize(blocks, 0.0);
        self.sum.resize(blocks, 0);
        self.halves.resize(2 * blocks, 0.0);
        self.q.resize(x.len(), 0);
        let (d_out, s_out, sum_out) = (&mut self.d, &mut self.s, &mut self.sum);
        let halves = &mut self.halves;
        // Compiled for the CPU's vector instructions, where the rounding is one instruction.
        super::simd::vectorized(
            #[inline(always)]
            || {
                for (b, (x, q)) in x
                    .chunks_exact(BLOCK)
                    .zip(self.q.chunks_exact_mut(BLOCK))
                    .enumerate()
                {
                    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let d = amax / 127.0;
                    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
                    let mut half = [0i32; 2];
                    for (i, (q, &x)) in q.iter_mut().zip(x).enumerate() {
                        // Half to even, as llama.cpp's AVX kernels round (`_mm256_round_ps`).
                        *q = (x * inv).round_ties_even() as i8;
                        half[i / (BLOCK / 2)] += i32::from(*q);
                    }
                    let (d16, sum) = (f16::from_f32(d).to_f32(), half[0] + half[1]);
                    d_out[b] = d16;
                    s_out[b] = f16::from_f32(d * sum as f32).to_f32();
                    sum_out[b] = sum;
                    halves[2 * b] = d16 * half[0] as f32;
                    halves[2 * b + 1] = d16 * half[1] as f32;
                }
            },
        );
    }

    /// Row `i`, of `blocks` blocks.
    fn row(&self, i: usize, blocks: usize) -> Row<'_> {
        let b = i * blocks..(i + 1) * blocks;
        Row {
            d: &self.d[b.clone()],
            s: &self.s[b.clone()],
            sum: &self.sum[b],
            halves: &self.halves[2 * i * blocks..2 * (i + 1) * blocks],
            q: &self.q[i * blocks * BLOCK..(i + 1) * blocks * BLOCK],
        }
    }
}

/// The bytes of one row of `format` blocks that meets `x`, after checking that `w` holds
/// `rows` of them and that `x`'s parts hold its blocks (the kernels read unchecked).
fn row_bytes(format: Format, w: &[u8], x: Row, rows: usize) -> usize {
    let blocks = x.d.len();
    let row_bytes = blocks * BLOCK / format.values() * format.block_bytes();
    assert!(
        (blocks * BLOCK).is_multiple_of(format.values())
            && w.len() >= rows * row_bytes
            && x.s.len() == blocks
            && x.sum.len() == blocks
            && x.halves.len() == 2 * blocks
            && x.q.len() == blocks * BLOCK
    );
    row_bytes
}

/// Rows of activations the many-row kernels take at once.
const ROWS: usize = 4;

/// `y[r][i] = Σ_j W[r, j] x_i[j]` for each row `r` of `w` against [`ROWS`] quantized rows
/// of activations at once: each weight block unpacked once for all of them. `false` (and
/// `y` untouched) where `kernel` has no such loop for `format` (the scalar kernel, the
/// K-quants): the caller then takes the rows one at a time.
fn dot_rows_many(
    kernel: Kernel,
    format: Format,
    w: &[u8],
    x: &[Row; ROWS],
    y: &mut [[f32; ROWS]],
) -> bool {
    if kernel == Kernel::Scalar || format.values() != BLOCK {
        return false;
    }
    let bytes = x.map(|x| row_bytes(format, w, x, y.len()));
    assert!(bytes.iter().all(|&b| b == bytes[0]));
    for (r, y) in y.iter_mut().enumerate() {
        let w = &w[r * bytes[0]..(r + 1) * bytes[0]];
        let many = match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a kernel is only chosen on a CPU that has its instructions; the
            // lengths were checked above.
            Kernel::Vnni => unsafe { x86::vnni::dot_many(format, w, x) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Kernel::Avx2 => unsafe { x86::avx2::dot_many(format, w, x) },
            _ => None,
        };
        match many {
            Some(v) => *y = v,
            None => return false,
        }
    }
    true
}

/// `y[r] = Σ_j W[r, j] x[j]` for each row `r` of `w` (whole rows of `format` blocks, one
/// after another) against one quantized row of activations; `y.len()` rows.
fn dot_rows(kernel: Kernel, format: Format, w: &[u8], x: Row, y: &mut [f32]) {
    let row_bytes = row_bytes(format, w, x, y.len());
    for (r, y) in y.iter_mut().enumerate() {
        let w = &w[r * row_bytes..(r + 1) * row_bytes];
        *y = match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a kernel is only chosen, and only offered by `available`, on a CPU
            // that has its instructions; the lengths were checked above.
            Kernel::Vnni => unsafe { x86::vnni::dot(format, w, x) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Kernel::Avx2 => unsafe { x86::avx2::dot(format, w, x) },
            _ => dot_scalar(format, w, x),
        };
    }
}

/// `f16` at `bytes[at..at + 2]`, little-endian, as f32.
#[inline(always)]
fn half(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// One weight row against one activation row, in plain Rust.
fn dot_scalar(format: Format, w: &[u8], x: Row) -> f32 {
    if format.values() == K_BLOCK {
        return dot_scalar_k(format, w, x);
    }
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(format.block_bytes()).enumerate() {
        let q = &x.q[b * BLOCK..(b + 1) * BLOCK];
        let dw = half(blk, 0);
        let nibbles = |qs: &[u8]| -> i32 {
            (0..BLOCK / 2)
                .map(|j| {
                    let (lo, hi) = (i32::from(qs[j] & 15), i32::from(qs[j] >> 4));
                    lo * i32::from(q[j]) + hi * i32::from(q[j + BLOCK / 2])
                })
                .sum()
        };
        acc += match format {
            Format::Q4_0 => dw * x.d[b] * (nibbles(&blk[2..]) - 8 * x.sum[b]) as f32,
            Format::Q4_1 => dw * x.d[b] * nibbles(&blk[4..]) as f32 + half(blk, 2) * x.s[b],
            Format::Q8_0 => {
                let dot: i32 = blk[2..]
                    .iter()
                    .zip(q)
                    .map(|(&w, &q)| i32::from(w as i8) * i32::from(q))
                    .sum();
                dw * x.d[b] * dot as f32
            }
            Format::Q4K | Format::Q6K => unreachable!("the K-quants are summed above"),
        };
    }
    acc
}

/// [`dot_scalar`] of a K-quant row: per super-block, each of its eight blocks of `x`.
fn dot_scalar_k(format: Format, w: &[u8], x: Row) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(format.block_bytes()).enumerate() {
        for j in 0..K_BLOCK / BLOCK {
            let b = sb * K_BLOCK / BLOCK + j;
            let q = &x.q[b * BLOCK..(b + 1) * BLOCK];
            let sum = |w: &[i32], q: &[i8]| -> i32 {
                w.iter().zip(q).map(|(&w, &q)| w * i32::from(q)).sum()
            };
            acc += match format {
                Format::Q4K => {
                    let qs = &blk[16 + 32 * (j / 2)..][..BLOCK];
                    let shift = 4 * (j % 2);
                    let wq: Vec<i32> = qs.iter().map(|&v| i32::from((v >> shift) & 15)).collect();
                    let (sc, m) = scale_min_k4(j, &blk[4..16]);
                    half(blk, 0) * f32::from(sc) * x.d[b] * sum(&wq, q) as f32
                        - half(blk, 2) * f32::from(m) * x.d[b] * x.sum[b] as f32
                }
                _ => {
                    let wq: Vec<i32> = q6k_group(blk, j)
                        .iter()
                        .map(|&v| i32::from(v) - 32)
                        .collect();
                    let sc = |h: usize| f32::from(blk[192 + 2 * j + h] as i8);
                    let d = half(blk, 208) * x.d[b];
                    let (lo, hi) = (sum(&wq[..16], &q[..16]), sum(&wq[16..], &q[16..]));
                    d * (sc(0) * lo as f32 + sc(1) * hi as f32)
                }
            };
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `f16` bits at `p` as f32.
    #[inline(always)]
    unsafe fn half(p: *const u8) -> f32 {
        // SAFETY (all of this module): the callers pass pointers inside a whole block, and
        // run with the instructions enabled.
        unsafe {
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
                (p as *const u16).read_unaligned(),
            ))))
        }
    }

    /// 16 bytes of nibbles as 32 unsigned bytes: the low nibbles (values 0–15) in the
    /// lower half, the high ones (16–31) in the upper.
    #[inline(always)]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        unsafe {
            let b = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
            let b = _mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4));
            _mm256_and_si256(b, _mm256_set1_epi8(0x0f))
        }
    }

    /// Format tags for the block loop's const parameter.
    const Q4_0: u8 = 0;
    const Q4_1: u8 = 1;
    const Q8_0: u8 = 2;

    /// The block loop, generic over the unsigned × signed byte sum `$dot(u, s) -> 8 × i32`
    /// and, through `F`, over the format, so that each format's loop is compiled on its
    /// own. Two blocks per iteration into two sets of accumulators, so that the chains of
    /// dependent additions are half as long.
    macro_rules! dot {
        ($name:ident, $features:literal, $dot:expr) => {
            pub(super) mod $name {
                use super::super::{scales_mins_k4, Format, Row, BLOCK, K_BLOCK, ROWS};
                use super::{half, nibbles, Q4_0, Q4_1, Q8_0};
                use std::arch::x86_64::*;

                /// Bytes per block of format `F`.
                const fn bytes<const F: u8>() -> usize {
                    [18, 20, 34][F as usize]
                }

                /// Block `b`'s 8 partial integer sums, as f32.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn sums<const F: u8>(w: &[u8], x: Row, b: usize) -> __m256 {
                    // SAFETY: block `b` of `w` and of `x.q` are in bounds (the caller
                    // checked the lengths).
                    unsafe {
                        let blk = w.as_ptr().add(b * bytes::<F>());
                        let q = _mm256_loadu_si256(x.q.as_ptr().add(b * BLOCK) as *const __m256i);
                        let sum = match F {
                            Q4_0 => $dot(nibbles(blk.add(2)), q),
                            Q4_1 => $dot(nibbles(blk.add(4)), q),
                            _ => signed(_mm256_loadu_si256(blk.add(2) as *const __m256i), q),
                        };
                        _mm256_cvtepi32_ps(sum)
                    }
                }

                /// Block `b`: its scale, its sums, and the term outside the sum
                /// (`− 8 d_w d Σ q` for Q4_0, `m_w s` for Q4_1).
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn block<const F: u8>(w: &[u8], x: Row, b: usize) -> (__m256, __m256, f32) {
                    // SAFETY: as `sums`.
                    unsafe {
                        let blk = w.as_ptr().add(b * bytes::<F>());
                        let scale = half(blk) * x.d[b];
                        let rest = match F {
                            Q4_0 => -8.0 * scale * x.sum[b] as f32,
                            Q4_1 => half(blk.add(2)) * x.s[b],
                            _ => 0.0,
                        };
                        (_mm256_set1_ps(scale), sums::<F>(w, x, b), rest)
                    }
                }

                /// The f16 values in the low (`HIGH` false) or high 16 bits of 8 lanes, as f32.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn halves<const HIGH: bool>(lanes: __m256i) -> __m256 {
                    let h = match HIGH {
                        true => _mm256_srli_epi32(lanes, 16),
                        false => _mm256_and_si256(lanes, _mm256_set1_epi32(0xffff)),
                    };
                    // Per 128-bit lane [h0 h1 h2 h3 h0 h1 h2 h3] as u16; then the two lanes'
                    // first halves side by side.
                    let p = _mm256_packus_epi32(h, h);
                    let p = _mm256_permute4x64_epi64(p, 0b1000);
                    _mm256_cvtph_ps(_mm256_castsi256_si128(p))
                }

                /// Blocks `b..b + 8`: their scales (and Q4_0's and Q4_1's outside terms)
                /// eight at a time, from one gather of the four bytes at each block's start.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn eight<const F: u8>(
                    w: &[u8],
                    x: Row,
                    b: usize,
                    acc: &mut [__m256; 2],
                    rest: &mut __m256,
                ) {
                    // SAFETY: blocks `b..b + 8` are in bounds (the caller checked), and the
                    // gather reads the first 4 bytes of each.
                    unsafe {
                        let stride = _mm256_set1_epi32(bytes::<F>() as i32);
                        let at =
                            _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), stride);
                        let base = w.as_ptr().add(b * bytes::<F>()) as *const i32;
                        let lanes = _mm256_i32gather_epi32::<1>(base, at);
                        let scales = _mm256_mul_ps(
                            halves::<false>(lanes),
                            _mm256_loadu_ps(x.d.as_ptr().add(b)),
                        );
                        match F {
                            Q4_0 => {
                                let sum =
                                    _mm256_loadu_si256(x.sum.as_ptr().add(b) as *const __m256i);
                                let eight = _mm256_mul_ps(_mm256_set1_ps(8.0), scales);
                                *rest = _mm256_fnmadd_ps(eight, _mm256_cvtepi32_ps(sum), *rest);
                            }
                            Q4_1 => {
                                let s = _mm256_loadu_ps(x.s.as_ptr().add(b));
                                *rest = _mm256_fmadd_ps(halves::<true>(lanes), s, *rest);
                            }
                            _ => {}
                        }
                        for j in 0..8 {
                            let scale =
                                _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(j as i32));
                            acc[j % 2] = _mm256_fmadd_ps(scale, sums::<F>(w, x, b + j), acc[j % 2]);
                        }
                    }
                }

                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn blocks<const F: u8>(w: &[u8], x: Row) -> f32 {
                    let n = x.d.len();
                    let mut acc = [_mm256_setzero_ps(); 2];
                    let mut rest8 = _mm256_setzero_ps();
                    let mut rest = 0f32;
                    let mut b = 0;
                    // SAFETY: blocks below `n` (the caller checked the lengths).
                    unsafe {
                        while b + 8 <= n {
                            eight::<F>(w, x, b, &mut acc, &mut rest8);
                            b += 8;
                        }
                        while b < n {
                            let (s0, v0, r0) = block::<F>(w, x, b);
                            acc[0] = _mm256_fmadd_ps(s0, v0, acc[0]);
                            rest += r0;
                            b += 1;
                        }
                    }
                    total([_mm256_add_ps(acc[0], rest8), acc[1]], rest)
                }

                /// [`ROWS`] rows of activations against one weight row, each as [`blocks`]
                /// computes it: the weight's bytes are unpacked, and its scales read, once
                /// for all of them.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn blocks_rows<const F: u8>(w: &[u8], x: &[Row; ROWS]) -> [f32; ROWS] {
                    let n = x[0].d.len();
                    let zero = _mm256_setzero_ps();
                    let (mut acc, mut rest8, mut rest) = ([zero; ROWS], [zero; ROWS], [0f32; ROWS]);
                    let stride = _mm256_set1_epi32(bytes::<F>() as i32);
                    let at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), stride);
                    let mut b = 0;
                    // SAFETY: blocks below `n` of `w` and of every row (the caller checked
                    // the lengths); the gather reads the first 4 bytes of blocks `b..b + 8`.
                    unsafe {
                        while b + 8 <= n {
                            let base = w.as_ptr().add(b * bytes::<F>()) as *const i32;
                            let lanes = _mm256_i32gather_epi32::<1>(base, at);
                            let wd = halves::<false>(lanes);
                            let wm = halves::<true>(lanes);
                            let mut scales = [zero; ROWS];
                            for (r, x) in x.iter().enumerate() {
                                scales[r] = _mm256_mul_ps(wd, _mm256_loadu_ps(x.d.as_ptr().add(b)));
                                match F {
                                    Q4_0 => {
                                        let sum = _mm256_loadu_si256(
                                            x.sum.as_ptr().add(b) as *const __m256i
                                        );
                                        let eight = _mm256_mul_ps(_mm256_set1_ps(8.0), scales[r]);
                                        rest8[r] = _mm256_fnmadd_ps(
                                            eight,
                                            _mm256_cvtepi32_ps(sum),
                                            rest8[r],
                                        );
                                    }
                                    Q4_1 => {
                                        let s = _mm256_loadu_ps(x.s.as_ptr().add(b));
                                        rest8[r] = _mm256_fmadd_ps(wm, s, rest8[r]);
                                    }
                                    _ => {}
                                }
                            }
                            for j in 0..8 {
                                let blk = w.as_ptr().add((b + j) * bytes::<F>());
                                let wq = match F {
                                    Q4_0 => nibbles(blk.add(2)),
                                    Q4_1 => nibbles(blk.add(4)),
                                    _ => _mm256_loadu_si256(blk.add(2) as *const __m256i),
                                };
                                for (r, x) in x.iter().enumerate() {
                                    let q = _mm256_loadu_si256(
                                        x.q.as_ptr().add((b + j) * BLOCK) as *const __m256i
                                    );
                                    let sum = match F {
                                        Q8_0 => signed(wq, q),
                                        _ => $dot(wq, q),
                                    };
                                    acc[r] = _mm256_fmadd_ps(
                                        lane(scales[r], j as i32),
                                        _mm256_cvtepi32_ps(sum),
                                        acc[r],
                                    );
                                }
                            }
                            b += 8;
                        }
                        while b < n {
                            for (r, x) in x.iter().enumerate() {
                                let (s0, v0, r0) = block::<F>(w, *x, b);
                                acc[r] = _mm256_fmadd_ps(s0, v0, acc[r]);
                                rest[r] += r0;
                            }
                            b += 1;
                        }
                    }
                    std::array::from_fn(|r| total([acc[r], rest8[r]], rest[r]))
                }

                /// The 8 lanes of `acc` and `rest` summed.
                #[target_feature(enable = $features)]
                #[inline]
                fn total(acc: [__m256; 2], rest: f32) -> f32 {
                    let all = _mm256_add_ps(acc[0], acc[1]);
                    let h = _mm_add_ps(_mm256_castps256_ps128(all), _mm256_extractf128_ps(all, 1));
                    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                    let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                    _mm_cvtss_f32(h) + rest
                }

                /// Signed bytes `w` times signed bytes `q`, as |w| × (q with w's sign).
                #[target_feature(enable = $features)]
                #[inline]
                fn signed(w: __m256i, q: __m256i) -> __m256i {
                    $dot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w))
                }

                /// Eight `u8` (or, `SIGNED`, `i8`) at `p` as f32.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn widen8<const SIGNED: bool>(p: *const u8) -> __m256 {
                    // SAFETY: the caller's 8 bytes.
                    let b = unsafe { _mm_loadl_epi64(p as *const __m128i) };
                    _mm256_cvtepi32_ps(match SIGNED {
                        true => _mm256_cvtepi8_epi32(b),
                        false => _mm256_cvtepu8_epi32(b),
                    })
                }

                /// Lane `j` of `v` in every lane.
                #[target_feature(enable = $features)]
                #[inline]
                fn lane(v: __m256, j: i32) -> __m256 {
                    _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j))
                }

                /// A row of Q4_K super-blocks. Per super-block, its eight sub-blocks' scales
                /// `d sc_j d_x` as one vector, and the mins' term `d_min m_j d_x Σ q` for all
                /// eight at once; then per pair of sub-blocks, 32 bytes of nibbles (the low
                /// ones are sub-block `2c`, the high ones `2c + 1`) and two byte sums.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn q4k(w: &[u8], x: Row) -> f32 {
                    let mut acc = [_mm256_setzero_ps(); 4];
                    let mut mins = _mm256_setzero_ps();
                    let low = _mm256_set1_epi8(0x0f);
                    for (sb, blk) in w.chunks_exact(144).take(x.d.len() / 8).enumerate() {
                        let (sc, m) = scales_mins_k4(blk[4..16].try_into().expect("12 bytes"));
                        // SAFETY: a whole super-block, and its 8 blocks of `x` (the caller
                        // checked the lengths).
                        unsafe {
                            let p = blk.as_ptr();
                            let xd = _mm256_loadu_ps(x.d.as_ptr().add(8 * sb));
                            let xs = _mm256_cvtepi32_ps(_mm256_loadu_si256(
                                x.sum.as_ptr().add(8 * sb) as *const __m256i,
                            ));
                            let scales = _mm256_mul_ps(
                                _mm256_mul_ps(
                                    _mm256_set1_ps(half(p)),
                                    widen8::<false>(sc.as_ptr()),
                                ),
                                xd,
                            );
                            let dmin = _mm256_mul_ps(
                                _mm256_set1_ps(half(p.add(2))),
                                widen8::<false>(m.as_ptr()),
                            );
                            mins = _mm256_fmadd_ps(dmin, _mm256_mul_ps(xd, xs), mins);
                            let q = x.q.as_ptr().add(8 * sb * BLOCK);
                            for c in 0..4 {
                                let raw = _mm256_loadu_si256(p.add(16 + 32 * c) as *const __m256i);
                                let q0 = _mm256_loadu_si256(q.add(2 * c * BLOCK) as *const __m256i);
                                let q1 = _mm256_loadu_si256(
                                    q.add((2 * c + 1) * BLOCK) as *const __m256i
                                );
                                let (lo, hi) = (
                                    _mm256_and_si256(raw, low),
                                    _mm256_and_si256(_mm256_srli_epi16(raw, 4), low),
                                );
                                let j = 2 * c as i32;
                                let a = &mut acc[2 * (c % 2)..];
                                a[0] = _mm256_fmadd_ps(
                                    lane(scales, j),
                                    _mm256_cvtepi32_ps($dot(lo, q0)),
                                    a[0],
                                );
                                a[1] = _mm256_fmadd_ps(
                                    lane(scales, j + 1),
                                    _mm256_cvtepi32_ps($dot(hi, q1)),
                                    a[1],
                                );
                            }
                        }
                    }
                    let acc = [_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3])];
                    total([_mm256_sub_ps(acc[0], mins), acc[1]], 0.0)
                }

                /// A row of Q6_K super-blocks: per half (128 values), 64 bytes of low bits
                /// and 32 of high bits make four groups of 32 six-bit values `u`; each group
                /// meets one block of `x` in one unsigned × signed byte sum, whose lanes 0–3
                /// (the first 16 values) and 4–7 (the last 16) take their own scales. The
                /// offset, `w = d sc (u − 32)`, is taken off once per super-block:
                /// `32 d Σ_j sc_j (d_x Σ q)_j` over its 16 sub-blocks.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn q6k(w: &[u8], x: Row) -> f32 {
                    let mut acc = [_mm256_setzero_ps(); 2];
                    let (low, two, three) = (
                        _mm256_set1_epi8(0x0f),
                        _mm256_set1_epi8(0x30),
                        _mm256_set1_epi8(3),
                    );
                    for (sb, blk) in w.chunks_exact(210).take(x.d.len() / 8).enumerate() {
                        // SAFETY: as `q4k`.
                        unsafe {
                            let p = blk.as_ptr();
                            let d = _mm256_set1_ps(half(p.add(208)));
                            // No closures here: they would not be compiled for these
                            // instructions.
                            let mut offsets = _mm256_setzero_ps();
                            for i in 0..2 {
                                let sums = _mm256_loadu_ps(x.halves.as_ptr().add(16 * sb + 8 * i));
                                offsets = _mm256_fmadd_ps(
                                    widen8::<true>(p.add(192 + 8 * i)),
                                    sums,
                                    offsets,
                                );
                            }
                            let d32 = _mm256_mul_ps(d, _mm256_set1_ps(32.0));
                            acc[1] = _mm256_fnmadd_ps(d32, offsets, acc[1]);
                            for n in 0..2 {
                                let scales = _mm256_mul_ps(d, widen8::<true>(p.add(192 + 8 * n)));
                                let ql0 = _mm256_loadu_si256(p.add(64 * n) as *const __m256i);
                                let ql1 = _mm256_loadu_si256(p.add(64 * n + 32) as *const __m256i);
                                let qh = _mm256_loadu_si256(p.add(128 + 32 * n) as *const __m256i);
                                // Each group's scales from memory (broadcast loads): with
                                // 16 vector registers on AVX2, nothing held across groups
                                // but the accumulators and the three loads.
                                let mut sf = [0f32; 8];
                                _mm256_storeu_ps(sf.as_mut_ptr(), scales);
                                for g in 0..4 {
                                    let u = match g {
                                        0 => _mm256_or_si256(
                                            _mm256_and_si256(ql0, low),
                                            _mm256_slli_epi16(_mm256_and_si256(qh, three), 4),
                                        ),
                                        1 => _mm256_or_si256(
                                            _mm256_and_si256(ql1, low),
                                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), two),
                                        ),
                                        2 => _mm256_or_si256(
                                            _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low),
                                            _mm256_and_si256(qh, two),
                                        ),
                                        _ => _mm256_or_si256(
                                            _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low),
                                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), two),
                                        ),
                                    };
                                    let b = 8 * sb + 4 * n + g;
                                    let q = _mm256_loadu_si256(
                                        x.q.as_ptr().add(b * BLOCK) as *const __m256i
                                    );
                                    let xd = *x.d.get_unchecked(b);
                                    let scale = _mm256_set_m128(
                                        _mm_set1_ps(sf[2 * g + 1] * xd),
                                        _mm_set1_ps(sf[2 * g] * xd),
                                    );
                                    acc[g % 2] = _mm256_fmadd_ps(
                                        scale,
                                        _mm256_cvtepi32_ps($dot(u, q)),
                                        acc[g % 2],
                                    );
                                }
                            }
                        }
                    }
                    total(acc, 0.0)
                }

                /// One weight row against [`ROWS`] quantized rows of activations, for the
                /// formats of 32-value blocks; `None` for the K-quants.
                #[target_feature(enable = $features)]
                pub(in super::super) unsafe fn dot_many(
                    format: Format,
                    w: &[u8],
                    x: &[Row; ROWS],
                ) -> Option<[f32; ROWS]> {
                    // SAFETY: the caller's promise, passed on.
                    unsafe {
                        match format {
                            Format::Q4_0 => Some(blocks_rows::<Q4_0>(w, x)),
                            Format::Q4_1 => Some(blocks_rows::<Q4_1>(w, x)),
                            Format::Q8_0 => Some(blocks_rows::<Q8_0>(w, x)),
                            Format::Q4K | Format::Q6K => None,
                        }
                    }
                }

                /// One weight row against one quantized row of activations.
                #[target_feature(enable = $features)]
                pub(in super::super) unsafe fn dot(format: Format, w: &[u8], x: Row) -> f32 {
                    debug_assert!(
                        format.values() == BLOCK || (x.d.len() * BLOCK).is_multiple_of(K_BLOCK)
                    );
                    // SAFETY: the caller's promise, passed on.
                    unsafe {
                        match format {
                            Format::Q4_0 => blocks::<Q4_0>(w, x),
                            Format::Q4_1 => blocks::<Q4_1>(w, x),
                            Format::Q8_0 => blocks::<Q8_0>(w, x),
                            Format::Q4K => q4k(w, x),
                            Format::Q6K => q6k(w, x),
                        }
                    }
                }
            }
        };
    }

    dot!(avx2, "avx2,fma,f16c", |u, s| _mm256_madd_epi16(
        _mm256_maddubs_epi16(u, s),
        _mm256_set1_epi16(1)
    ));
    dot!(vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni", |u, s| {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
    });
}

/// `x [W₁ W₂ …]ᵀ` with each `Wᵢ (nᵢ, k)` in its format's blocks: `x (m, k)` f32,
/// contiguous, quantized once for all of them; one parallel region over all their rows.
struct QMatMul {
    weights: Vec<(Arc<QTensor>, Format)>,
    kernel: Kernel,
}

/// Rows of `W` per parallel task, at least.
const MIN_ROWS_PER_TASK: usize = 16;

impl CustomOp1 for QMatMul {
    fn name(&self) -> &'static str {
        "quantized-matmul"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let x = contiguous_f32(s, l, self.name())?;
        let (m, k) = l.shape().dims2()?;
        let mut parts = Vec::with_capacity(self.weights.len());
        for (w, format) in &self.weights {
            let (n, wk) = w.shape().dims2()?;
            if k != wk || !k.is_multiple_of(format.values()) {
                candle_core::bail!(
                    "quantized matmul: x has {k} columns, the {format:?} weight ({n}, {wk}) in blocks of {}",
                    format.values()
                )
            }
            parts.push((w.data()?, *format, n));
        }
        let total: usize = parts.iter().map(|p| p.2).sum();
        let xq = QuantizedRows::new(x, k);
        let blocks = k / BLOCK;
        let tasks = 2 * rayon::current_num_threads();
        let rows = total.div_ceil(tasks).max(MIN_ROWS_PER_TASK);
        // Output columns (rows of the Wᵢ, one after another) in chunks of `rows`, each with
        // every row of x; a chunk never spans two weights.
        let mut yt = vec![0f32; total * m];
        let mut chunks = Vec::new();
        let mut rest = yt.as_mut_slice();
        for (data, format, n) in &parts {
            let row_bytes = k / format.values() * format.block_bytes();
            for r0 in (0..*n).step_by(rows) {
                let len = rows.min(n - r0);
                let (chunk, tail) = rest.split_at_mut(len * m);
                rest = tail;
                chunks.push((
                    &data[r0 * row_bytes..(r0 + len) * row_bytes],
                    *format,
                    chunk,
                ));
            }
        }
        chunks.into_par_iter().for_each(|(w, format, yt)| {
            if m == 1 {
                dot_rows(self.kernel, format, w, xq.row(0, blocks), yt);
                return;
            }
            let n = yt.len() / m;
            let mut i = 0;
            let mut cols = vec![[0f32; ROWS]; n];
            while i + ROWS <= m {
                let x = std::array::from_fn(|t| xq.row(i + t, blocks));
                if !dot_rows_many(self.kernel, format, w, &x, &mut cols) {
                    break;
                }
                for (j, v) in cols.iter().enumerate() {
                    yt[j * m + i..j * m + i + ROWS].copy_from_slice(v);
                }
                i += ROWS;
            }
            let mut col = vec![0f32; n];
            for i in i..m {
                dot_rows(self.kernel, format, w, xq.row(i, blocks), &mut col);
                for (j, &v) in col.iter().enumerate() {
                    yt[j * m + i] = v;
                }
            }
        });
        let y = if m == 1 {
            yt
        } else {
            let mut y = vec![0f32; m * total];
            for (r, col) in yt.chunks_exact(m).enumerate() {
                for (i, &v) in col.iter().enumerate() {
                    y[i * total + r] = v;
                }
            }
            y
        };
        Ok((CpuStorage::F32(y), Shape::from((m, total))))
    }
}

/// `x Wᵀ` for `x (m, k)` on the CPU in f32 and `W (n, k)` in a [`Format`] with a kernel
/// here, on this CPU's fastest [`Kernel`]; `None` for anything else (another format,
/// device or dtype), which the caller multiplies another way.
///
/// # Shapes
/// - `x`: `(m, k)`, `k` a multiple of 32
/// - output: `(m, n)`
///
/// # Errors
/// `x` whose width is not `k`.
pub fn quantized_matmul(x: &Tensor, weight: &Arc<QTensor>) -> Result<Option<Tensor>> {
    quantized_matmul_on(Kernel::cached(), x, std::slice::from_ref(weight))
}

/// `x Wᵢᵀ` for several weights at once, `x` quantized once and all their rows in one
/// parallel region (a layer's query, key and value projections): the products side by
/// side, `(m, n₁ + n₂ + …)`, on this CPU's fastest [`Kernel`]; `None` unless every weight
/// has a kernel here (as [`quantized_matmul`]).
///
/// # Errors
/// `x` whose width is not every weight's `k`.
pub fn quantized_matmul_fused(x: &Tensor, weights: &[Arc<QTensor>]) -> Result<Option<Tensor>> {
    quantized_matmul_on(Kernel::cached(), x, weights)
}

/// [`quantized_matmul_fused`] on a given kernel (one of [`Kernel::available`]), for tests
/// and benchmarks.
///
/// # Errors
/// As [`quantized_matmul`]; a kernel this CPU does not run.
pub fn quantized_matmul_on(
    kernel: Kernel,
    x: &Tensor,
    weights: &[Arc<QTensor>],
) -> Result<Option<Tensor>> {
    let formats: Option<Vec<Format>> = weights.iter().map(|w| Format::of(w.dtype())).collect();
    let Some(formats) = formats else {
        return Ok(None);
    };
    if weights.is_empty()
        || !x.device().is_cpu()
        || x.dtype() != candle_core::DType::F32
        || weights.iter().any(|w| !w.device().is_cpu())
        || x.rank() != 2
    {
        return Ok(None);
    }
    if !Kernel::available().contains(&kernel) {
        candle_core::bail!("this CPU does not run the {kernel:?} kernel")
    }
    let op = QMatMul {
        weights: weights.iter().cloned().zip(formats).collect(),
        kernel,
    };
    x.contiguous()?.apply_op1_no_bwd(&op).map(Some)
}

/// One row of blocks of 32 (Q8_0, Q4_0, Q4_1) as its `out.len()` values, in f32.
///
/// The callers pass only those formats (a K-quant is a bug here); a row shorter than `out`
/// leaves the rest of `out` as it was.
#[inline(always)]
pub(crate) fn dequantize_row(format: Format, row: &[u8], out: &mut [f32]) {
    let blocks = row.chunks_exact(format.block_bytes());
    for (blk, out) in blocks.zip(out.chunks_exact_mut(BLOCK)) {
        let dw = half(blk, 0);
        match format {
            Format::Q8_0 => {
                (out.iter_mut().zip(&blk[2..])).for_each(|(o, &q)| *o = dw * f32::from(q as i8))
            }
            Format::Q4K | Format::Q6K => unreachable!("blocks of 32 only"),
            Format::Q4_0 | Format::Q4_1 => {
                let (qs, m) = match format {
                    Format::Q4_0 => (&blk[2..], -8.0 * dw),
                    _ => (&blk[4..], half(blk, 2)),
                };
                let (low, high) = out.split_at_mut(BLOCK / 2);
                for ((lo, hi), &q) in low.iter_mut().zip(high).zip(qs) {
                    *lo = dw * f32::from(q & 15) + m;
                    *hi = dw * f32::from(q >> 4) + m;
                }
            }
        }
    }
}

/// Rows `ids` of a quantized table `(vocab, d)` as f32 `(ids.len(), d)`: only those rows
/// are expanded (a token embedding looked up without holding the whole table in f32).
///
/// # Errors
/// An id outside the table, naming it; a table that is not a matrix.
pub fn dequantize_rows(table: &QTensor, ids: &[u32]) -> Result<Tensor> {
    let (vocab, d) = table.shape().dims2()?;
    if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
        candle_core::bail!("token id {id} is outside the table of {vocab} rows")
    }
    let device = table.device();
    let format = Format::of(table.dtype())
        .filter(|f| f.values() == BLOCK && device.is_cpu() && d % BLOCK == 0);
    let Some(format) = format else {
        // Other formats (the K-quants among them): candle's dequantization of the whole
        // table, then the rows.
        let ids = Tensor::new(ids, &device)?;
        return table.dequantize(&device)?.index_select(&ids, 0);
    };
    let data = table.data()?;
    let row_bytes = d / BLOCK * format.block_bytes();
    let mut out = vec![0f32; ids.len() * d];
    for (&id, out) in ids.iter().zip(out.chunks_exact_mut(d)) {
        let row = &data[id as usize * row_bytes..(id as usize + 1) * row_bytes];
        dequantize_row(format, row, out);
    }
    Tensor::from_vec(out, (ids.len(), d), &device)
}
