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
//! every layer weights of its own, write one entry per layer. The pattern is declared
//! ([`crate::Capabilities::per_layer`]), and acts through [`for_layer`], which a model asks
//! for each layer's encoding; its own hooks are the identity.

use std::sync::Arc;

use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::encoding::{require, Capabilities, PositionalEncoding, Table};
use crate::{EncodingConfig, EncodingSpec, Result, Target};

/// The settings of `layers`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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

    /// The pattern, and what its entries do together.
    fn capabilities(&self) -> Capabilities {
        let caps: Vec<Capabilities> = self.pattern.iter().map(|e| e.capabilities()).collect();
        Capabilities {
            per_layer: self.pattern.clone(),
            ..Capabilities::all(&caps)
        }
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

/// The encoding that layer `index` of a stack uses when the stack holds `encoding`: entry
/// `index mod n` of its per-layer pattern ([`Capabilities::per_layer`]), resolved again if
/// that entry has a pattern of its own, or `encoding` itself when it has none.
///
/// ```
/// use candle_core::Device;
/// use posenc::EncodingConfig;
///
/// # fn main() -> posenc::Result<()> {
/// let json = r#"{"kind": "layers", "pattern": ["rope", "none"]}"#;
/// let cfg: EncodingConfig = serde_json::from_str(json).expect("a pattern");
/// let irope = cfg.build_untrained(8, 2, &Device::Cpu)?;
/// assert_eq!(posenc::for_layer(&irope, 0).kind(), "rope");
/// assert_eq!(posenc::for_layer(&irope, 3).kind(), "none");
/// # Ok(()) }
/// ```
pub fn for_layer(
    encoding: &Arc<dyn PositionalEncoding>,
    index: usize,
) -> Arc<dyn PositionalEncoding> {
    let pattern = encoding.capabilities().per_layer;
    match pattern.len() {
        0 => encoding.clone(),
        n => for_layer(&pattern[index % n], index),
    }
}
