//! Keys and values kept as llama.cpp keeps a quantized cache (`-ctk`/`-ctv q8_0|q4_0`):
//! each row of `width` values (one head's key or value at one position) as `width / 32`
//! blocks of 32, a block an f16 scale `d` and its values' codes:
//!
//! - Q8_0, 34 bytes: `d = max|x| / 127`, `q = round(x / d)`, `x ≈ d q`;
//! - Q4_0, 18 bytes: `d = −m / 8` (`m` the value of largest magnitude, sign kept),
//!   `q = min(15, ⌊x / d + 8.5⌋)`, `x ≈ d (q − 8)`, values `0..16` in the low nibbles and
//!   `16..32` in the high ones.
//!
//! Rows are quantized by candle's own `QTensor::quantize` (ggml's reference rounding) and
//! kept as a `u8` tensor `(…, width / 32 · block bytes)`, so that a cache's buffers are
//! written, narrowed and moved as any other tensor. [`crate::flash_attention()`] reads
//! them in place, widening a tile of rows to f32 as it reads it; everything else reads
//! them through [`Kept::dense`].
//!
//! A row may also be turned before it is rounded, as llama.cpp turns a quantized cache's
//! (its `attn_rot_k`/`attn_rot_v`, on unless `LLAMA_ATTN_ROT_DISABLE` is set): [`turn`]
//! multiplies it, block by block, by the orthonormal Walsh–Hadamard matrix [`hadamard`],
//! which spreads a channel of outlying magnitude over all of the block, so that one scale
//! no longer has to cover it. The matrix is symmetric and its own inverse: a turned key is
//! read by a query turned the same way (their dot product is unchanged), and a weighted sum
//! of turned values is turned back once.

use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Result, Tensor};
use rayon::prelude::*;

use crate::quantized::{dequantize_row, Format, BLOCK};

/// Keys or values as a cache keeps them: a tensor of values, or rows of blocks.
#[derive(Debug, Clone)]
pub enum Kept {
    /// Values as they are (f32 or f16 for [`crate::flash_attention()`]).
    Dense(Tensor),
    /// `u8 (…, row bytes)`: each row `width / 32` blocks of `format` ([`quantize`]).
    Blocks {
        /// The blocks' bytes, a row of blocks per row of values.
        rows: Tensor,
        /// Q8_0 or Q4_0.
        format: Format,
        /// The order of the Walsh–Hadamard matrix each row was turned by, block by block,
        /// before it was rounded ([`turn`]); `None`: kept as it came.
        turned: Option<usize>,
    },
}

impl From<&Tensor> for Kept {
    fn from(t: &Tensor) -> Self {
        Self::Dense(t.clone())
    }
}

impl From<Tensor> for Kept {
    fn from(t: Tensor) -> Self {
        Self::Dense(t)
    }
}

impl Kept {
    /// The shape of the values: a dense tensor's own, or the blocks' with their last
    /// dimension counted in values.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Self::Dense(t) => t.dims().to_vec(),
            Self::Blocks { rows, format, .. } => {
                let mut dims = rows.dims().to_vec();
                if let Some(last) = dims.last_mut() {
                    *last = *last / format.block_bytes() * BLOCK;
                }
                dims
            }
        }
    }

    /// The values as a tensor: a dense one as it is, blocks expanded to f32 ([`dequantize`])
    /// and turned back if they were turned ([`turn`]).
    ///
    /// # Errors
    /// As [`dequantize`] and [`turn`].
    pub fn dense(&self) -> Result<Tensor> {
        match self {
            Self::Dense(t) => Ok(t.clone()),
            Self::Blocks {
                rows,
                format,
                turned,
            } => {
                let values = dequantize(rows, *format)?;
                match turned {
                    Some(n) => turn(&values, *n),
                    None => Ok(values),
                }
            }
        }
    }

    /// The order of the Walsh–Hadamard matrix the rows were turned by, if they were.
    pub fn turned(&self) -> Option<usize> {
        match self {
            Self::Blocks { turned, .. } => *turned,
            Self::Dense(_) => None,
        }
    }

    /// The tensor kept: the values, or the blocks' bytes.
    pub fn tensor(&self) -> &Tensor {
        match self {
            Self::Dense(t) | Self::Blocks { rows: t, .. } => t,
        }
    }
}

