//! `layers`: a different encoding for each layer of a stack, as a repeating pattern.
//!
//! Layer `i` of a stack takes entry `i mod n` of the pattern `[e₀, …, eₙ₋₁]`, and that
//! entry acts on its layer alone: it adds to the layer's input, rotates the layer's queries
//! and keys and biases its scores. The first layer's input is the embeddings, so `e₀`'s
//! addition is the usual `Embed(x)·√d_model + PE`; an additive entry at a later layer adds
//! to the residual stream there, as the Universal Transformer's per-step timing signal does.
//!
//! ```text
//! Llama 4's iRoPE (every fourth layer without position):  {"kind": "layers", "pattern": ["rope", "rope", "rope", "none"]}
//! SmolLM3's no_rope_layers [1, 1, 1, 0, …]:              the same, or the list written out, one entry per layer
//! ```
//!
//! The default pattern, `["rope", "none"]`, alternates rotary and position-free layers, so a
//! stack of two layers already has both. Each entry is one encoding, built under
//! `encoding.N` (its weights, if it learns any, shared by the layers it serves): to give
//! every layer weights of its own, write one entry per layer. A stack asks for its layers'
//! encodings with [`PositionalEncoding::layer`]; asked directly, as the inspection commands
//! do, the pattern answers as its first entry.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Deserializer, Serialize};

use crate::encoding::{require, Decay, PositionalEncoding, Table, Tokens};
use crate::{EncodingConfig, EncodingSpec, Positions, Result, Target};

/// The settings of `layers`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayersConfig {
    /// The encodings of layers `0, 1, …`, repeated over the stack: kind names (`"rope"`)
    /// or configs (`{"kind": "rope", "base": 500000}`).
    #[serde(
        default = "LayersConfig::default_pattern",
        deserialize_with = "kinds_or_configs"
    )]
    pub pattern: Vec<EncodingConfig>,
}

impl Default for LayersConfig {
    fn default() -> Self {
        Self {
            pattern: Self::default_pattern(),
        }
    }
}

impl LayersConfig {
    fn default_pattern() -> Vec<EncodingConfig> {
        built_in(&["rope", "none"])
    }

    fn check(&self) -> Result<()> {
        check_list(
            Self::KIND,
            &self.pattern,
            &[Self::KIND],
            "encodings of single layers in its pattern, not another `layers`",
        )
    }
}

/// The configs of built-in kinds, by name.
pub(crate) fn built_in(kinds: &[&str]) -> Vec<EncodingConfig> {
    kinds
        .iter()
        .map(|k| EncodingConfig::from_kind(k).expect("a built-in kind"))
        .collect()
}

/// Checks a list of encodings that `kind` combines: not empty, not too long, and none of
/// the kinds in `refused` (`why` says why).
pub(crate) fn check_list(
    kind: &str,
    list: &[EncodingConfig],
    refused: &[&str],
    why: &str,
) -> Result<()> {
    require(kind, !list.is_empty(), "at least one encoding in its list")?;
    crate::limits::check(
        "the list of encodings",
        list.len(),
        crate::limits::MAX_HEADS,
    )?;
    require(kind, list.iter().all(|e| !refused.contains(&e.kind())), why)
}

/// Each entry of `list` built for `target`, entry `i` under `vb`'s `i`.
pub(crate) fn build_list(
    list: &[EncodingConfig],
    target: &Target,
    vb: &VarBuilder,
) -> Result<Vec<Arc<dyn PositionalEncoding>>> {
    list.iter()
        .enumerate()
        .map(|(i, e)| e.build(target, vb.pp(i.to_string())))
        .collect()
}

/// Entries written as kind names or as config objects.
pub(crate) fn kinds_or_configs<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Vec<EncodingConfig>, D::Error> {
    let values = Vec::<serde_json::Value>::deserialize(deserializer)?;
    values
        .into_iter()
        .map(|value| match value {
            serde_json::Value::String(kind) => EncodingConfig::from_kind(&kind),
            other => serde_json::from_value(other).map_err(|e| crate::Error::Config(e.to_string())),
        })
        .collect::<Result<_>>()
        .map_err(serde::de::Error::custom)
}

