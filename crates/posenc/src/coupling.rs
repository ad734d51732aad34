//! `coupling`: position coupling (Cho et al. 2024, "Position Coupling: Improving Length
//! Generalization of Arithmetic Transformers Using Task Structure").
//!
//! ```text
//! place(t) = 1 + place(t − 1)   if token t is a digit (place(−1) = 0)
//!          = 0                  otherwise
//! PE(t, ·) = W[place(t) + k, ·],   W ∈ R^(rows × d_model), learned
//! ```
//!
//! The digits of one significance, in both operands and in the sum, share a position id,
//! and the operators (`+`, `=`, the end) take the id next to the units', on the side away
//! from the tens; one start, drawn for each batch while training ([`crate::draws`]), moves
//! every id. That is the paper's repository's `AdditionDatasetWithCoupledPositions` (ids
//! `end − len(a) … end` for an operand written most significant digit first, its operator
//! at `end`) read in this project's format, every number least significant digit first:
//! there the ids fall with significance and here they rise, and a learned table does not
//! care which way (`scripts/make_coupling_fixtures.py` checks that the two assignments
//! differ by one reflection, instance by instance). It is [`abacus`](crate::abacus) with
//! one difference: abacus keeps every token that is not a digit at row 0 and shifts the
//! digits alone, where coupling shifts the operators with them. At inference `k = 0`.
//!
//! The places are read from the tokens ([`crate::Capabilities::reads_tokens`]);
//! attention's own positions are left to another encoding (`none`, as in the paper's
//! NoPE-with-coupling runs).

use std::sync::Arc;

use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::abacus::{Abacus, AbacusConfig};
use crate::encoding::PositionalEncoding;
use crate::{EncodingSpec, Result, Target};

/// The settings of `coupling`: those of [`AbacusConfig`] (`digits`, `max_offset`, `rows`),
/// read the same way, with the same defaults.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct CouplingConfig(pub AbacusConfig);

impl EncodingSpec for CouplingConfig {
    const KIND: &'static str = "coupling";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Abacus::build(
            &self.0,
            target.d_model,
            vb,
            true,
            Self::KIND,
        )?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        self.0.parameter_count(target)
    }
}
