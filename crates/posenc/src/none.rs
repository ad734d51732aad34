//! `none`: no position information at all.
//!
//! Self-attention is then permutation-equivariant: shuffling the input tokens shuffles
//! the outputs the same way, so "the dog chases the cat" and "the cat chases the dog"
//! look alike to the encoder. The baseline every other encoding is measured against.

use candle_core::Device;

use crate::encoding::{zeros_embeddings, PositionalEncoding, Table};
use crate::Result;

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
        "none"
    }

    fn table(&self, len: usize) -> Result<Table> {
        Ok(Table::Additive(
            zeros_embeddings(len, self.d_model, &self.device)?.squeeze(0)?,
        ))
    }
}
