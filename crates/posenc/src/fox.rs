//! `fox`: the Forgetting Transformer's forget gates (Lin, Nikishin, He & Courville, ICLR
//! 2025; x-transformers' `DataDependentAlibi`).
//!
//! Each head reads a forget gate from every token's input, `f_t = σ(w_hᵀ x_t + b_h)` in
//! (0, 1), and a key fades by the gates of the tokens that came after it:
//!
//! ```text
//! D_ij = Σ_{l=j+1..i} ln f_l  (≤ 0)        softmax(QKᵀ/√d_k + D + M)
//! ```
//!
//! With every gate equal this is ALiBi, a slope of `−ln f` per token; with gates read from
//! the data, a head forgets quickly across some tokens and slowly across others. No other
//! position is used. The bias reaches attention through the seam's
//! [`read_input`](PositionalEncoding::read_input) hook as a [`crate::Decay`] of log-gates;
//! attention sums them, and a key/value cache keeps each key's running sum, so generation
//! reads what one forward over the whole would.
//!
//! As in the paper, every layer has gates of its own: built for a stack of `n` layers
//! ([`Target::layers`]), `fox` holds `n` of them (weights `N.weight`, `N.bias`) and hands
//! layer `N` its own ([`crate::Capabilities::per_layer`]). In bidirectional attention each head
//! has a second gate for the keys after the query (x-transformers' form; the paper's models
//! are causal).
//!
//! The gates' bias starts at `bias_init` (5, as x-transformers': `f ≈ 0.993`, a slow fade),
//! their weights as PyTorch's `nn.Linear`, `U(±1/√d_model)`. The tests check attention with
//! these gates against x-transformers' `Attention(data_dependent_alibi = True)`, forward and
//! gradients.

use std::sync::Arc;

use candle_core::{DType, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, Decay, FromInput, PositionalEncoding, Table};
use crate::per_layer::{layer_count, PerLayer};
use crate::{Capabilities, InputContext};
use crate::{Direction, EncodingSpec, Result, Target};

/// The settings of `fox`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FoxConfig {
    /// The starting bias of every gate (5: `σ(5) ≈ 0.993`, keys fade slowly at first).
    #[serde(default = "FoxConfig::default_bias_init")]
    pub bias_init: f64,
    /// A factor on the log-gates (x-transformers' `post_log_scale`).
    #[serde(default = "FoxConfig::default_scale")]
    pub scale: f64,
}

impl Default for FoxConfig {
    fn default() -> Self {
        Self {
            bias_init: Self::default_bias_init(),
            scale: Self::default_scale(),
        }
    }
}

impl FoxConfig {
    fn default_bias_init() -> f64 {
        5.0
    }

    fn default_scale() -> f64 {
        1.0
    }

    /// Gates per head: one, or two in bidirectional attention.
    fn gates(target: &Target) -> usize {
        match target.direction {
            Direction::Causal => 1,
            Direction::Bidirectional => 2,
        }
    }
}

impl EncodingSpec for FoxConfig {
    const KIND: &'static str = "fox";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        require(
            Self::KIND,
            self.bias_init.is_finite(),
            format!("a finite bias_init, got {}", self.bias_init),
        )?;
        require(
            Self::KIND,
            self.scale.is_finite() && self.scale > 0.0,
            format!("a positive, finite scale, got {}", self.scale),
        )?;
        let rows = Self::gates(target) * target.heads;
        let bound = 1.0 / (target.d_model as f64).sqrt();
        let init = Init::Uniform {
            lo: -bound,
            up: bound,
        };
        let layers = PerLayer::build(target, &vb, |vb| {
            Ok(ForgetGates {
                weight: vb.get_with_hints((rows, target.d_model), "weight", init)?,
                bias: vb.get_with_hints(rows, "bias", Init::Const(self.bias_init))?,
                scale: self.scale,
                heads: target.heads,
                direction: target.direction,
            })
        })?;
        Ok(Arc::new(layers))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        let per_layer = (Self::gates(target) * target.heads * (target.d_model + 1)) as u128;
        per_layer * layer_count(target) as u128
    }
}

/// Forget gates for every layer of a stack; asked directly, it answers as the first
/// layer's.
pub type Fox = PerLayer<ForgetGates>;

/// One layer's forget gates: a linear map from the attention's input to a gate per head
/// (two in bidirectional attention).
#[derive(Debug)]
pub struct ForgetGates {
    /// `(gates · heads, d_model)`.
    weight: Tensor,
    /// `(gates · heads)`.
    bias: Tensor,
    scale: f64,
    heads: usize,
    direction: Direction,
}

impl ForgetGates {
    /// `ln σ(z) · scale` in f32, as `−relu(−z) − ln(1 + e^(−|z|))`, which neither
    /// overflows nor loses the small gates.
    fn log_gates(&self, z: &Tensor) -> Result<Tensor> {
        let z = z.to_dtype(DType::F32)?;
        let tail = (z.abs()?.neg()?.exp()? + 1.0)?.log()?;
        Ok(((z.neg()?.relu()?.neg()? - tail)? * self.scale)?)
    }

    /// The log-gate every head reads from a zero input, `ln σ(b_h) · scale`, first gates
    /// then second, in f64.
    fn resting(&self) -> Result<Vec<f64>> {
        let logs = self.log_gates(&self.bias)?.to_dtype(DType::F64)?;
        Ok(logs.to_vec1::<f64>()?)
    }
}

impl PositionalEncoding for ForgetGates {
    fn kind(&self) -> &'static str {
        FoxConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reads_input: true,
            ..Capabilities::default()
        }
    }

    /// # Shapes
    /// - `cx.input`: `(batch, seq, d_model)`
    /// - [`Decay::before`], [`Decay::after`]: `(batch, heads, seq)`
    fn read_input(&self, cx: &InputContext) -> Result<FromInput> {
        let x = cx.input;
        let w = self.weight.to_dtype(x.dtype())?;
        let z = x
            .broadcast_matmul(&w.t()?)?
            .broadcast_add(&self.bias.to_dtype(x.dtype())?)?;
        let gates = self.log_gates(&z)?.transpose(1, 2)?;
        let part = |i: usize| -> Result<Tensor> {
            Ok(gates.narrow(1, i * self.heads, self.heads)?.contiguous()?)
        };
        let decay = Decay {
            before: part(0)?,
            after: match self.direction {
                Direction::Causal => None,
                Direction::Bidirectional => Some(part(1)?),
            },
        };
        Ok(FromInput {
            decay: Some(decay),
            transforms: None,
        })
    }

    /// The bias on a zero input, where every gate of a head is `σ(b_h)`: ALiBi with a
    /// slope of `−ln σ(b_h)` per token (−∞ on keys a causal query does not see).
    fn table(&self, len: usize) -> Result<Table> {
        let resting = self.resting()?;
        let mut values = Vec::with_capacity(self.heads * len * len);
        for h in 0..self.heads {
            for i in 0..len {
                values.extend((0..len).map(|j| {
                    let value = match (j <= i, self.direction) {
                        (true, _) => (i - j) as f64 * resting[h],
                        (false, Direction::Bidirectional) => {
                            (j - i) as f64 * resting[self.heads + h]
                        }
                        (false, Direction::Causal) => f64::NEG_INFINITY,
                    };
                    value as f32
                }));
            }
        }
        let bias = Tensor::from_vec(values, (self.heads, len, len), self.weight.device())?;
        Ok(Table::bias(
            "Σ ln f over the tokens between query and key, on a zero input (f = σ(b_h)): \
             the decay the gates start from",
            bias,
        ))
    }
}
