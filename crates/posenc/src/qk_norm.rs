//! `qk-norm`: every query and key divided by its norm before the scores (Henry et al. 2020,
//! "Query-Key Normalization for Transformers"; Dehghani et al. 2023; OLMo 2, Qwen 3,
//! Gemma 3, Llama 4).
//!
//! Each head's query and key vectors are normalized on their own, so no score can grow past
//! what the norms allow:
//!
//! ```text
//! rms:  x / √(mean_i x_i² + ε)     Llama 4's weightless `L2Norm`; with a weight, Qwen 3's and Gemma 3's q_norm, k_norm
//! l2:   x / √(Σ_i x_i² + ε)        Henry et al.; fla's `l2_norm`
//! ```
//!
//! `learned` gives a weight per dimension of a head, one for queries and one for keys, in
//! each layer (under `N.query`, `N.key`), starting at 1, as Qwen 3's `q_norm` and `k_norm` do. The norm carries no
//! position of its own: it acts through the seam's `rotate` hook on whatever turned the
//! vectors before it in a `stack`, so the order is the model's:
//!
//! ```text
//! Llama 4, the norm after the rotation:    {"kind": "stack", "of": ["rope", "qk-norm"]}
//! Qwen 3, a learned norm before it:        {"kind": "stack", "of": [{"kind": "qk-norm", "learned": true}, "rope"]}
//! ```
//!
//! The tests check it against transformers' `Llama4TextL2Norm` and `Qwen3RMSNorm`, and the
//! rotations of a stack against what `Llama4TextAttention` hands its attention.

use std::sync::Arc;

use candle_core::{DType, Tensor, D};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, PositionalEncoding, Role, RotateContext, Table};
use crate::per_layer::{layer_count, PerLayer};
use crate::{Capabilities, EncodingSpec, Result, Target};

/// Which norm divides the vectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// `x / √(mean x² + ε)`: the root mean square, as an RMSNorm over one head.
    #[default]
    Rms,
    /// `x / √(Σ x² + ε)`: the Euclidean norm, a unit vector.
    L2,
}

/// The settings of `qk-norm`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QkNormConfig {
    /// `rms` or `l2`.
    #[serde(default)]
    pub norm: Norm,
    /// A weight per dimension of a head, for queries and for keys, in each layer (starting
    /// at 1); weightless when off.
    #[serde(default)]
    pub learned: bool,
    /// The ε under the root.
    #[serde(default = "QkNormConfig::default_eps")]
    pub eps: f64,
}

impl Default for QkNormConfig {
    fn default() -> Self {
        Self {
            norm: Norm::default(),
            learned: false,
            eps: Self::default_eps(),
        }
    }
}

impl QkNormConfig {
    fn default_eps() -> f64 {
        1e-6
    }
}

impl EncodingSpec for QkNormConfig {
    const KIND: &'static str = "qk-norm";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        require(
            Self::KIND,
            self.eps.is_finite() && self.eps >= 0.0,
            format!("a finite ε of 0 or more, got {}", self.eps),
        )?;
        let head_dim = target.head_dim()?;
        let one = |weights: Option<(Tensor, Tensor)>| QkNorm {
            norm: self.norm,
            eps: self.eps,
            weights,
            head_dim,
            device: vb.device().clone(),
        };
        if !self.learned {
            return Ok(Arc::new(one(None)));
        }
        let layers = PerLayer::build(target, &vb, |vb| {
            let q = vb.get_with_hints(head_dim, "query", Init::Const(1.0))?;
            let k = vb.get_with_hints(head_dim, "key", Init::Const(1.0))?;
            Ok(one(Some((q, k))))
        })?;
        Ok(Arc::new(layers))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        match (self.learned, target.head_dim()) {
            (true, Ok(d)) => 2 * d as u128 * layer_count(target) as u128,
            _ => 0,
        }
    }
}

/// Queries and keys divided by their norms, then weighted where the norm learns.
#[derive(Debug)]
pub struct QkNorm {
    norm: Norm,
    eps: f64,
    /// The query's and the key's weights `(head_dim)`, where learned.
    weights: Option<(Tensor, Tensor)>,
    head_dim: usize,
    device: candle_core::Device,
}

impl QkNorm {
    /// `x (…, head_dim)` divided by its norm over the last axis, in f32, cast back.
    pub fn normalize(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let squares = x.sqr()?;
        let total = match self.norm {
            Norm::Rms => squares.mean_keepdim(D::Minus1)?,
            Norm::L2 => squares.sum_keepdim(D::Minus1)?,
        };
        let y = x.broadcast_div(&(total + self.eps)?.sqrt()?)?;
        Ok(y.to_dtype(dtype)?)
    }
}

impl PositionalEncoding for QkNorm {
    fn kind(&self) -> &'static str {
        QkNormConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            ..Capabilities::default()
        }
    }

    /// The vectors divided by their norms, times the role's weight where learned.
    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let y = self.normalize(x)?;
        match &self.weights {
            None => Ok(y),
            Some((q, k)) => {
                let w = match cx.role {
                    Role::Query => q,
                    Role::Key => k,
                };
                Ok(y.broadcast_mul(&w.to_dtype(y.dtype())?)?)
            }
        }
    }

    /// No position: a zero table, as `none`'s, of one head's width.
    fn table(&self, len: usize) -> Result<Table> {
        let zeros = Tensor::zeros((len, self.head_dim), DType::F32, &self.device)?;
        Ok(Table::additive(
            "no position: queries and keys divided by their norms",
            zeros,
            Vec::new(),
        ))
    }
}
