//! `sink`: a learned attention sink per head (gpt-oss, 2025; x-transformers'
//! `head_learned_sink`).
//!
//! Softmax makes every query spend all of its weight on the keys it sees, even when none of
//! them is worth reading. Trained models make a place to put the surplus: the first token,
//! which StreamingLLM (Xiao et al. 2024) found every head staring at, and whose eviction
//! from a rolling cache breaks the model. A learned sink gives the surplus a place of its
//! own: one logit `s_h` per head, a key that every query sees and whose value is zero.
//!
//! ```text
//! w_ij = e^(z_ij) / (e^(s_h) + Σ_k e^(z_ik))        out_i = Σ_j w_ij v_j        (Σ_j w_ij < 1)
//! ```
//!
//! It reaches attention as a declaration, [`crate::Capabilities::sinks`], and carries no position of its own: alone it is NoPE with a sink; `stack` puts it
//! beside RoPE, as gpt-oss does:
//!
//! ```text
//! {"kind": "stack", "of": ["rope", "sink"]}
//! ```
//!
//! The logits start at `init` (0, as x-transformers'), and the tests check attention with
//! the sink against x-transformers' `Attend(head_learned_sink = True)`, forward and
//! gradients.

use std::sync::Arc;

use candle_core::{DType, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, PositionalEncoding, Table};
use crate::Capabilities;
use crate::{Direction, EncodingSpec, Result, Target};

/// The settings of `sink`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// The starting logit of every head's sink (0: at equal logits, the sink takes as
    /// much as one key).
    #[serde(default)]
    pub init: f64,
}

impl EncodingSpec for SinkConfig {
    const KIND: &'static str = "sink";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        require(
            Self::KIND,
            self.init.is_finite(),
            format!("a finite init, got {}", self.init),
        )?;
        Ok(Arc::new(Sink {
            logits: vb.get_with_hints(target.heads, "logits", Init::Const(self.init))?,
            direction: target.direction,
        }))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        target.heads as u128
    }
}

/// One learned sink logit per head.
#[derive(Debug)]
pub struct Sink {
    /// `(heads)`.
    logits: Tensor,
    direction: Direction,
}

impl PositionalEncoding for Sink {
    fn kind(&self) -> &'static str {
        SinkConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            sinks: vec![self.logits.clone()],
            ..Capabilities::default()
        }
    }

    /// What the sink does at equal logits: a query that sees `n` keys gives the sink
    /// `e^s / (e^s + n)` of its weight and each key `1 / (e^s + n)` instead of `1 / n`,
    /// shown as `ln(n / (e^s + n))`, the log of the share every key keeps (−∞ on keys a
    /// causal query does not see).
    fn table(&self, len: usize) -> Result<Table> {
        let logits = self.logits.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        let mut values = Vec::with_capacity(logits.len() * len * len);
        for s in &logits {
            for i in 0..len {
                let n = match self.direction {
                    Direction::Causal => i + 1,
                    Direction::Bidirectional => len,
                } as f64;
                let kept = (n / (s.exp() + n)).ln() as f32;
                values.extend((0..len).map(|j| match j < n as usize {
                    true => kept,
                    false => f32::NEG_INFINITY,
                }));
            }
        }
        let bias = Tensor::from_vec(values, (logits.len(), len, len), self.logits.device())?;
        Ok(Table::bias(
            "ln(n / (e^s + n)): the log of the share of weight the n keys a query sees keep \
             beside the sink, at equal logits",
            bias,
        ))
    }
}
