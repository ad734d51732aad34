//! `ssmax`: Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for
//! Attention").
//!
//! Softmax over `n` keys flattens as `n` grows: the largest weight a query can give falls
//! towards 0, so attention fades past the lengths a model was trained on. SSMax multiplies
//! each query's logits by `s · ln n` before the softmax, `n` the number of keys that query
//! sees, with `s` learned per head:
//!
//! ```text
//! softmax(z)_j = e^(z_j) / Σ_k e^(z_k)      SSMax(z)_j = e^(s ln n · z_j) / Σ_k e^(s ln n · z_k)
//! ```
//!
//! It is a bias on the scores through the seam's `score_bias` hook: the logits read back,
//! `(s · ln n − 1) · z` added to every logit a query sees (masked keys keep their mask), `n`
//! counted from the mask itself, so causal, padded and cached attention all count the keys
//! they see. `s` starts at `1 / ln L` (`L` the model's trained context, 512 for an encoding
//! on its own), so at the trained length SSMax starts as softmax. It carries no position of
//! its own: alone it is NoPE with a length-aware temperature; `stack` puts it beside RoPE,
//! as the paper does. No reference implementation ships; the tests check it against the
//! formula in f64.

use std::sync::Arc;

use candle_core::{DType, Tensor, D};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, Form, PositionalEncoding, Table};
use crate::{Capabilities, ScoreContext};
use crate::{Direction, EncodingSpec, Result, Target};

/// The trained context the starting `s` uses where neither the settings nor the model give
/// one.
pub const DEFAULT_CONTEXT: usize = 512;

/// Logits at or below this are masked keys (attention masks them with the most negative
/// f32).
const MASKED: f64 = -1e30;

/// The settings of `ssmax`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SsmaxConfig {
    /// The starting `s` of every head: `1 / ln L` when unset, so that at the trained
    /// context `L` the logits start unscaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<f64>,
}

impl EncodingSpec for SsmaxConfig {
    const KIND: &'static str = "ssmax";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let context = target.context.unwrap_or(DEFAULT_CONTEXT);
        let s = match self.s {
            Some(s) => s,
            None => {
                require(
                    Self::KIND,
                    context >= 2,
                    format!("a trained context of 2 or more for s = 1 / ln L, got {context}"),
                )?;
                1.0 / (context as f64).ln()
            }
        };
        require(Self::KIND, s.is_finite(), format!("a finite s, got {s}"))?;
        Ok(Arc::new(Ssmax {
            s: vb.get_with_hints(target.heads, "s", Init::Const(s))?,
            direction: target.direction,
        }))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        target.heads as u128
    }
}

/// Each query's logits times `s · ln n`, `s` learned per head.
#[derive(Debug)]
pub struct Ssmax {
    /// `(heads)`.
    s: Tensor,
    direction: Direction,
}

impl Ssmax {
    /// `(s_h · ln n − 1) · z` on every seen logit of `logits: (batch, heads, q, k)`.
    fn of_logits(&self, logits: &Tensor) -> Result<Tensor> {
        let heads = logits.dim(1)?;
        let seen = logits.gt(MASKED)?.to_dtype(logits.dtype())?;
        let n = seen.sum_keepdim(D::Minus1)?.maximum(1.0)?;
        let s = self.s.to_dtype(logits.dtype())?.reshape((1, heads, 1, 1))?;
        let factor = (n.log()?.broadcast_mul(&s)? - 1.0)?;
        Ok(logits.broadcast_mul(&factor)?.mul(&seen)?)
    }
}

impl PositionalEncoding for Ssmax {
    fn kind(&self) -> &'static str {
        SsmaxConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reads_scores: true,
            ..Capabilities::default()
        }
    }

    /// `(s_h · ln n − 1) · z` on every logit `z` a query sees, 0 on masked ones; `n` is the
    /// number of keys the query sees (at least 1).
    fn score_bias(&self, cx: &ScoreContext) -> Result<Option<Tensor>> {
        Ok(Some(self.of_logits(cx.logits)?))
    }

    /// The bias for logits that are all 1 (causal where the model is): `s_h · ln n − 1` on
    /// every key a query sees.
    fn table(&self, len: usize) -> Result<Table> {
        let device = self.s.device();
        let heads = self.s.dim(0)?;
        let mut logits = Tensor::ones((1, heads, len, len), DType::F32, device)?;
        if self.direction == Direction::Causal {
            let later = Tensor::triu2(len, DType::U8, device)?
                .sub(&Tensor::eye(len, DType::U8, device)?)?
                .broadcast_as((1, heads, len, len))?;
            let min = Tensor::full(f32::MIN, (1, heads, len, len), device)?;
            logits = later.where_cond(&min, &logits)?;
        }
        let bias = self.of_logits(&logits)?.squeeze(0)?;
        Ok(Table {
            title: "bias = (s·ln n − 1) · logit, every logit 1: each query's logits times s·ln n, n the keys it sees"
                .into(),
            form: Form::Bias { bias, index: None },
        })
    }
}
