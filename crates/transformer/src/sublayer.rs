//! Residual connection around a sublayer, with layer normalisation ("Attention Is All You
//! Need" §5.4; Xiong et al. 2020 for pre-norm).
//!
//! ```text
//! post-norm (the paper, PyTorch's default):  x ← LayerNorm(x + Dropout(f(x)))
//! pre-norm  (norm_first):                    x ← x + Dropout(f(LayerNorm(x)))
//! ```

use candle_core::Tensor;
use candle_nn::{LayerNorm, LayerNormConfig, Module, VarBuilder};
use posenc_kernels as kernels;

use crate::dropout::dropout;
use crate::{BlockConfig, NormKind, Result};

/// LayerNorm or RMSNorm ([`NormKind`]).
///
/// Each runs as [`posenc_kernels::layer_norm`] or [`posenc_kernels::rms_norm`], which pick
/// the kernel for the device and dtype, with a backward wherever a gradient flows.
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

    /// `norm(x + y)`, the post-norm residual: for a LayerNorm one call
    /// ([`posenc_kernels::add_layer_norm`], fused where the kernels can), else the sum and
    /// then [`Norm::forward`].
    pub fn forward_sum(&self, x: &Tensor, y: &Tensor) -> candle_core::Result<Tensor> {
        match (self.kind, self.ln.bias()) {
            (NormKind::LayerNorm, Some(b)) => {
                kernels::add_layer_norm(x, y, self.ln.weight(), b, self.eps as f32)
            }
            _ => self.forward(&(x + y)?),
        }
    }
}

impl Module for Norm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (w, eps) = (self.ln.weight(), self.eps as f32);
        match (self.kind, self.ln.bias()) {
            (NormKind::LayerNorm, Some(b)) => kernels::layer_norm(x, w, b, eps),
            (NormKind::RmsNorm, _) => kernels::rms_norm(x, w, eps),
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