/// Bytes per row of `width` values kept as `format`: `None` for a format a cache does not
/// keep (only Q8_0 and Q4_0 do) or a width that is not a whole number of blocks.
///
/// ```
/// use posenc_kernels::kv_blocks::row_bytes;
/// use posenc_kernels::quantized::Format;
/// assert_eq!(row_bytes(Format::Q8_0, 64), Some(68));
/// assert_eq!(row_bytes(Format::Q4_0, 64), Some(36));
/// assert_eq!(row_bytes(Format::Q8_0, 48), None);
/// assert_eq!(row_bytes(Format::Q4K, 256), None);
/// ```
pub fn row_bytes(format: Format, width: usize) -> Option<usize> {
    let cached = matches!(format, Format::Q8_0 | Format::Q4_0);
    (cached && width > 0 && width.is_multiple_of(BLOCK))
        .then(|| width / BLOCK * format.block_bytes())
}

/// `x (…, width)` as rows of `format` blocks, `u8 (…, width / 32 · block bytes)`, on
/// `x`'s device.
///
/// # Shapes
/// - `x`: `(…, width)`, `width` a multiple of 32
/// - output: `(…, row_bytes(format, width))`
///
/// # Errors
/// A format other than Q8_0 or Q4_0, or a width that is not a whole number of blocks.
pub fn quantize(x: &Tensor, format: Format) -> Result<Tensor> {
    let dims = x.dims();
    let width = dims.last().copied().unwrap_or(0);
    let Some(bytes) = row_bytes(format, width) else {
        candle_core::bail!(
            "a key/value cache keeps rows of whole blocks of {BLOCK} as q8_0 or q4_0: rows of {width} values cannot be kept as {format:?}"
        )
    };
    let rows = x.elem_count() / width;
    // A fresh buffer: candle's quantization reads its source's storage from the start,
    // whatever view of it the tensor is (a decode step's values are a view into the
    // fused projection's output, after the queries and keys).
    let values = x
        .to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let flat = Tensor::from_vec(values, (rows, width), &Device::Cpu)?;
    let blocks = QTensor::quantize(&flat, format.dtype())?;
    let mut shape = dims.to_vec();
    if let Some(last) = shape.last_mut() {
        *last = bytes;
    }
    Tensor::from_vec(blocks.data()?.into_owned(), shape, &Device::Cpu)?.to_device(x.device())
}

/// The orthonormal Walsh–Hadamard matrix of order `n` (a power of two), f32 `(n, n)`: Sylvester's
/// construction `H₂ₙ = [[Hₙ, Hₙ], [Hₙ, −Hₙ]] / √2` from `H₁ = 1`, llama.cpp's
/// `ggml_gen_hadamard`. Symmetric, and its own inverse.
///
/// ```
/// use posenc_kernels::kv_blocks::hadamard;
/// let h = hadamard(4).unwrap().to_vec2::<f32>().unwrap();
/// assert_eq!(h[1], [0.5, -0.5, 0.5, -0.5]);
/// assert_eq!(h[3], [0.5, -0.5, -0.5, 0.5]);
/// assert!(hadamard(48).is_err());
/// ```
///
/// # Errors
/// An order that is not a power of two, or past 4 096.
pub fn hadamard(n: usize) -> Result<Tensor> {
    check_order(n)?;
    let mut h = vec![0f32; n * n];
    h[0] = 1.0 / (n as f32).sqrt();
    let mut s = 1;
    while s < n {
        for i in 0..s {
            for j in 0..s {
                let v = h[i * n + j];
                h[(i + s) * n + j] = v;
                h[i * n + j + s] = v;
                h[(i + s) * n + j + s] = -v;
            }
        }
        s *= 2;
    }
    Tensor::from_vec(h, (n, n), &Device::Cpu)
}

