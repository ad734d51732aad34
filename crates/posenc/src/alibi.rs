//! `alibi`: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test Long").
//!
//! No vector is added anywhere; each head `h` penalises a score by its distance:
//!
//! ```text
//! causal:     bias_h(i, j) = −m_h · (i − j)   for j ≤ i   (later keys are left to the causal mask: 0)
//! symmetric:  bias_h(i, j) = −m_h · |i − j|                (for bidirectional encoders)
//! ```
//!
//! The paper defines only the causal form, for language models. The symmetric form for
//! encoders is not in it: it is what x-transformers' `AlibiPositionalBias` computes
//! (`−|j − i|`) and what MosaicBERT (Portes et al. 2023) trains with.
//!
//! The slopes form a geometric sequence. For `n` heads, a power of two, `m_h = 2^(−8h/n)`,
//! `h = 1 … n`. Otherwise the paper takes the `c = 2^⌊log₂ n⌋` slopes of `c` heads and
//! adds every other slope of `2c` heads, `2^(−8(2k−1)/(2c))` for `k = 1 … n − c`
//! (as BLOOM's `build_alibi_tensor` does). The bias depends on `i − j` only, decays
//! linearly, and needs no table, so it extrapolates to any length.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cache::GeometryCache;
use crate::encoding::{PositionalEncoding, Table};
use crate::{BiasContext, Capabilities};
use crate::{Direction, EncodingSpec, Error, Positions, Result, Target};

/// The settings of `alibi`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlibiConfig {
    /// Symmetric `|i − j|` or causal `i − j`. Unset: by the stack, symmetric in an encoder
    /// (x-transformers' and MosaicBERT's form) and causal in a decoder (the paper's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<AlibiForm>,
}

impl EncodingSpec for AlibiConfig {
    const KIND: &'static str = "alibi";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let form = self.form.unwrap_or(match target.direction {
            Direction::Bidirectional => AlibiForm::Symmetric,
            Direction::Causal => AlibiForm::Causal,
        });
        Ok(Arc::new(Alibi::new(target.heads, form, vb.device())?))
    }
}

/// Which keys ALiBi penalises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AlibiForm {
    /// `−m·|i − j|` for every key: encoders (and decoders, where the causal mask hides
    /// the keys on which the two forms differ).
    Symmetric,
    /// `−m·(i − j)` for keys at or before the query, 0 after (the paper's decoder form).
    Causal,
}

/// The ALiBi slope of each of `heads` heads, in head order (Press et al. 2022, §3).
pub fn alibi_slopes(heads: usize) -> Vec<f64> {
    if heads == 0 {
        return Vec::new();
    }
    let c = 1usize << heads.ilog2();
    let geometric = |n: usize, k: usize| 2f64.powf(-8.0 * k as f64 / n as f64);
    let mut slopes: Vec<f64> = (1..=c).map(|k| geometric(c, k)).collect();
    slopes.extend((0..heads - c).map(|k| geometric(2 * c, 2 * k + 1)));
    slopes
}

/// Linear attention biases, one slope per head.
#[derive(Debug)]
pub struct Alibi {
    slopes: Vec<f64>,
    form: AlibiForm,
    device: Device,
    cache: GeometryCache,
}

impl Alibi {
    /// ALiBi for `heads` heads (at least 1).
    pub fn new(heads: usize, form: AlibiForm, device: &Device) -> Result<Self> {
        if heads == 0 {
            return Err(Error::Zero {
                kind: AlibiConfig::KIND,
                what: "heads",
            });
        }
        Ok(Self {
            slopes: alibi_slopes(heads),
            form,
            device: device.clone(),
            cache: GeometryCache::default(),
        })
    }

    /// The slope of each head.
    pub fn slopes(&self) -> &[f64] {
        &self.slopes
    }

    /// The form of the bias.
    pub fn form(&self) -> AlibiForm {
        self.form
    }

    /// The `(heads, q_len, k_len)` bias of `q_len` queries at `q` against `k_len` keys at `k`.
    pub fn bias(&self, q_len: usize, k_len: usize, q: Positions, k: Positions) -> Result<Tensor> {
        self.cache
            .get(AlibiConfig::KIND, (q_len, k_len), (q, k), || {
                self.compute(q_len, k_len, q, k)
            })
    }

    fn compute(&self, q_len: usize, k_len: usize, q: Positions, k: Positions) -> Result<Tensor> {
        let mut data = Vec::with_capacity(self.slopes.len() * q_len * k_len);
        for &m in &self.slopes {
            for qi in 0..q_len {
                let i = q.get(qi) as f64;
                for kj in 0..k_len {
                    let j = k.get(kj) as f64;
                    let distance = match self.form {
                        AlibiForm::Symmetric => (i - j).abs(),
                        AlibiForm::Causal => (i - j).max(0.0),
                    };
                    data.push((-m * distance) as f32);
                }
            }
        }
        Ok(Tensor::from_vec(
            data,
            (self.slopes.len(), q_len, k_len),
            &self.device,
        )?)
    }
}

impl PositionalEncoding for Alibi {
    fn kind(&self) -> &'static str {
        AlibiConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            biases: true,
            ..Capabilities::default()
        }
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        Ok(Some(self.bias(cx.q_len, cx.k_len, cx.q, cx.k)?))
    }

    fn table(&self, len: usize) -> Result<Table> {
        let bias = self.bias(len, len, 0.into(), 0.into())?;
        Ok(Table::bias("bias(query, key) = −m_h · distance", bias))
    }
}
