//! The position-wise feed-forward network ("Attention Is All You Need" §3.3), plain or
//! gated (Shazeer 2020, "GLU Variants Improve Transformer").
//!
//! ```text
//! FFN(x)      = act(x W_1 + b_1) W_2 + b_2,   act = ReLU (the paper), GELU or SiLU
//! FFN_GLU(x)  = (act(x W_g) ⊙ x W_1) W_2       (with SiLU: SwiGLU, as Llama)
//! ```
//!
//! Weights named as PyTorch's `TransformerEncoderLayer`: `linear1`, `linear2`, and `gate`
//! for the gated form; biases only where [`BlockConfig::bias`](crate::BlockConfig) says.

use candle_core::Tensor;
use candle_nn::{Activation, Module, VarBuilder};

use crate::dropout::dropout;
use crate::linear::Proj;
use crate::{BlockConfig, Result};

/// Linear → activation (→ gate) → dropout → Linear.
#[derive(Debug, Clone)]
pub struct FeedForward {
    gate: Option<Proj>,
    linear1: Proj,
    linear2: Proj,
    activation: Activation,
    dropout: f32,
}

impl FeedForward {
    /// The network `cfg` describes: widths, activation, dropout, and whether it is gated
    /// and has biases.
    ///
    /// # Errors
    /// Missing or mis-shaped weights.
    pub fn new(cfg: &BlockConfig, vb: VarBuilder) -> Result<Self> {
        let (d, ff, bias) = (cfg.d_model, cfg.d_ff, cfg.bias);
        Ok(Self {
            gate: cfg
                .gated
                .then(|| Proj::load(d, ff, bias, vb.pp("gate")))
                .transpose()?,
            linear1: Proj::load(d, ff, bias, vb.pp("linear1"))?,
            linear2: Proj::load(ff, d, bias, vb.pp("linear2"))?,
            activation: cfg.activation,
            dropout: cfg.dropout,
        })
    }

    /// The projections, named `gate` (if gated), `up` (`linear1`) and `down` (`linear2`):
    /// to swap in quantized weights.
    pub fn projections_mut(&mut self) -> Vec<(&'static str, &mut Proj)> {
        let mut all = vec![("up", &mut self.linear1), ("down", &mut self.linear2)];
        if let Some(gate) = &mut self.gate {
            all.push(("gate", gate));
        }
        all
    }

    /// Applies the network to every position of `x`.
    ///
    /// # Shapes
    /// - `x`: `(batch, seq, d_model)`
    /// - output: `(batch, seq, d_model)`
    ///
    /// # Errors
    /// `x` of the wrong width.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = match &self.gate {
            // ReLU, and GELU at inference, in the same op as the product.
            None if matches!(self.activation, Activation::Relu) => self.linear1.forward_relu(x)?,
            None if matches!(self.activation, Activation::Gelu) => self.linear1.forward_gelu(x)?,
            None => self.activate(&self.linear1.forward(x)?)?,
            Some(gate) => {
                let [g, h] = Proj::forward_fused([gate, &self.linear1], x)?;
                (self.activate(&g)? * h)?
            }
        };
        Ok(self.linear2.forward(&dropout(&h, self.dropout)?)?)
    }

    fn activate(&self, h: &Tensor) -> Result<Tensor> {
        // GELU's erf form in one vectorised pass (`kernels::gelu`) where it runs: f32 on the CPU.
        Ok(match self.activation {
            Activation::Gelu => posenc_kernels::gelu(h)?,
            _ => self.activation.forward(h)?,
        })
    }
}