/// The largest order [`hadamard`] and [`turn`] take.
pub const MAX_ORDER: usize = 4096;

/// Refuses an order that is not a power of two, or past [`MAX_ORDER`].
fn check_order(n: usize) -> Result<()> {
    if !n.is_power_of_two() || n > MAX_ORDER {
        candle_core::bail!(
            "a Walsh–Hadamard matrix has an order that is a power of two, at most {MAX_ORDER}: not {n}"
        )
    }
    Ok(())
}

/// `x (…, width)` turned block by block: each run of `n` values along the last dimension
/// multiplied by [`hadamard`]`(n)`, in f32. Turning twice gives `x` back (to float error).
///
/// A fast Walsh–Hadamard transform (`n log n` additions a block, in f64, scaled once),
/// rather than a product with the matrix: a decode step turns a few hundred values per
/// layer, where candle's matmul and its copies cost a third of the step's time.
///
/// # Shapes
/// - `x`: `(…, width)`, `width` a multiple of `n`
/// - output: `(…, width)`, f32
///
/// # Errors
/// An order [`hadamard`] refuses, or a width that is not a multiple of it.
pub fn turn(x: &Tensor, n: usize) -> Result<Tensor> {
    check_order(n)?;
    let width = x.dims().last().copied().unwrap_or(0);
    if width == 0 || !width.is_multiple_of(n) {
        candle_core::bail!("rows of {width} values cannot be turned in blocks of {n}")
    }
    let mut values = x
        .to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let scale = 1.0 / (n as f64).sqrt();
    let turn_all = |task: &mut [f32]| {
        let mut block = vec![0f64; n];
        for values in task.chunks_exact_mut(n) {
            for (b, v) in block.iter_mut().zip(values.iter()) {
                *b = f64::from(*v);
            }
            // Butterflies of stride h: (a, b) → (a + b, a − b), over contiguous halves.
            let mut h = 1;
            while h < n {
                for pair in block.chunks_exact_mut(2 * h) {
                    let (low, high) = pair.split_at_mut(h);
                    for (a, b) in low.iter_mut().zip(high.iter_mut()) {
                        (*a, *b) = (*a + *b, *a - *b);
                    }
                }
                h *= 2;
            }
            for (v, b) in values.iter_mut().zip(&block) {
                *v = (b * scale) as f32;
            }
        }
    };
    // A decode step's few rows in place; a prefill's many over the cores.
    let task = n * ((1 << 14) / n).max(1);
    match values.len() > task {
        true => values.par_chunks_mut(task).for_each(turn_all),
        false => turn_all(&mut values),
    }
    Tensor::from_vec(values, x.dims(), &Device::Cpu)?.to_device(x.device())
}

/// Rows of `format` blocks, `u8 (…, row bytes)`, as f32 `(…, width)`.
///
/// # Errors
/// A tensor that is not `u8`, a format other than Q8_0 or Q4_0, or rows that are not a
/// whole number of blocks.
pub fn dequantize(rows: &Tensor, format: Format) -> Result<Tensor> {
    let dims = rows.dims();
    let bytes = dims.last().copied().unwrap_or(0);
    let bb = format.block_bytes();
    let width = bytes / bb * BLOCK;
    if rows.dtype() != DType::U8 || row_bytes(format, width) != Some(bytes) {
        candle_core::bail!(
            "{format:?} rows must be u8 of whole {bb}-byte blocks, got {:?} {dims:?}",
            rows.dtype()
        )
    }
    let data = rows
        .to_device(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<u8>()?;
    let mut out = vec![0f32; data.len() / bytes * width];
    for (row, out) in data.chunks_exact(bytes).zip(out.chunks_exact_mut(width)) {
        dequantize_row(format, row, out);
    }
    let mut shape = dims.to_vec();
    if let Some(last) = shape.last_mut() {
        *last = width;
    }
    Tensor::from_vec(out, shape, &Device::Cpu)?.to_device(rows.device())
}
