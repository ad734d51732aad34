//! Residual connection around a sublayer, with layer normalisation ("Attention Is All You
//! Need" §5.4; Xiong et al. 2020 for pre-norm).
//!
//! ```text
//! post-norm (the paper, PyTorch's default):  x ← LayerNorm(x + Dropout(f(x)))
//! pre-norm  (norm_first):                    x ← x + Dropout(f(LayerNorm(x)))
//! ```

use candle_core::Tensor;
use candle_nn::{LayerNorm, LayerNormConfig, Module, VarBuilder};

use crate::dropout::dropout;
use crate::{BlockConfig, NormKind, Result};

/// LayerNorm or RMSNorm ([`NormKind`]).
///
/// LayerNorm: in f32 on the CPU this crate's fused kernel with its own backward
/// ([`crate::ops::layer_norm`]); elsewhere candle's fused kernel when no gradient is
/// needed and the differentiable composition when one is. RMSNorm: candle's fused kernel for
/// inference, its differentiable composition for training.
#[derive(Debug, Clone)]
pub struct Norm {
    ln: LayerNorm,
    kind: NormKind,
    eps: f64,
}

impl Norm {
    /// A LayerNorm: `weight` and `bias` of width `d_model` under `vb`.
    pub fn new(d_model: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Self::with_kind(NormKind::LayerNorm, d_model, eps, vb)
    }

    /// A norm of `kind`: `weight` (and for LayerNorm `bias`) of width `d_model` under `vb`.
    pub fn with_kind(kind: NormKind, d_model: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        let config = LayerNormConfig {
            eps,
            remove_mean: kind == NormKind::LayerNorm,
            affine: kind == NormKind::LayerNorm,
        };
        Ok(Self {
            ln: candle_nn::layer_norm(d_model, config, vb)?,
            kind,
            eps,
        })
    }

    /// The norm a block's configuration names, of width `cfg.d_model`.
    pub fn of(cfg: &BlockConfig, vb: VarBuilder) -> Result<Self> {
        Self::with_kind(cfg.norm, cfg.d_model, cfg.eps, vb)
    }

    /// `norm(x + y)`, the post-norm residual: one fused pass where [`crate::ops::add_layer_norm`]
    /// runs (a LayerNorm in f32 on the CPU), else the sum and then [`Norm::forward`].
    pub fn forward_sum(&self, x: &Tensor, y: &Tensor) -> candle_core::Result<Tensor> {
        let f32_cpu = x.dtype() == candle_core::DType::F32 && x.device().is_cpu();
        match (self.kind, self.ln.bias()) {
            (NormKind::LayerNorm, Some(b)) if f32_cpu => {
                crate::ops::add_layer_norm(x, y, self.ln.weight(), b, self.eps as f32)
            }
            _ => self.forward(&(x + y)?),
        }
    }
}

impl Module for Norm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (w, b) = (self.ln.weight(), self.ln.bias());
        let tracked = x.track_op() || w.track_op() || b.is_some_and(Tensor::track_op);
        let fused = x.dtype() == candle_core::DType::F32 && x.device().is_cpu();
        match (self.kind, b) {
            // Parallel over rows and vectorised: twice as fast as candle's kernel at
            // MiniLM's sizes, so it serves inference too.
            (NormKind::LayerNorm, Some(b)) if fused => {
                crate::ops::layer_norm(x, w, b, self.eps as f32)
            }
            // A GPU: candle's fused kernel, with a backward of its own (`ops::with_grad`);
            // on the CPU (f64) that kernel is not there, and the composition runs.
            (NormKind::LayerNorm, Some(b)) if tracked && !x.device().is_cpu() => {
                crate::ops::with_grad::layer_norm(x, w, b, self.eps as f32)
            }
            (NormKind::LayerNorm, Some(b)) if tracked => {
                candle_nn::ops::layer_norm_slow(x, w, b, self.eps as f32)
            }
            (NormKind::RmsNorm, _) if tracked && !x.device().is_cpu() => {
                crate::ops::with_grad::rms_norm(x, w, self.eps as f32)
            }
            (NormKind::RmsNorm, _) if tracked => {
                candle_nn::ops::rms_norm_slow(x, w, self.eps as f32)
            }
            (NormKind::RmsNorm, _) => {
                candle_nn::ops::rms_norm(&x.contiguous()?, w, self.eps as f32)
            }
            _ => self.ln.forward(&x.contiguous()?),
        }
    }
}

/// A residual connection with its norm, before or after the sublayer.
#[derive(Debug, Clone)]
pub struct Residual {
    norm: Norm,
    norm_first: bool,
    dropout: f32,
}

impl Residual {
    /// A residual connection configured by `cfg` (norm kind, width, eps, norm position,
    /// dropout); the norm is loaded under `vb` (PyTorch's `norm1`, `norm2`, `norm3`).
    pub fn new(cfg: &BlockConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            norm: Norm::of(cfg, vb)?,
            norm_first: cfg.norm_first,
            dropout: cfg.dropout,
        })
    }

    /// `x` plus the sublayer `f`, normalised before or after.
    ///
    /// # Shapes
    /// - `x`, and what `f` returns: `(batch, seq, d_model)`
    /// - output: `(batch, seq, d_model)`
    ///
    /// # Errors
    /// `f`'s own; `x` of the wrong width.
    pub fn forward(&self, x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        if self.norm_first {
            let y = f(&self.norm.forward(x)?)?;
            Ok((x + dropout(&y, self.dropout)?)?)
        } else {
            let y = f(x)?;
            Ok(self.norm.forward_sum(x, &dropout(&y, self.dropout)?)?)
        }
    }
}
