//! The encodings the documents consider and reject, kept so experiments can show why.
//!
//! ```text
//! fraction:     PE(pos, ·) = pos / (len − 1)             in [0, 1]; depends on the sentence length
//! index:        PE(pos, ·) = pos                         unbounded; swamps the embeddings
//! binary:       PE(pos, i) = +1 if bit i of pos is set, else −1     discrete jumps, no smooth shift
//! sine-single:  PE(pos, ·) = sin(ω · pos)                one frequency: positions collide
//! ```
//!
//! `fraction` gives the same word a different vector when the sentence grows (position 2
//! of 5 is 0.5, of 9 is 0.25), so a model cannot learn what "third word" means; the
//! raw `index` grows without bound; `binary` is unique and bounded but a shift by `k` is
//! not a linear map; one sine wave is bounded and smooth but periodic-ish, so distant
//! positions get nearly the same value. Every dimension carries the same value for
//! `fraction`, `index` and `sine-single`.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{
    add_table, check_embeddings, require, tensor_from_fn, PositionalEncoding, Table,
};
use crate::{Capabilities, EmbedContext};
use crate::{EncodingSpec, Error, Positions, Result, Target};

/// Settings of the naive encodings that have none: `fraction`, `index`, `binary`.
macro_rules! settingless {
    ($($name:ident = $kind:literal => $variant:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {}

        impl EncodingSpec for $name {
            const KIND: &'static str = $kind;

            fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
                Ok(Arc::new(Naive::new(NaiveKind::$variant, target.d_model, vb.device())?))
            }
        }
    )*};
}

settingless! {
    FractionConfig = "fraction" => Fraction, "The settings of `fraction`: none.";
    IndexConfig = "index" => Index, "The settings of `index`: none.";
    BinaryConfig = "binary" => Binary, "The settings of `binary`: none.";
}

fn one() -> f64 {
    1.0
}

/// The settings of `sine-single`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SineSingleConfig {
    /// Angular frequency ω of `sin(ω·pos)`.
    #[serde(default = "one")]
    pub frequency: f64,
}

impl EncodingSpec for SineSingleConfig {
    const KIND: &'static str = "sine-single";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let kind = NaiveKind::SineSingle {
            frequency: self.frequency,
        };
        Ok(Arc::new(Naive::new(kind, target.d_model, vb.device())?))
    }
}

/// Which rejected idea an [`Naive`] encoding implements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NaiveKind {
    /// `pos / (len − 1)`, with `len` the length of the sequence seen so far.
    Fraction,
    /// The raw integer position.
    Index,
    /// The bits of the position as ±1, least significant bit in dimension 0.
    Binary,
    /// `sin(frequency · pos)` in every dimension.
    SineSingle {
        /// Angular frequency ω.
        frequency: f64,
    },
}

impl NaiveKind {
    fn name(self) -> &'static str {
        match self {
            NaiveKind::Fraction => FractionConfig::KIND,
            NaiveKind::Index => IndexConfig::KIND,
            NaiveKind::Binary => BinaryConfig::KIND,
            NaiveKind::SineSingle { .. } => SineSingleConfig::KIND,
        }
    }

    /// The value at `(pos, dim)` for a sequence of `len` positions.
    pub fn value(self, pos: usize, dim: usize, len: usize) -> f64 {
        match self {
            NaiveKind::Fraction => pos as f64 / (len.max(2) - 1) as f64,
            NaiveKind::Index => pos as f64,
            NaiveKind::Binary => {
                let set = dim < usize::BITS as usize && (pos >> dim) & 1 == 1;
                if set {
                    1.0
                } else {
                    -1.0
                }
            }
            NaiveKind::SineSingle { frequency } => (frequency * pos as f64).sin(),
        }
    }
}

/// An additive encoding from one of the rejected formulas.
#[derive(Debug, Clone)]
pub struct Naive {
    kind: NaiveKind,
    d_model: usize,
    device: Device,
}

impl Naive {
    /// A naive encoding of width `d_model`.
    pub fn new(kind: NaiveKind, d_model: usize, device: &Device) -> Result<Self> {
        if d_model == 0 {
            return Err(Error::Zero {
                kind: kind.name(),
                what: "d_model",
            });
        }
        if let NaiveKind::SineSingle { frequency } = kind {
            require(
                kind.name(),
                frequency.is_finite() && frequency > 0.0,
                format!("a frequency > 0, got {frequency}"),
            )?;
        }
        Ok(Self {
            kind,
            d_model,
            device: device.clone(),
        })
    }

    /// The rows at the `len` positions `at`, of the table for a sequence that ends there.
    fn rows(&self, at: Positions, len: usize) -> Result<Tensor> {
        at.check(self.kind.name(), len)?;
        let total = at.end(len);
        tensor_from_fn(len, self.d_model, &self.device, |p, i| {
            self.kind.value(at.get(p), i, total)
        })
    }
}

impl PositionalEncoding for Naive {
    fn kind(&self) -> &'static str {
        self.kind.name()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            adds: true,
            ..Capabilities::default()
        }
    }

    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> Result<Tensor> {
        let seq = check_embeddings(self.kind.name(), x, self.d_model)?;
        add_table(x, &self.rows(cx.at, seq)?)
    }

    fn table(&self, len: usize) -> Result<Table> {
        let title = match self.kind {
            NaiveKind::Fraction => "PE(pos, ·) = pos / (len − 1)".to_string(),
            NaiveKind::Index => "PE(pos, ·) = pos".to_string(),
            NaiveKind::Binary => "PE(pos, i) = ±1 for bit i of pos".to_string(),
            NaiveKind::SineSingle { frequency } => format!("PE(pos, ·) = sin({frequency} · pos)"),
        };
        Ok(Table::additive(
            title,
            self.rows(Positions::From(0), len)?,
            Vec::new(),
        ))
    }
}
