//! `pope`: polar coordinate position embedding (Gopalakrishnan et al. 2025, "Decoupling
//! the 'What' and 'Where' With Polar Coordinate Positional Embeddings"; x-transformers'
//! `PolarEmbedding`).
//!
//! RoPE rotates pairs of a query's components, so a pair's angle mixes what the token is
//! (the pair's own phase) with where it is (the rotation). PoPE keeps the two apart: every
//! component `j` of a head of width `d` becomes a complex number whose magnitude is the
//! content, `softplus(x_j) ≥ 0`, and whose phase is the position alone, `t · θ_j` with
//! `θ_j = base^(−j/d)` (one frequency per component, not per pair). Keys also turn by a
//! learned phase `δ_hj ∈ [−2π, 0]` per head:
//!
//! ```text
//! q̃ = [softplus(q) ⊙ cos(tθ),  softplus(q) ⊙ sin(tθ)]                     (width 2d)
//! k̃ = [softplus(k) ⊙ cos(sθ + δ),  softplus(k) ⊙ sin(sθ + δ)]
//! q̃ · k̃ = Σ_j softplus(q_j) softplus(k_j) cos((t − s) θ_j − δ_j)
//! ```
//!
//! The score depends on the positions only through `t − s`, as RoPE's does, but a key's
//! content can no longer shift its phase. Queries and keys come out twice as wide as they
//! went in, values keep their width, and attention still scales by `1/√d`. The tests check
//! it against x-transformers' `PolarEmbedding` and `apply_polar_pos_emb`, forward and
//! gradients.

use std::f64::consts::TAU;
use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{
    check_base, check_even, require, tensor_from_fn, Form, PositionalEncoding, Table,
};
use crate::{Capabilities, Role, RotateContext};
use crate::{EncodingSpec, Error, Positions, Result, Target};

/// The settings of `pope`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PopeConfig {
    /// The wavelength base: `θ_j = base^(−j/d)`.
    #[serde(default = "PopeConfig::default_base")]
    pub base: f64,
    /// Draw the keys' phases `δ` uniformly from `[−2π, 0]` (x-transformers'
    /// `bias_uniform_init`) instead of starting them at 0.
    #[serde(default)]
    pub uniform_phase: bool,
}

impl PopeConfig {
    fn default_base() -> f64 {
        10_000.0
    }
}

impl Default for PopeConfig {
    fn default() -> Self {
        Self {
            base: Self::default_base(),
            uniform_phase: false,
        }
    }
}

impl EncodingSpec for PopeConfig {
    const KIND: &'static str = "pope";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        check_base(Self::KIND, self.base)?;
        let head_dim = target.head_dim()?;
        check_even(Self::KIND, head_dim, "head width")?;
        let init = match self.uniform_phase {
            true => Init::Uniform { lo: -TAU, up: 0.0 },
            false => Init::Const(0.0),
        };
        let phase = vb.get_with_hints((target.heads, head_dim), "phase", init)?;
        Ok(Arc::new(Pope {
            theta: (0..head_dim)
                .map(|j| self.base.powf(-(j as f64) / head_dim as f64))
                .collect(),
            phase,
            device: vb.device().clone(),
        }))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        target.d_model as u128
    }
}

/// Magnitudes from the content, phases from the position.
#[derive(Debug)]
pub struct Pope {
    /// `θ_j`, one per component.
    theta: Vec<f64>,
    /// `δ (heads, d)`, clamped to `[−2π, 0]` where used.
    phase: Tensor,
    device: Device,
}

impl Pope {
    /// `cos(tθ_j)` and `sin(tθ_j)` at the `len` positions `at`, `(len, d)` each, computed
    /// in f64.
    fn angles(&self, at: Positions, len: usize) -> Result<(Tensor, Tensor)> {
        let d = self.theta.len();
        let angle = |i: usize, j: usize| at.get(i) as f64 * self.theta[j];
        Ok((
            tensor_from_fn(len, d, &self.device, |i, j| angle(i, j).cos())?,
            tensor_from_fn(len, d, &self.device, |i, j| angle(i, j).sin())?,
        ))
    }

