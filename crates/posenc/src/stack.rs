//! `stack`: several encodings in the same layers, each through its own hooks.
//!
//! The seam's hooks compose: additions add up, rotations apply one after another, biases
//! add up, decays multiply their gates, a bias read from the scores reads the same logits,
//! and sinks weigh together. So an
//! attention option that is not a position by itself goes beside the one that is:
//!
//! ```text
//! RoPE with Scalable-Softmax (Nakanishi 2025):   {"kind": "stack", "of": ["rope", "ssmax"]}
//! ```
//!
//! Entry `i` is built under `encoding.i` (its weights, if it learns any, its own). A stack
//! holds encodings of single layers: a per-layer pattern (`layers`) may hold a stack, not
//! the other way round. Asked for a table, a stack gives its entries' in turn.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{
    BiasContext, Capabilities, EmbedContext, FromInput, InputContext, PositionalEncoding,
    RotateContext, ScoreContext, Table,
};
use crate::layers;
use crate::{EncodingConfig, EncodingSpec, Result, Target};

/// The settings of `stack`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StackConfig {
    /// The encodings, applied in this order: kind names (`"rope"`) or configs.
    #[serde(
        default = "StackConfig::default_of",
        deserialize_with = "layers::kinds_or_configs"
    )]
    pub of: Vec<EncodingConfig>,
}

impl Default for StackConfig {
    fn default() -> Self {
        Self {
            of: Self::default_of(),
        }
    }
}

impl StackConfig {
    fn default_of() -> Vec<EncodingConfig> {
        layers::built_in(&["rope", "ssmax"])
    }

    fn check(&self) -> Result<()> {
        layers::check_list(
            Self::KIND,
            &self.of,
            &[Self::KIND, layers::LayersConfig::KIND],
            "encodings of single layers, not another `stack` or a per-layer `layers`",
        )
    }
}

impl EncodingSpec for StackConfig {
    const KIND: &'static str = "stack";

    fn for_positions(&self, positions: usize) -> Option<Self> {
        Some(Self {
            of: self.of.iter().map(|e| e.for_positions(positions)).collect(),
        })
    }

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        self.check()?;
        let of = layers::build_list(&self.of, target, &vb)?;
        Ok(Arc::new(Stack { of }))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        self.of.iter().map(|e| e.parameter_count(target)).sum()
    }
}

/// Encodings acting together in every layer: the one place where hooks compose.
#[derive(Debug)]
pub struct Stack {
    of: Vec<Arc<dyn PositionalEncoding>>,
}

impl Stack {
    /// Encodings acting together, applied in this order.
    pub fn new(of: Vec<Arc<dyn PositionalEncoding>>) -> Self {
        Self { of }
    }

    /// The sum of `bias` over the entries, where they give one.
    fn sum(
        &self,
        bias: impl Fn(&Arc<dyn PositionalEncoding>) -> Result<Option<Tensor>>,
    ) -> Result<Option<Tensor>> {
        let mut total: Option<Tensor> = None;
        for b in self.of.iter().map(bias) {
            if let Some(b) = b? {
                total = Some(match total {
                    Some(t) => t.broadcast_add(&b)?,
                    None => b,
                });
            }
        }
        Ok(total)
    }

    /// `x` through each entry's `turn` in order.
    fn fold(
        &self,
        x: &Tensor,
        turn: impl Fn(&Arc<dyn PositionalEncoding>, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        self.of.iter().try_fold(x.clone(), |x, e| turn(e, &x))
    }

    /// The table of entry `i`, titled with its place in the stack.
    fn entry_table(&self, i: usize, len: usize) -> Result<Table> {
        let e = &self.of[i];
        let mut table = e.table(len)?;
        table.title = format!("{} (entry {i} of the stack): {}", e.kind(), table.title);
        Ok(table)
    }
}

impl PositionalEncoding for Stack {
    fn kind(&self) -> &'static str {
        StackConfig::KIND
    }

    /// What any entry does; where an entry gives each layer its own (FoX's gates), a
    /// pattern of stacks, each of the entries' encodings for its layer.
    fn capabilities(&self) -> Capabilities {
        let caps: Vec<Capabilities> = self.of.iter().map(|e| e.capabilities()).collect();
        let mut all = Capabilities::all(&caps);
        let period = (caps.iter().map(|c| c.per_layer.len()))
            .filter(|&n| n > 0)
            .fold(1, lcm);
        if caps.iter().any(|c| !c.per_layer.is_empty()) {
            all.per_layer = (0..period)
                .map(|i| {
                    let of = self.of.iter().map(|e| crate::for_layer(e, i)).collect();
                    Arc::new(Stack { of }) as Arc<dyn PositionalEncoding>
                })
                .collect();
        }
        all
    }

    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> Result<Tensor> {
        self.fold(x, |e, x| e.embed(x, cx))
    }

    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        self.fold(x, |e, x| e.rotate(x, cx))
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        self.sum(|e| e.bias(cx))
    }

    /// What the entries read, together ([`FromInput::and`]): decays add, and at most one
    /// entry turns the keys.
    fn read_input(&self, cx: &InputContext) -> Result<FromInput> {
        (self.of.iter()).try_fold(FromInput::default(), |all, e| all.and(e.read_input(cx)?))
    }

    /// Each entry's bias from the same logits, added up.
    fn score_bias(&self, cx: &ScoreContext) -> Result<Option<Tensor>> {
        self.sum(|e| e.score_bias(cx))
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.entry_table(0, len)
    }

    /// One table per entry, each titled with its place in the stack.
    fn tables(&self, len: usize) -> Result<Vec<Table>> {
        (0..self.of.len())
            .map(|i| self.entry_table(i, len))
            .collect()
    }
}

/// The least common multiple of two pattern lengths.
fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b > 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}
