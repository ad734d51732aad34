//! The serde config that builds any encoding: `{"kind": "rope", "base": 10000.0, ...}`.

use std::str::FromStr;
use std::sync::Arc;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use serde::{Deserialize, Serialize};

use crate::alibi::{Alibi, AlibiForm};
use crate::learned::Learned;
use crate::naive::{Naive, NaiveKind};
use crate::none::NoEncoding;
use crate::rope::Rope;
use crate::sinusoidal::{PairLayout, Sinusoidal};
use crate::t5::T5Bias;
use crate::{Error, PositionalEncoding, Result};

fn ten_thousand() -> f64 {
    10_000.0
}
fn one() -> f64 {
    1.0
}
fn max_positions() -> usize {
    512
}
fn num_buckets() -> usize {
    32
}
fn max_distance() -> usize {
    128
}
fn yes() -> bool {
    true
}

/// Which positional encoding to build, and its settings. Every field has a default, so
/// `{"kind": "rope"}` is a complete config.
///
/// ```
/// use posenc::EncodingConfig;
/// let cfg: EncodingConfig = r#"{"kind": "rope", "layout": "interleaved"}"#.parse().unwrap();
/// assert_eq!(cfg.kind(), "rope");
/// assert!("warp-drive".parse::<EncodingConfig>().unwrap_err().to_string().contains("warp-drive"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum EncodingConfig {
    /// No position information.
    None,
    /// The paper's interleaved sinusoids.
    Sinusoidal {
        /// The wavelength base, 10000 in the paper.
        #[serde(default = "ten_thousand")]
        base: f64,
    },
    /// The same sinusoids laid out `[sin | cos]` (tensor2tensor, Marian).
    SinusoidalConcat {
        /// The wavelength base, 10000 in the paper.
        #[serde(default = "ten_thousand")]
        base: f64,
    },
    /// Learned absolute positions (BERT).
    Learned {
        /// Rows in the table: the longest sequence the model can take.
        #[serde(default = "max_positions")]
        max_positions: usize,
    },
    /// Rotary embeddings of queries and keys.
    Rope {
        /// The wavelength base, 10000 in RoFormer.
        #[serde(default = "ten_thousand")]
        base: f64,
        /// Half-split (Llama, NeoX) or interleaved (GPT-J, RoFormer) pairs.
        #[serde(default)]
        layout: PairLayout,
        /// The fraction of each head's dimensions that rotate.
        #[serde(default = "one")]
        rotary_fraction: f64,
    },
    /// Linear biases on the attention scores.
    Alibi {
        /// Symmetric `|i − j|` or causal `i − j`.
        #[serde(default)]
        form: AlibiForm,
    },
    /// T5 relative-position buckets with a learned bias.
    T5 {
        /// Number of buckets.
        #[serde(default = "num_buckets")]
        num_buckets: usize,
        /// Offsets at or past this share the last bucket.
        #[serde(default = "max_distance")]
        max_distance: usize,
        /// Distinguish keys before and after the query (encoders), or not (decoders).
        #[serde(default = "yes")]
        bidirectional: bool,
    },
    /// `pos / (len − 1)`.
    Fraction,
    /// The raw position.
    Index,
    /// The position's bits as ±1.
    Binary,
    /// One sine wave.
    SineSingle {
        /// Angular frequency ω of `sin(ω·pos)`.
        #[serde(default = "one")]
        frequency: f64,
    },
}

