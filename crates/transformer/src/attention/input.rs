//! What an attention call is given and returns.

use candle_core::Tensor;
use posenc::Positions;

use crate::kv_cache::KvCache;
use crate::mask::Mask;

/// Where the keys and values of an attention call come from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// The queries themselves (self-attention), at positions `at`, with the encoding's
    /// position `bias` `(heads, q_len, k_len)` for these queries and keys if it has one
    /// ([`posenc::PositionalEncoding::bias`]).
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
