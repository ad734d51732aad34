//! `p-rope`: rotary embedding with its lowest frequencies dropped (Barbero et al. 2025,
//! "Round and Round We Go! What makes Rotary Positional Encodings useful?", ICLR 2025).
//!
//! RoPE's slowest pairs turn so little over a context that they act as semantic channels
//! which a long distance still rotates a little, and that drift is what breaks them. p-RoPE
//! keeps only the fastest share `p` of the frequencies and sets the rest to 0, so those
//! pairs carry no position at all:
//!
//! ```text
//! θ_i = base^(−2i/d)   for i < ⌊p · d/2⌋        θ_i = 0   for the rest
//! ```
//!
//! `p = 1` is RoPE, `p = 0` is NoPE. The paper reports p = 0.75 best on Gemma 2B (lower
//! perplexity than RoPE at 0.25 also), and Gemma 4 ships it in its global layers as
//! transformers' `rope_type: "proportional"` (this kind is `rope` with that scaling, which
//! [`crate::rope_scaling`] computes as `_compute_proportional_rope_parameters` does).

use std::sync::Arc;

use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, PositionalEncoding};
use crate::rope::{NamedRope, Rope};
use crate::rope_scaling::RopeScaling;
use crate::{EncodingSpec, PairLayout, Result, Target};

/// The settings of `p-rope`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PRopeConfig {
    /// The wavelength base, 10000 as RoFormer's.
    #[serde(default = "PRopeConfig::default_base")]
    pub base: f64,
    /// The share of the frequencies (the fastest) that rotate, in [0, 1].
    #[serde(default = "PRopeConfig::default_p")]
    pub p: f64,
    /// Half-split (Llama, Gemma) or interleaved pairs.
    #[serde(default)]
    pub layout: PairLayout,
}

impl PRopeConfig {
    fn default_base() -> f64 {
        10_000.0
    }
    fn default_p() -> f64 {
        0.75
    }
}

impl EncodingSpec for PRopeConfig {
    const KIND: &'static str = "p-rope";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        require(
            Self::KIND,
            (0.0..=1.0).contains(&self.p),
            format!(
                "0 ≤ p ≤ 1 (the share of the frequencies that turn), got {:?}",
                self.p
            ),
        )?;
        let rope = Rope::new(target.head_dim()?, self.base, self.layout, 1.0, vb.device())?
            .with_scaling(RopeScaling::proportional(self.p), target.context)?;
        let note = format!(
            "the slowest {:.0}% of the pairs do not turn (p = {})",
            100.0 * (1.0 - self.p),
            self.p
        );
        Ok(Arc::new(NamedRope::new(Self::KIND, rope, note)))
    }
}
