//! The position-wise feed-forward network ("Attention Is All You Need" §3.3).
//!
//! ```text
//! FFN(x) = act(x W_1 + b_1) W_2 + b_2,   act = ReLU (the paper) or GELU
//! ```
//!
//! Weights named as PyTorch's `TransformerEncoderLayer`: `linear1`, `linear2`.

use candle_core::{DType, Tensor};
use candle_nn::{Activation, Linear, Module, VarBuilder};

use crate::embeddings::dropout;
use crate::linear;
use crate::Result;

/// Linear → activation → dropout → Linear.
#[derive(Debug, Clone)]
pub struct FeedForward {
    linear1: Linear,
    linear2: Linear,
    activation: Activation,
    dropout: f32,
}

impl FeedForward {
    /// `linear1: d_model → d_ff` and `linear2: d_ff → d_model` under `vb`.
    pub fn new(
        d_model: usize,
        d_ff: usize,
        activation: Activation,
        dropout: f32,
        vb: VarBuilder,
    ) -> Result<Self> {
        Ok(Self {
            linear1: candle_nn::linear(d_model, d_ff, vb.pp("linear1"))?,
            linear2: candle_nn::linear(d_ff, d_model, vb.pp("linear2"))?,
            activation,
            dropout,
        })
    }

    /// Applies the network to every position of `x (batch, seq, d_model)`.
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let h = linear::apply(&self.linear1, x)?;
        // GELU's erf form in one vectorised pass (`ops::gelu`) where it runs: f32 on the CPU.
        let h = if matches!(self.activation, Activation::Gelu)
            && h.dtype() == DType::F32
            && h.device().is_cpu()
        {
            crate::ops::gelu(&h)?
        } else {
            self.activation.forward(&h)?
        };
        Ok(linear::apply(
            &self.linear2,
            &dropout(&h, self.dropout, train)?,
        )?)
    }
}
