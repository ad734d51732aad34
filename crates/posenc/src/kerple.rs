//! `kerple`: kernelized relative positional biases (Chi, Fan, Ramadge & Rudnicky 2022,
//! "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation").
//!
//! Each head adds a learned, conditionally positive-definite kernel of the distance to its
//! scores, with two learned positive parameters per head:
//!
//! ```text
//! log:    bias_h(i, j) = −r₁ₕ · ln(1 + r₂ₕ · |i − j|)       r₁, r₂ > 0
//! power:  bias_h(i, j) = −r₁ₕ · |i − j|^r₂ₕ                 r₁ > 0, 0 < r₂ ≤ 2
//! ```
//!
//! The paper defines them for causal language models, where `|i − j|` is `i − j` for the
//! keys a query sees (later keys are the causal mask's: 0 here). In an encoder the distance
//! is symmetric, as ALiBi's encoder form is; the paper does not have that form.
//!
//! **Parameterisation.** The stored weights `r1_raw` and `r2_raw` (one per head) are mapped
//! to the constrained values smoothly, so no gradient step can leave the domain and no
//! weight gets stuck at a clamp: `r₁ = softplus(r1_raw)`, `r₂ = softplus(r2_raw)` (log), or
//! `r₂ = 2·σ(r2_raw)` (power). The authors' code instead clamps the stored values to at
//! least 0.01 (and the power exponent to at most 2) before each use. At initialisation
//! `r1_raw ~ U(−1, 1.5)` (r₁ from 0.31 to 1.70) and `r2_raw ~ U(−3, 0.5)` (r₂ from 0.05 to
//! 0.97 for log, from 0.09 to 1.24 for power): slow and fast decays across the heads.
//!
//! With r₂ = 1 the power form is ALiBi with a learned slope; the log form grows ever more
//! slowly with distance, so far keys keep more weight than under ALiBi.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cache::GeometryCache;
use crate::encoding::{distances, PositionalEncoding, Table};
use crate::{BiasContext, Capabilities};
use crate::{Direction, EncodingSpec, Error, Positions, Result, Target};

/// The settings of `kerple`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KerpleConfig {
    /// The kernel: `log` (the paper's best) or `power`.
    #[serde(default)]
    pub variant: KerpleVariant,
}

/// Which of the paper's two kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KerpleVariant {
    /// `−r₁ · ln(1 + r₂ · d)`.
    #[default]
    Log,
    /// `−r₁ · d^r₂`, `0 < r₂ ≤ 2`.
    Power,
}

impl EncodingSpec for KerpleConfig {
    const KIND: &'static str = "kerple";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Kerple::new(
            target.heads,
            self.variant,
            target.direction,
            vb,
        )?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        2 * target.heads as u128
    }
}

/// A learned kernel of the distance, two weights per head.
#[derive(Debug)]
pub struct Kerple {
    r1_raw: Tensor,
    r2_raw: Tensor,
    variant: KerpleVariant,
    direction: Direction,
    device: Device,
    cache: GeometryCache,
}

/// `softplus(x) = ln(1 + eˣ)`, written so that no `eˣ` overflows: `max(x, 0) + ln(1 + e^−|x|)`.
fn softplus(x: &Tensor) -> Result<Tensor> {
    Ok((x.relu()? + (x.abs()?.neg()?.exp()? + 1.0)?.log()?)?)
}

impl Kerple {
    /// Loads or creates `r1_raw` and `r2_raw` (each `(heads,)`) under `vb`.
    pub fn new(
        heads: usize,
        variant: KerpleVariant,
        direction: Direction,
        vb: VarBuilder,
    ) -> Result<Self> {
        if heads == 0 {
            return Err(Error::Zero {
                kind: KerpleConfig::KIND,
                what: "heads",
            });
        }
        let uniform = |lo, up| Init::Uniform { lo, up };
        Ok(Self {
            r1_raw: vb.get_with_hints(heads, "r1_raw", uniform(-1.0, 1.5))?,
            r2_raw: vb.get_with_hints(heads, "r2_raw", uniform(-3.0, 0.5))?,
            variant,
            direction,
            device: vb.device().clone(),
            cache: GeometryCache::default(),
        })
    }

    /// The constrained parameters `(r₁, r₂)`, each `(heads,)`, as the bias uses them.
    pub fn parameters(&self) -> Result<(Tensor, Tensor)> {
        let (r1_raw, r2_raw) = (
            self.r1_raw.to_dtype(DType::F32)?,
            self.r2_raw.to_dtype(DType::F32)?,
        );
        let r1 = softplus(&r1_raw)?;
        let r2 = match self.variant {
            KerpleVariant::Log => softplus(&r2_raw)?,
            // 2·σ(x) = 2 / (1 + e^−x)
            KerpleVariant::Power => ((r2_raw.neg()?.exp()? + 1.0)?.recip()? * 2.0)?,
        };
        Ok((r1, r2))
    }

    /// The `(heads, q_len, k_len)` bias of `q_len` queries at `q` against `k_len` keys at
    /// `k`, differentiable in the weights.
    pub fn bias(&self, q_len: usize, k_len: usize, q: Positions, k: Positions) -> Result<Tensor> {
        let d = self
            .cache
            .get(KerpleConfig::KIND, (q_len, k_len), (q, k), || {
                distances(self.direction, q_len, k_len, q, k, &self.device)
            })?
            .unsqueeze(0)?;
        let (r1, r2) = self.parameters()?;
        let heads = r1.dim(0)?;
        let (r1, r2) = (r1.reshape((heads, 1, 1))?, r2.reshape((heads, 1, 1))?);
        let kernel = match self.variant {
            KerpleVariant::Log => (r2.broadcast_mul(&d)? + 1.0)?.log()?,
            KerpleVariant::Power => {
                // d^r₂ = exp(r₂ · ln d), and 0 at d = 0: ln is taken of 1 there and the
                // result masked, so neither value nor gradient is NaN.
                let positive = d.gt(0.0)?.to_dtype(d.dtype())?;
                let ln_d = (&d + positive.affine(-1.0, 1.0)?)?.log()?;
                r2.broadcast_mul(&ln_d)?.exp()?.broadcast_mul(&positive)?
            }
        };
        // −x as x·(−1) + 0, so a zero distance gives 0, not −0.
        Ok(r1.broadcast_mul(&kernel)?.affine(-1.0, 0.0)?.contiguous()?)
    }
}

impl PositionalEncoding for Kerple {
    fn kind(&self) -> &'static str {
        KerpleConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            biases: true,
            ..Capabilities::default()
        }
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        Ok(Some(self.bias(cx.q_len, cx.k_len, cx.q, cx.k)?))
    }

    fn table(&self, len: usize) -> Result<Table> {
        let bias = self.bias(len, len, 0.into(), 0.into())?;
        let title = match self.variant {
            KerpleVariant::Log => "bias(query, key) = −r₁ · ln(1 + r₂ · distance), learned",
            KerpleVariant::Power => "bias(query, key) = −r₁ · distance^r₂, learned",
        };
        Ok(Table::bias(title, bias))
    }
}