impl EncodingConfig {
    /// Every kind, in the order of the documents.
    pub const KINDS: &'static [&'static str] = &[
        "none",
        "sinusoidal",
        "sinusoidal-concat",
        "learned",
        "rope",
        "alibi",
        "t5",
        "fraction",
        "index",
        "binary",
        "sine-single",
    ];

    /// The default config of a kind, e.g. `EncodingConfig::from_kind("alibi")`.
    pub fn from_kind(kind: &str) -> Result<Self> {
        Self::from_json(serde_json::json!({ "kind": kind }))
    }

    fn from_json(value: serde_json::Value) -> Result<Self> {
        serde_json::from_value(value)
            .map_err(|e| Error::Config(format!("{e} (known kinds: {})", Self::KINDS.join(", "))))
    }

    /// The config's kind name, as written in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Sinusoidal { .. } => "sinusoidal",
            Self::SinusoidalConcat { .. } => "sinusoidal-concat",
            Self::Learned { .. } => "learned",
            Self::Rope { .. } => "rope",
            Self::Alibi { .. } => "alibi",
            Self::T5 { .. } => "t5",
            Self::Fraction => "fraction",
            Self::Index => "index",
            Self::Binary => "binary",
            Self::SineSingle { .. } => "sine-single",
        }
    }

    /// How many weights the encoding learns at width `d_model` with `heads` heads (0 for
    /// the fixed ones), from the config alone, so a size can be checked before allocating.
    pub fn parameter_count(&self, d_model: usize, heads: usize) -> u128 {
        match *self {
            Self::Learned { max_positions } => max_positions as u128 * d_model as u128,
            Self::T5 { num_buckets, .. } => num_buckets as u128 * heads as u128,
            _ => 0,
        }
    }

    /// Builds the encoding for a model of width `d_model` with `heads` attention heads.
    /// Learned encodings (`learned`, `t5`) take their weights from `vb`; the others only
    /// its device.
    pub fn build(
        &self,
        d_model: usize,
        heads: usize,
        vb: VarBuilder,
    ) -> Result<Arc<dyn PositionalEncoding>> {
        let kind = self.kind();
        if heads == 0 {
            return Err(Error::Zero {
                kind,
                what: "heads",
            });
        }
        if d_model == 0 {
            return Err(Error::Zero {
                kind,
                what: "d_model",
            });
        }
        crate::limits::check("heads", heads, crate::limits::MAX_HEADS)?;
        crate::limits::check("d_model", d_model, crate::limits::MAX_D_MODEL)?;
        let device = vb.device().clone();
        let naive = |k| -> Result<Arc<dyn PositionalEncoding>> {
            Ok(Arc::new(Naive::new(k, d_model, &device)?))
        };
        Ok(match *self {
            Self::None => Arc::new(NoEncoding::new(d_model, &device)),
            Self::Sinusoidal { base } => Arc::new(Sinusoidal::new(
                d_model,
                base,
                PairLayout::Interleaved,
                &device,
            )?),
            Self::SinusoidalConcat { base } => {
                Arc::new(Sinusoidal::new(d_model, base, PairLayout::Halves, &device)?)
            }
            Self::Learned { max_positions } => Arc::new(Learned::new(max_positions, d_model, vb)?),
            Self::Rope {
                base,
                layout,
                rotary_fraction,
            } => {
                if !d_model.is_multiple_of(heads) {
                    return Err(Error::HeadsDontDivide { d_model, heads });
                }
                Arc::new(Rope::new(
                    d_model / heads,
                    base,
                    layout,
                    rotary_fraction,
                    &device,
                )?)
            }
            Self::Alibi { form } => Arc::new(Alibi::new(heads, form, &device)?),
            Self::T5 {
                num_buckets,
                max_distance,
                bidirectional,
            } => Arc::new(T5Bias::new(
                heads,
                num_buckets,
                max_distance,
                bidirectional,
                vb,
            )?),
            Self::Fraction => naive(NaiveKind::Fraction)?,
            Self::Index => naive(NaiveKind::Index)?,
            Self::Binary => naive(NaiveKind::Binary)?,
            Self::SineSingle { frequency } => naive(NaiveKind::SineSingle { frequency })?,
        })
    }

    /// Builds the encoding with fresh (randomly initialised, untrained) weights where it
    /// has any: for inspection, tests and the command line.
    pub fn build_untrained(
        &self,
        d_model: usize,
        heads: usize,
        device: &Device,
    ) -> Result<Arc<dyn PositionalEncoding>> {
        let varmap = VarMap::new();
        self.build(
            d_model,
            heads,
            VarBuilder::from_varmap(&varmap, DType::F32, device),
        )
    }
}

impl FromStr for EncodingConfig {
    type Err = Error;

    /// A kind name (`"rope"`) or a JSON object (`{"kind": "rope", "base": 500000}`).
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.starts_with('{') {
            let value = serde_json::from_str(s).map_err(|e| Error::Config(e.to_string()))?;
            Self::from_json(value)
        } else {
            Self::from_kind(s)
        }
    }
}
