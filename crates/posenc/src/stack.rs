//! `stack`: several encodings in the same layers, each through its own hooks.
//!
//! The seam's four hooks compose: additions add up, rotations apply one after another,
//! score biases add up, and a bias read from the scores reads the same logits. So an
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
use serde::{Deserialize, Serialize};

use crate::encoding::{Decay, PositionalEncoding, Table, Tokens};
use crate::layers;
use crate::{EncodingConfig, EncodingSpec, Positions, Result, Target};

/// The settings of `stack`.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// Encodings acting together in every layer.
#[derive(Debug)]
pub struct Stack {
    of: Vec<Arc<dyn PositionalEncoding>>,
}

impl Stack {
    /// The sum of `bias` over the entries, where they give one.
    fn sum(
        &self,
        bias: impl Fn(&Arc<dyn PositionalEncoding>) -> Result<Option<Tensor>>,
    ) -> Result<Option<Tensor>> {
        sum(self.of.iter().map(bias).collect::<Result<_>>()?)
    }
}

/// The sum of the biases that are there, or `None` if none is.
fn sum(biases: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
    let mut total: Option<Tensor> = None;
    for b in biases.into_iter().flatten() {
        total = Some(match total {
            Some(t) => t.broadcast_add(&b)?,
            None => b,
        });
    }
    Ok(total)
}

impl PositionalEncoding for Stack {
    fn kind(&self) -> &'static str {
        StackConfig::KIND
    }

    fn add_to_embeddings(&self, x: &Tensor, at: Positions) -> Result<Tensor> {
        self.of
            .iter()
            .try_fold(x.clone(), |x, e| e.add_to_embeddings(&x, at))
    }

    fn add_to_embeddings_of(&self, x: &Tensor, tokens: Tokens, at: Positions) -> Result<Tensor> {
        self.of
            .iter()
            .try_fold(x.clone(), |x, e| e.add_to_embeddings_of(&x, tokens, at))
    }

    fn reads_tokens(&self) -> bool {
        self.of.iter().any(|e| e.reads_tokens())
    }

    fn rotate(&self, x: &Tensor, at: Positions) -> Result<Tensor> {
        self.of.iter().try_fold(x.clone(), |x, e| e.rotate(&x, at))
    }

    fn rotate_keys(&self, x: &Tensor, at: Positions) -> Result<Tensor> {
        self.of
            .iter()
            .try_fold(x.clone(), |x, e| e.rotate_keys(&x, at))
    }

    fn attention_bias(
        &self,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Option<Tensor>> {
        self.sum(|e| e.attention_bias(q_len, k_len, q, k))
    }

    fn attention_bias_of(
        &self,
        tokens: Tokens,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Option<Tensor>> {
        self.sum(|e| e.attention_bias_of(tokens, q_len, k_len, q, k))
    }

    fn reads_scores(&self) -> bool {
        self.of.iter().any(|e| e.reads_scores())
    }

    /// The narrowest entry's: each entry's bias masks the keys past its own.
    fn reach(&self) -> Option<usize> {
        self.of.iter().filter_map(|e| e.reach()).min()
    }

    /// Each entry's bias from the same logits, added up.
    fn score_bias(&self, q: &Tensor, logits: &Tensor) -> Result<Option<Tensor>> {
        self.sum(|e| e.score_bias(q, logits))
    }

    /// The entries' sinks as one: two keys of value zero with logits `a` and `b` weigh as
    /// one of logit `ln(e^a + e^b)`.
    fn sink_logits(&self) -> Result<Option<Tensor>> {
        let mut total: Option<Tensor> = None;
        for s in self.of.iter().map(|e| e.sink_logits()) {
            if let Some(s) = s? {
                total = Some(match total {
                    Some(t) => Tensor::stack(&[t, s], 0)?.log_sum_exp(0)?,
                    None => s,
                });
            }
        }
        Ok(total)
    }

    /// The entries' decays added up: their gates multiply.
    fn decay(&self, x: &Tensor) -> Result<Option<Decay>> {
        let mut total: Option<Decay> = None;
        for d in self.of.iter().map(|e| e.decay(x)) {
            if let Some(d) = d? {
                total = Some(match total {
                    Some(t) => t.add(&d)?,
                    None => d,
                });
            }
        }
        Ok(total)
    }

    /// For an entry that gives each layer its own (FoX's gates), a stack per layer of the
    /// entries' layer encodings, the others as they are.
    fn layer(&self, index: usize) -> Option<Arc<dyn PositionalEncoding>> {
        let own: Vec<_> = self.of.iter().map(|e| e.layer(index)).collect();
        if own.iter().all(Option::is_none) {
            return None;
        }
        let of = (own.into_iter().zip(&self.of))
            .map(|(layer, e)| layer.unwrap_or_else(|| e.clone()))
            .collect();
        Some(Arc::new(Stack { of }))
    }

    /// The shortest end of any entry's.
    fn max_positions(&self) -> Option<usize> {
        self.of.iter().filter_map(|e| e.max_positions()).min()
    }

    fn table(&self, len: usize) -> Result<Table> {
        let mut table = self.of[0].table(len)?;
        table.title = format!(
            "{} (entry 0 of the stack): {}",
            self.of[0].kind(),
            table.title
        );
        Ok(table)
    }

    /// One table per entry, each titled with its place in the stack.
    fn tables(&self, len: usize) -> Result<Vec<Table>> {
        self.of
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut table = e.table(len)?;
                table.title = format!("{} (entry {i} of the stack): {}", e.kind(), table.title);
                Ok(table)
            })
            .collect()
    }
}
