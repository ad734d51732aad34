//! `learned`: one trained vector per absolute position (BERT, GPT-2).
//!
//! ```text
//! PE(pos, ·) = W[pos, ·],   W ∈ R^(max_positions × d_model), learned with the model
//! ```
//!
//! Devlin et al. 2019 (BERT), Radford et al. 2019 (GPT-2). Flexible, but the table has a
//! fixed number of rows: a position past `max_positions` has no vector, and positions
//! rarely seen in training have poorly trained ones. Asking for one is an error.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Embedding, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{add_table, check_embeddings, check_end, PositionalEncoding, Table};
use crate::{Capabilities, EmbedContext};
use crate::{EncodingSpec, Error, Positions, Result, Target};

/// The settings of `learned`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LearnedConfig {
    /// Rows in the table: the longest sequence the model can take.
    #[serde(default = "LearnedConfig::default_max_positions")]
    pub max_positions: usize,
}

impl LearnedConfig {
    fn default_max_positions() -> usize {
        512
    }
}

impl EncodingSpec for LearnedConfig {
    const KIND: &'static str = "learned";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Learned::new(
            self.max_positions,
            target.d_model,
            vb,
        )?))
    }

    fn for_positions(&self, positions: usize) -> Option<Self> {
        Some(Self {
            max_positions: positions,
        })
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        self.max_positions as u128 * target.d_model as u128
    }
}

/// Learned absolute position embeddings; the weight is `weight: (max_positions, d_model)`
/// under the given [`VarBuilder`] (BERT names it `embeddings.position_embeddings.weight`).
#[derive(Debug, Clone)]
pub struct Learned {
    embedding: Embedding,
    max_positions: usize,
    d_model: usize,
}

impl Learned {
    /// Loads or creates the `(max_positions, d_model)` table.
    pub fn new(max_positions: usize, d_model: usize, vb: VarBuilder) -> Result<Self> {
        for (value, what) in [(max_positions, "max_positions"), (d_model, "d_model")] {
            if value == 0 {
                return Err(Error::Zero {
                    kind: LearnedConfig::KIND,
                    what,
                });
            }
        }
        crate::limits::check("max_positions", max_positions, crate::limits::MAX_POSITIONS)?;
        let embedding = candle_nn::embedding(max_positions, d_model, vb)?;
        Ok(Self {
            embedding,
            max_positions,
            d_model,
        })
    }

    /// The learned table `(max_positions, d_model)`.
    pub fn weight(&self) -> &Tensor {
        self.embedding.embeddings()
    }

    /// The rows of the `len` positions `at`, or an error naming the first position past
    /// the table.
    pub fn rows(&self, at: Positions, len: usize) -> Result<Tensor> {
        at.check(LearnedConfig::KIND, len)?;
        check_end(LearnedConfig::KIND, at, len, self.max_positions)?;
        at.select(self.weight(), len)
    }
}

impl PositionalEncoding for Learned {
    fn kind(&self) -> &'static str {
        LearnedConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            adds: true,
            max_positions: Some(self.max_positions),
            ..Capabilities::default()
        }
    }

    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> Result<Tensor> {
        let seq = check_embeddings(LearnedConfig::KIND, x, self.d_model)?;
        add_table(x, &self.rows(cx.at, seq)?)
    }

    fn table(&self, len: usize) -> Result<Table> {
        let values = self
            .rows(Positions::From(0), len)?
            .to_dtype(candle_core::DType::F32)?;
        Ok(Table::additive(
            "PE(pos, i) = W[pos, i], learned",
            values,
            Vec::new(),
        ))
    }
}
