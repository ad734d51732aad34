//! `hope`: rotary embedding with only its high frequencies (Chen et al. 2025, "HoPE: A
//! Novel Positional Encoding Without Long-Term Decay for Enhanced Context Awareness and
//! Extrapolation", ACL 2025).
//!
//! A rotary pair whose wavelength `2π/θ_i` is longer than the trained context `L` never
//! turns a full circle in training: the model sees only part of its rotation, and past `L`
//! it turns into angles it never saw. HoPE keeps the pairs that do turn fully within `L`
//! and makes the rest position-independent (they do not turn at all), which also drops
//! RoPE's long-term decay:
//!
//! ```text
//! θ_i = base^(−2i/d)   where 2π / θ_i ≤ L        θ_i = 0   elsewhere
//! ```
//!
//! Unlike `p-rope`, whose share of turning pairs is fixed, the cut-off follows the trained
//! context: at base 10000, head width 32 and `L = 64`, 5 of the 16 pairs turn. No
//! reference implementation ships; the tests check the rotation against this formula in
//! f64.

use std::f64::consts::TAU;
use std::sync::Arc;

use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, PositionalEncoding};
use crate::rope::{NamedRope, Rope};
use crate::{EncodingSpec, PairLayout, Result, Target};

/// The trained context the cut-off uses where neither the settings nor the model give one
/// (an encoding drawn or inspected on its own).
pub const DEFAULT_CONTEXT: usize = 512;

/// The settings of `hope`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HopeConfig {
    /// The wavelength base, 10000 as RoFormer's.
    #[serde(default = "HopeConfig::default_base")]
    pub base: f64,
    /// The trained context `L` whose full turns decide which pairs keep their rotation:
    /// the model's own when unset (512 for an encoding on its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<usize>,
    /// Half-split (Llama) or interleaved pairs.
    #[serde(default)]
    pub layout: PairLayout,
}

impl HopeConfig {
    fn default_base() -> f64 {
        10_000.0
    }
}

impl EncodingSpec for HopeConfig {
    const KIND: &'static str = "hope";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let context = self.context.or(target.context).unwrap_or(DEFAULT_CONTEXT);
        require(
            Self::KIND,
            context > 0,
            "context ≥ 1 (the trained length whose full turns keep a pair), got 0".to_string(),
        )?;
        let rope = Rope::new(target.head_dim()?, self.base, self.layout, 1.0, vb.device())?;
        let pairs = rope.rotary_dim() / 2;
        let turns = |theta: f64| theta > 0.0 && TAU / theta <= context as f64;
        let rope = rope.map_frequencies(|theta| if turns(theta) { theta } else { 0.0 });
        let kept = crate::inverse_frequencies(2 * pairs, self.base)
            .into_iter()
            .filter(|&theta| turns(theta))
            .count();
        let note = format!(
            "{kept} of {pairs} pairs turn a full circle within L = {context} and keep turning, \
             the rest do not turn"
        );
        Ok(Arc::new(NamedRope::new(Self::KIND, rope, note)))
    }
}