impl EncodingSpec for LayersConfig {
    const KIND: &'static str = "layers";

    fn for_positions(&self, positions: usize) -> Option<Self> {
        Some(Self {
            pattern: self
                .pattern
                .iter()
                .map(|e| e.for_positions(positions))
                .collect(),
        })
    }

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        self.check()?;
        // Each entry is built once, for every layer it serves.
        let entry = Target {
            layers: None,
            ..*target
        };
        let pattern = build_list(&self.pattern, &entry, &vb)?;
        Ok(Arc::new(Layers { pattern }))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        let entry = Target {
            layers: None,
            ..*target
        };
        self.pattern.iter().map(|e| e.parameter_count(&entry)).sum()
    }
}

/// One encoding per layer, repeating.
#[derive(Debug)]
pub struct Layers {
    pattern: Vec<Arc<dyn PositionalEncoding>>,
}

impl Layers {
    fn first(&self) -> &Arc<dyn PositionalEncoding> {
        &self.pattern[0]
    }

    /// The table of the pattern's entry `index`, titled with its place in the pattern.
    fn layer_table(&self, index: usize, len: usize) -> Result<Table> {
        let mut table = self.pattern[index].table(len)?;
        let kinds: Vec<&str> = self.pattern.iter().map(|e| e.kind()).collect();
        let every = match self.pattern.len() {
            1 => "every layer".to_string(),
            n => format!("layers {index}, {}, {}, …", index + n, index + 2 * n),
        };
        table.title = format!(
            "{} in {every} (entry {index} of the pattern [{}]): {}",
            self.pattern[index].kind(),
            kinds.join(", "),
            table.title
        );
        Ok(table)
    }
}

impl PositionalEncoding for Layers {
    fn kind(&self) -> &'static str {
        LayersConfig::KIND
    }

    fn layer(&self, index: usize) -> Option<Arc<dyn PositionalEncoding>> {
        Some(self.pattern[index % self.pattern.len()].clone())
    }

    fn add_to_embeddings(&self, x: &Tensor, at: Positions) -> Result<Tensor> {
        self.first().add_to_embeddings(x, at)
    }

    fn add_to_embeddings_of(&self, x: &Tensor, tokens: Tokens, at: Positions) -> Result<Tensor> {
        self.first().add_to_embeddings_of(x, tokens, at)
    }

    fn reads_tokens(&self) -> bool {
        self.first().reads_tokens()
    }

    fn rotate(&self, x: &Tensor, at: Positions) -> Result<Tensor> {
        self.first().rotate(x, at)
    }

    fn rotate_keys(&self, x: &Tensor, at: Positions) -> Result<Tensor> {
        self.first().rotate_keys(x, at)
    }

    fn attention_bias(
        &self,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Option<Tensor>> {
        self.first().attention_bias(q_len, k_len, q, k)
    }

    fn attention_bias_of(
        &self,
        tokens: Tokens,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Option<Tensor>> {
        self.first().attention_bias_of(tokens, q_len, k_len, q, k)
    }

    fn reads_scores(&self) -> bool {
        self.first().reads_scores()
    }

    fn score_bias(&self, q: &Tensor, logits: &Tensor) -> Result<Option<Tensor>> {
        self.first().score_bias(q, logits)
    }

    fn decay(&self, x: &Tensor) -> Result<Option<Decay>> {
        self.first().decay(x)
    }

    /// The shortest end of any entry's.
    fn max_positions(&self) -> Option<usize> {
        self.pattern.iter().filter_map(|e| e.max_positions()).min()
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.layer_table(0, len)
    }

    /// One table per entry of the pattern, each titled with its layer.
    fn tables(&self, len: usize) -> Result<Vec<Table>> {
        (0..self.pattern.len())
            .map(|i| self.layer_table(i, len))
            .collect()
    }
}
