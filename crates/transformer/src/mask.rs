//! Attention masks: which keys each query may see.
//!
//! A [`Mask`] is a u8 tensor broadcastable to the scores `(batch, heads, q_len, k_len)`,
//! 1 where the query may attend. Masked scores are replaced (not offset) by the dtype's
//! most negative finite value, so nothing overflows to `−∞ − (−∞)` = NaN in f16 or bf16; a
//! query that may see no key at all (a fully padded row) gets all-zero weights, never the
//! NaN PyTorch gives (pytorch#24816, #41508).

use candle_core::{DType, Device, Tensor};

use posenc_kernels::lowest;

use crate::{Error, Result};

/// Which keys each query may attend to.
#[derive(Debug, Clone)]
pub struct Mask {
    keep: Tensor,
}

impl Mask {
    /// Wraps a u8 `keep` tensor of rank 4, broadcastable to `(batch, heads, q_len, k_len)`.
    pub fn new(keep: Tensor) -> Result<Self> {
        if keep.rank() != 4 {
            return Err(Error::Input(format!(
                "a mask must have rank 4 (batch, 1, q_len, k_len), got shape {:?}",
                keep.dims()
            )));
        }
        Ok(Self {
            keep: keep.to_dtype(DType::U8)?,
        })
    }

    /// The subsequent (causal) mask of "Attention Is All You Need" §3.2.3: the query at
    /// position `q_offset + i` sees keys `0 ..= q_offset + i`. Shape `(1, 1, q_len, k_len)`.
    pub fn causal(q_len: usize, k_len: usize, q_offset: usize, device: &Device) -> Result<Self> {
        let keep: Vec<u8> = (0..q_len)
            .flat_map(|i| (0..k_len).map(move |j| u8::from(j <= q_offset + i)))
            .collect();
        Self::new(Tensor::from_vec(keep, (1, 1, q_len, k_len), device)?)
    }

    /// The key-padding mask of token ids `(batch, len)`: keys equal to `pad_id` are hidden.
    /// Shape `(batch, 1, 1, len)`.
    pub fn padding(ids: &Tensor, pad_id: u32) -> Result<Self> {
        let (batch, len) = ids.dims2().map_err(|_| {
            Error::Input(format!(
                "token ids must be (batch, len), got {:?}",
                ids.dims()
            ))
        })?;
        let keep = ids.ne(pad_id)?;
        Self::new(keep.reshape((batch, 1, 1, len))?)
    }

    /// The key-padding mask from per-key flags `(batch, len)`, non-zero = a real token.
    pub fn from_keep(keep: &Tensor) -> Result<Self> {
        let (batch, len) = keep.dims2().map_err(|_| {
            Error::Input(format!(
                "key flags must be (batch, len), got {:?}",
                keep.dims()
            ))
        })?;
        Self::new(keep.ne(0u8)?.reshape((batch, 1, 1, len))?)
    }

    /// Both masks at once: a key is visible if both allow it.
    pub fn and(&self, other: &Mask) -> Result<Self> {
        Ok(Self {
            keep: self.keep.broadcast_mul(&other.keep)?,
        })
    }

    /// The mask of queries `start..start + len` alone (a mask that holds one row for every
    /// query is the same).
    pub(crate) fn rows(&self, start: usize, len: usize) -> Result<Self> {
        match self.keep.dim(2)? {
            1 => Ok(self.clone()),
            _ => Ok(Self {
                keep: self.keep.narrow(2, start, len)?,
            }),
        }
    }

    /// The mask of the first `len` keys alone (a mask that holds one column for every key
    /// is the same).
    pub(crate) fn keys(&self, len: usize) -> Result<Self> {
        match self.keep.dim(3)? {
            1 => Ok(self.clone()),
            _ => Ok(Self {
                keep: self.keep.narrow(3, 0, len)?,
            }),
        }
    }

    /// The u8 tensor, 1 = attend.
    pub fn keep(&self) -> &Tensor {
        &self.keep
    }

    /// Replaces masked `scores (batch, heads, q, k)` by the most negative finite value.
    pub(crate) fn fill(&self, scores: &Tensor) -> Result<Tensor> {
        let keep = self.broadcast_to(scores)?;
        let fill = Tensor::new(lowest(scores.dtype()), scores.device())?
            .to_dtype(scores.dtype())?
            .broadcast_as(scores.shape())?;
        Ok(keep.where_cond(scores, &fill)?)
    }

    /// The keep flags broadcast to `scores`, or an error naming both shapes.
    pub(crate) fn broadcast_to(&self, scores: &Tensor) -> Result<Tensor> {
        self.broadcast_to_shape(scores.dims())
    }

    /// The keep flags broadcast to scores of shape `(batch, heads, q_len, k_len)`, or an
    /// error naming both shapes.
    pub(crate) fn broadcast_to_shape(&self, scores: &[usize]) -> Result<Tensor> {
        self.keep.broadcast_as(scores).map_err(|_| {
            Error::Input(format!(
                "mask of shape {:?} does not fit attention scores (batch, heads, q_len, k_len) = {:?}",
                self.keep.dims(),
                scores
            ))
        })
    }
}
