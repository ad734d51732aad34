//! `none`: no position information at all.
//!
//! Self-attention is then permutation-equivariant: shuffling the input tokens shuffles
//! the outputs the same way, so "the dog chases the cat" and "the cat chases the dog"
//! look alike to the encoder. The baseline every other encoding is measured against.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{PositionalEncoding, Table};
use crate::{EncodingSpec, Result, Target};

/// The settings of `none`: there are none.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoneConfig {}

impl EncodingSpec for NoneConfig {
    const KIND: &'static str = "none";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(NoEncoding::new(target.d_model, vb.device())))
    }
}

/// No positional encoding: every hook is the identity.
#[derive(Debug, Clone)]
pub struct NoEncoding {
    d_model: usize,
    device: Device,
}

impl NoEncoding {
    /// An encoding that adds nothing, for a model of width `d_model`.
    pub fn new(d_model: usize, device: &Device) -> Self {
        Self {
            d_model,
            device: device.clone(),
        }
    }
}

impl PositionalEncoding for NoEncoding {
    fn kind(&self) -> &'static str {
        NoneConfig::KIND
    }

    fn table(&self, len: usize) -> Result<Table> {
        let zeros = Tensor::zeros((len, self.d_model), DType::F32, &self.device)?;
        Ok(Table::additive("PE(pos, i) = 0", zeros, Vec::new()))
    }
}
