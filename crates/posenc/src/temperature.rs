//! `temperature`: Llama 4's attention temperature, queries sharpened with their position
//! (Meta 2025, transformers' `Llama4TextAttention`; llama.cpp's `llm_graph_input_attn_temp`).
//!
//! Llama 4's layers without rotation give each query a factor that grows with the log of
//! its position, step by step every `floor` positions, so that a query far into a long
//! context does not see its weights flatten over the many keys before it:
//!
//! ```text
//! q_i ← q_i · (1 + scale · ln(⌊(i + 1) / floor⌋ + 1))          scale 0.1, floor 8 192
//! ```
//!
//! The factor is 1 for the first `floor − 1` positions. Keys are left as they are. It
//! carries no position other than this: Llama 4 puts it on its NoPE layers, between RoPE
//! layers,
//!
//! ```text
//! {"kind": "layers", "pattern": ["rope", "rope", "rope", "temperature"]}
//! ```
//!
//! The tests check it against what `Llama4TextAttention` hands its attention in a layer that
//! does not rotate.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, PositionalEncoding, Role, RotateContext, Table};
use crate::{Capabilities, Direction, EncodingSpec, Positions, Result, Target};

/// The settings of `temperature`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemperatureConfig {
    /// How fast the factor grows with the log of the position (Llama 4's `attn_scale`).
    #[serde(default = "TemperatureConfig::default_scale")]
    pub scale: f64,
    /// The positions between steps of the factor (Llama 4's `floor_scale`).
    #[serde(default = "TemperatureConfig::default_floor")]
    pub floor: usize,
}

impl Default for TemperatureConfig {
    fn default() -> Self {
        Self {
            scale: Self::default_scale(),
            floor: Self::default_floor(),
        }
    }
}

impl TemperatureConfig {
    fn default_scale() -> f64 {
        0.1
    }

    fn default_floor() -> usize {
        8192
    }
}

impl EncodingSpec for TemperatureConfig {
    const KIND: &'static str = "temperature";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        require(
            Self::KIND,
            self.floor >= 1,
            "a floor of at least 1 position, got 0",
        )?;
        require(
            Self::KIND,
            self.scale.is_finite() && self.scale >= 0.0,
            format!("a finite scale of 0 or more, got {}", self.scale),
        )?;
        Ok(Arc::new(Temperature {
            scale: self.scale,
            floor: self.floor,
            heads: target.heads,
            direction: target.direction,
            device: vb.device().clone(),
        }))
    }
}

/// Each query times `1 + scale · ln(⌊(i + 1) / floor⌋ + 1)`.
#[derive(Debug)]
pub struct Temperature {
    scale: f64,
    floor: usize,
    heads: usize,
    direction: Direction,
    device: Device,
}

impl Temperature {
    /// The factor of the query at position `i`.
    pub fn factor(&self, i: usize) -> f64 {
        1.0 + self.scale * (((i + 1) / self.floor) as f64 + 1.0).ln()
    }

    /// The factors of `len` tokens at `at`, `(len)`, f32.
    fn factors(&self, at: Positions, len: usize) -> Result<Tensor> {
        at.check(TemperatureConfig::KIND, len)?;
        let f: Vec<f32> = (0..len).map(|i| self.factor(at.get(i)) as f32).collect();
        Ok(Tensor::from_vec(f, len, &self.device)?)
    }
}

impl PositionalEncoding for Temperature {
    fn kind(&self) -> &'static str {
        TemperatureConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            ..Capabilities::default()
        }
    }

    /// Queries `(batch, heads, seq, head_dim)` times their position's factor; keys as given.
    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        if cx.role == Role::Key {
            return Ok(x.clone());
        }
        let len = x.dim(2)?;
        let f = self.factors(cx.at, len)?.reshape((1, 1, len, 1))?;
        let y = x.to_dtype(DType::F32)?.broadcast_mul(&f)?;
        Ok(y.to_dtype(x.dtype())?)
    }

    /// The change to logits that are all 1: `factor(i) − 1` on every key query `i` sees.
    fn table(&self, len: usize) -> Result<Table> {
        self.table_at(Positions::From(0), len)
    }

    /// [`table`](PositionalEncoding::table)'s at the tokens' own positions: query `i` at
    /// position `p_i` sees the keys at positions up to `p_i` where attention is causal.
    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        let f: Vec<f32> = self.factors(at, len)?.to_vec1()?;
        let rows: Vec<f32> = (0..len)
            .flat_map(|i| {
                let f = f[i] - 1.0;
                let (p, seen) = (at.get(i), self.direction == Direction::Causal);
                (0..len).map(move |j| if seen && at.get(j) > p { 0.0 } else { f })
            })
            .collect();
        let bias = Tensor::from_vec(rows, (1, len, len), &self.device)?
            .broadcast_as((self.heads, len, len))?
            .contiguous()?;
        Ok(Table::bias(
            format!(
                "logits of 1 times 1 + {} · ln(⌊(i + 1) / {}⌋ + 1), less 1: the queries' temperature",
                self.scale, self.floor
            ),
            bias,
        ))
    }
}
