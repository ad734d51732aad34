//! `sinusoidal` and `sinusoidal-concat`: the fixed encoding of "Attention Is All You Need".
//!
//! Vaswani et al. 2017, §3.5:
//!
//! ```text
//! PE(pos, 2i)   = sin(pos / base^(2i/d_model))
//! PE(pos, 2i+1) = cos(pos / base^(2i/d_model))        base = 10000
//! ```
//!
//! Each pair of dimensions is a point on a circle turning at its own frequency, so
//! `PE(pos + k)` is `PE(pos)` rotated by a fixed, block-diagonal matrix `M_k`: a shift is
//! a linear map, whatever the position. Values stay in [−1, 1] and no two positions share
//! a vector. The table depends on the position only, never on the sentence's length.
//!
//! `sinusoidal-concat` uses the same frequencies laid out `[sin … | cos …]` rather than
//! interleaved: the layout of tensor2tensor, fairseq and Hugging Face's Marian models,
//! and so the one real checkpoints expect.

use std::sync::Arc;

use candle_core::Device;
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cache::GrowingTables;
use crate::encoding::{
    add_table, check_base, check_embeddings, check_even, inverse_frequencies, tensor_from_fn,
    PositionalEncoding, Table,
};
use crate::{Capabilities, EmbedContext};
use crate::{EncodingSpec, PairLayout, Positions, Result, Target};

fn ten_thousand() -> f64 {
    10_000.0
}

/// The settings of the two sinusoidal kinds, which differ in their layout only.
macro_rules! sinusoidal_settings {
    ($($name:ident = $kind:literal => $layout:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The wavelength base, 10000 in the paper.
            #[serde(default = "ten_thousand")]
            pub base: f64,
        }

        impl EncodingSpec for $name {
            const KIND: &'static str = $kind;

            fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
                let layout = PairLayout::$layout;
                Ok(Arc::new(Sinusoidal::new(target.d_model, self.base, layout, vb.device())?))
            }
        }
    )*};
}

sinusoidal_settings! {
    SinusoidalConfig = "sinusoidal" => Interleaved,
        "The settings of `sinusoidal`: the paper's interleaved layout.";
    SinusoidalConcatConfig = "sinusoidal-concat" => Halves,
        "The settings of `sinusoidal-concat`: the same sinusoids laid out `[sin | cos]`.";
}

/// The fixed sinusoidal encoding, in either layout. Its table grows on demand.
#[derive(Debug)]
pub struct Sinusoidal {
    d_model: usize,
    layout: PairLayout,
    inv_freq: Vec<f64>,
    device: Device,
    cache: GrowingTables,
}

impl Sinusoidal {
    /// A sinusoidal encoding of width `d_model` (even) with the given base (10000 in the paper).
    pub fn new(d_model: usize, base: f64, layout: PairLayout, device: &Device) -> Result<Self> {
        let kind = kind_of(layout);
        check_even(kind, d_model, "d_model")?;
        check_base(kind, base)?;
        Ok(Self {
            d_model,
            layout,
            inv_freq: inverse_frequencies(d_model, base),
            device: device.clone(),
            cache: GrowingTables::default(),
        })
    }

    /// `PE(pos, ·)` for the `len` positions `at`, as an f32 `(len, d_model)` tensor.
    pub fn rows(&self, at: Positions, len: usize) -> Result<candle_core::Tensor> {
        at.check(self.kind(), len)?;
        let mut tables = self.cache.rows(at, len, |n| {
            let t = tensor_from_fn(n, self.d_model, &self.device, |pos, j| {
                let (i, is_cos) = self.member(j);
                let angle = pos as f64 * self.inv_freq[i];
                if is_cos {
                    angle.cos()
                } else {
                    angle.sin()
                }
            })?;
            Ok(vec![t])
        })?;
        Ok(tables.remove(0))
    }

    /// Which frequency index dimension `j` carries, and whether it is the cosine.
    fn member(&self, j: usize) -> (usize, bool) {
        match self.layout {
            PairLayout::Interleaved => (j / 2, j % 2 == 1),
            PairLayout::Halves => (j % (self.d_model / 2), j >= self.d_model / 2),
        }
    }
}

fn kind_of(layout: PairLayout) -> &'static str {
    match layout {
        PairLayout::Interleaved => SinusoidalConfig::KIND,
        PairLayout::Halves => SinusoidalConcatConfig::KIND,
    }
}

impl PositionalEncoding for Sinusoidal {
    fn kind(&self) -> &'static str {
        kind_of(self.layout)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            adds: true,
            ..Capabilities::default()
        }
    }

    fn embed(&self, x: &candle_core::Tensor, cx: &EmbedContext) -> Result<candle_core::Tensor> {
        let seq = check_embeddings(self.kind(), x, self.d_model)?;
        add_table(x, &self.rows(cx.at, seq)?)
    }

    fn table(&self, len: usize) -> Result<Table> {
        let pairs = (0..self.d_model / 2)
            .map(|i| match self.layout {
                PairLayout::Interleaved => (2 * i, 2 * i + 1),
                PairLayout::Halves => (i, i + self.d_model / 2),
            })
            .collect();
        Ok(Table::additive(
            "PE(pos, i): sin and cos of pos / base^(2i/d)",
            self.rows(Positions::From(0), len)?,
            pairs,
        ))
    }
}