    /// `[m ⊙ cos, m ⊙ sin]` of `x (batch, heads, len, d)`, `m = softplus(x)`, computed in f32
    /// and cast back; `cos` and `sin` broadcast to `x`.
    fn polar(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let x32 = x.to_dtype(candle_core::DType::F32)?;
        // softplus(x) = max(x, 0) + ln(1 + e^(−|x|)), exact in f32 at any x.
        let m = (x32.relu()? + (x32.abs()?.neg()?.exp()? + 1.0)?.log()?)?;
        let out = Tensor::cat(&[m.broadcast_mul(cos)?, m.broadcast_mul(sin)?], 3)?;
        Ok(out.to_dtype(x.dtype())?)
    }

    /// `δ` clamped to `[−2π, 0]`, in f32, its gradient passing where it is inside, bounds
    /// included (as torch's `clamp`): a phase that starts at 0 learns.
    fn clamped_phase(&self) -> Result<Tensor> {
        let p = &self.phase.to_dtype(candle_core::DType::F32)?;
        let inside = p.ge(-TAU)?.mul(&p.le(0.0)?)?;
        let bound = p.clamp(-TAU, 0.0)?.detach();
        Ok(inside.where_cond(p, &bound)?)
    }

    fn check(x: &Tensor, d: usize) -> Result<usize> {
        match x.dims() {
            &[_, _, len, w] if w == d => Ok(len),
            dims => Err(Error::Shape {
                kind: PopeConfig::KIND,
                msg: format!("expected (batch, heads, seq, {d}), got {dims:?}"),
            }),
        }
    }
}

impl PositionalEncoding for Pope {
    fn kind(&self) -> &'static str {
        PopeConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            ..Capabilities::default()
        }
    }

    /// Queries or keys `(batch, heads, len, d)` to `(batch, heads, len, 2d)`; the keys with
    /// each head's phase `δ` added to every angle.
    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let at = cx.at;
        let len = Self::check(x, self.theta.len())?;
        at.check(PopeConfig::KIND, len)?;
        if cx.role == Role::Query {
            let (cos, sin) = self.angles(at, len)?;
            return Self::polar(x, &cos, &sin);
        }
        let heads = self.phase.dim(0)?;
        require(
            PopeConfig::KIND,
            x.dim(1)? == heads,
            format!(
                "one key head per query head (its phases are per head), got {} key heads for {heads}",
                x.dim(1)?
            ),
        )?;
        let (cos, sin) = self.angles(at, len)?;
        let delta = self.clamped_phase()?.unsqueeze(1)?; // (heads, 1, d)
        let (cd, sd) = (delta.cos()?, delta.sin()?);
        // cos(a + δ) and sin(a + δ), (heads, len, d).
        let cos_k =
            (cos.unsqueeze(0)?.broadcast_mul(&cd)? - sin.unsqueeze(0)?.broadcast_mul(&sd)?)?;
        let sin_k =
            (sin.unsqueeze(0)?.broadcast_mul(&cd)? + cos.unsqueeze(0)?.broadcast_mul(&sd)?)?;
        Self::polar(x, &cos_k.unsqueeze(0)?, &sin_k.unsqueeze(0)?)
    }

    /// `cos(tθ_j)` and `sin(tθ_j)`, one column per component (not per pair), before the
    /// keys' phases.
    fn table(&self, len: usize) -> Result<Table> {
        let (cos, sin) = self.angles(Positions::From(0), len)?;
        Ok(Table {
            title: format!(
                "PoPE: cos and sin of pos · θ_j, θ_j = base^(−j/{}), one per component; magnitudes softplus(x)",
                self.theta.len()
            ),
            form: Form::Rotary { cos, sin },
        })
    }
}
