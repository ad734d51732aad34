//! `xpos`: rotary embedding with an exponential decay (Sun et al. 2022, "A
//! Length-Extrapolatable Transformer").
//!
//! Queries and keys are rotated as in RoPE, and each rotation pair `i` is also scaled, the
//! query at position `n` up and the key at position `m` down:
//!
//! ```text
//! q̃_n = ζ^(n/γ) ⊙ R_n q_n      k̃_m = ζ^(−m/γ) ⊙ R_m k_m      ζ_i = (2i/d + γ′) / (1 + γ′)
//! q̃_n · k̃_m = Σ_i ζ_i^((n − m)/γ) · (R_(n−m) q_n · k_m)_i
//! ```
//!
//! with `d` the head width, `γ′ = 0.4` and `γ` = `scale_base` (512). The score still depends
//! on `n − m` only, and every pair decays with the distance, the slow-turning pairs (whose
//! `ζ_i` is near 1) least. This is the first encoding that treats queries and keys apart:
//! its [`rotate`](PositionalEncoding::rotate) reads [`crate::RotateContext::role`].
//!
//! **Range.** x-transformers and the paper's code scale by `ζ^((n − c)/γ)` with `c` the
//! middle of the sequence, which cancels in every score. Here `c = 0`, so keys cached at one
//! length stay right at any other; the price is a range. Past position `max_positions`
//! (`γ · ln(10³⁰) / ln(1/ζ₀)`, 28 232 for `γ = 512`) a key's scale `ζ₀^(−m/γ)` would pass
//! 10³⁰ on its way to f32's limit, and such positions are refused by name.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{check_end, require, tensor_from_fn, Form, PositionalEncoding, Table};
use crate::rope::Rope;
use crate::PairLayout;
use crate::{Capabilities, Role, RotateContext};
use crate::{EncodingSpec, Error, Positions, Result, Target};

/// `γ′` of the paper (x-transformers' `0.4`).
const GAMMA_PRIME: f64 = 0.4;
/// The largest scale a key may take: far inside f32, whose largest value is 3.4 · 10³⁸.
const MAX_SCALE: f64 = 1e30;

/// The settings of `xpos`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct XposConfig {
    /// The rotation's base θ.
    #[serde(default = "XposConfig::default_base")]
    pub base: f64,
    /// `γ`: the decay `ζ_i^(distance/γ)` is per `γ` positions.
    #[serde(default = "XposConfig::default_scale_base")]
    pub scale_base: f64,
    /// Which dimensions form a pair: `interleaved` (x-transformers', the default) or
    /// `halves`.
    #[serde(default = "XposConfig::default_layout")]
    pub layout: PairLayout,
}

impl XposConfig {
    fn default_base() -> f64 {
        10_000.0
    }
    fn default_scale_base() -> f64 {
        512.0
    }
    fn default_layout() -> PairLayout {
        PairLayout::Interleaved
    }
}

impl Default for XposConfig {
    fn default() -> Self {
        Self {
            base: Self::default_base(),
            scale_base: Self::default_scale_base(),
            layout: Self::default_layout(),
        }
    }
}

impl EncodingSpec for XposConfig {
    const KIND: &'static str = "xpos";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let head_dim = target.head_dim()?;
        Ok(Arc::new(Xpos::new(
            head_dim,
            self.base,
            self.scale_base,
            self.layout,
            vb.device(),
        )?))
    }
}

/// RoPE times a per-pair exponential decay, queries scaled up and keys down.
#[derive(Debug)]
pub struct Xpos {
    rope: Rope,
    /// `ζ_i`, one per rotation pair.
    zeta: Vec<f64>,
    scale_base: f64,
    max_positions: usize,
    device: Device,
}

impl Xpos {
    /// xPos for heads of width `head_dim` (even), rotation base `base`, decay per
    /// `scale_base` positions.
    pub fn new(
        head_dim: usize,
        base: f64,
        scale_base: f64,
        layout: PairLayout,
        device: &Device,
    ) -> Result<Self> {
        let kind = XposConfig::KIND;
        require(
            kind,
            scale_base.is_finite() && scale_base > 0.0,
            format!("scale_base > 0, got {scale_base}"),
        )?;
        let rope = Rope::new(head_dim, base, layout, 1.0, device).map_err(|e| match e {
            Error::OddDimension { dim, what, .. } => Error::OddDimension { kind, dim, what },
            other => other,
        })?;
        let zeta: Vec<f64> = (0..head_dim / 2)
            .map(|i| (2.0 * i as f64 / head_dim as f64 + GAMMA_PRIME) / (1.0 + GAMMA_PRIME))
            .collect();
        // The smallest ζ grows fastest inverted: ζ₀^(−m/γ) ≤ MAX_SCALE.
        let max_positions = (scale_base * MAX_SCALE.ln() / (1.0 / zeta[0]).ln()).floor();
        Ok(Self {
            rope,
            zeta,
            scale_base,
            max_positions: max_positions.min(crate::limits::MAX_POSITIONS as f64) as usize,
            device: device.clone(),
        })
    }

    /// `ζ_i`, one per rotation pair.
    pub fn zeta(&self) -> &[f64] {
        &self.zeta
    }

    /// The rotation's `(cos, sin)` at the `len` positions `at`, each `(len, head_dim/2)`
    /// f32, times `ζ_i^(sign · n/γ)`: `sign` 1 for queries, −1 for keys.
    pub fn scaled_cos_sin(&self, at: Positions, len: usize, sign: f64) -> Result<(Tensor, Tensor)> {
        at.check(XposConfig::KIND, len)?;
        check_end(XposConfig::KIND, at, len, self.max_positions)?;
        let (cos, sin) = self.rope.cos_sin(at, len)?;
        let scale = tensor_from_fn(len, self.zeta.len(), &self.device, |p, i| {
            self.zeta[i].powf(sign * at.get(p) as f64 / self.scale_base)
        })?;
        Ok(((cos * &scale)?, (sin * &scale)?))
    }

    fn apply(&self, x: &Tensor, at: Positions, sign: f64) -> Result<Tensor> {
        let seq = x.dims().get(2).copied().unwrap_or(0);
        let (cos, sin) = self.scaled_cos_sin(at, seq, sign)?;
        self.rope.rotate_with(x, &cos, &sin)
    }
}

impl PositionalEncoding for Xpos {
    fn kind(&self) -> &'static str {
        XposConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            max_positions: Some(self.max_positions),
            ..Capabilities::default()
        }
    }

    /// Queries rotated and scaled by `ζ^(n/γ)`, keys by `ζ^(−n/γ)`.
    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let sign = match cx.role {
            Role::Query => 1.0,
            Role::Key => -1.0,
        };
        self.apply(x, cx.at, sign)
    }

    fn table(&self, len: usize) -> Result<Table> {
        let (cos, sin) = self.scaled_cos_sin(Positions::From(0), len, 1.0)?;
        Ok(Table {
            title: "query rotation by pos · θ_i, scaled by ζ_i^(pos/γ) (keys: ζ_i^(−pos/γ))".into(),
            form: Form::Rotary { cos, sin },
        })
    }
}
