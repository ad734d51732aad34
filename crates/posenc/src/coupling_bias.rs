//! `coupling-bias`: position coupling as a relative bias (the relative variant in the
//! repository of Cho et al. 2024, "Position Coupling: Improving Length Generalization of
//! Arithmetic Transformers Using Task Structure": `coupled_relative_bias`).
//!
//! ```text
//! id(t)         = a digit's significance, as in `coupling` (the operators beside the units)
//! bucket(i, j)  = clip(id(i) − id(j) + ⌊B/2⌋, 0, B − 1)       query i, key j, B buckets
//! bias(h, i, j) = W[bucket(i, j), h],   W ∈ R^(B × heads), learned
//! ```
//!
//! The ids are [`coupling`](crate::coupling)'s, read from the tokens, but they enter the
//! attention rather than the embeddings: each head learns one scalar per difference of
//! significance, `−⌊B/2⌋ … B − 1 − ⌊B/2⌋`, the further ones clipped to the ends. A query
//! finds the digits one place on ("the next significance") by the same bucket at any
//! length, so no table of rows runs out and no offset needs drawing. In the repository's
//! own orientation (operands written most significant digit first, their ids falling with
//! significance) the difference is `key − query`; written least significant digit first,
//! as here, the ids rise and the same bucket is `query − key`
//! (`scripts/make_coupling_fixtures.py` writes the repository's buckets, and
//! `crates/posenc/tests/coupling.rs` checks them). The repository's default is 7 buckets;
//! its layers each hold a table, and here the stack's layers share one, as `t5`'s do.
//!
//! The ids are read from the tokens ([`crate::Capabilities::reads_tokens`]), so its
//! [`bias`](PositionalEncoding::bias) refuses to act without them; the bias
//! differs between the sequences of a batch, so attention takes its composite path.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Embedding, Module, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{Form, Index, PositionalEncoding, Table, Tokens};
use crate::{BiasContext, Capabilities};
use crate::{EncodingSpec, Error, Result, Target};

/// The settings of `coupling-bias`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CouplingBiasConfig {
    /// The digits' token ids, `[first, last]`, inclusive (default `[4, 13]`, the digits of
    /// `posenc lengthgen`'s vocabulary).
    #[serde(default = "CouplingBiasConfig::default_digits")]
    pub digits: [u32; 2],
    /// Buckets of the difference of significance (default 7, the repository's): the
    /// differences `−⌊B/2⌋ … B − 1 − ⌊B/2⌋` each have one, the further ones share the ends.
    #[serde(default = "CouplingBiasConfig::default_buckets")]
    pub buckets: usize,
}

impl CouplingBiasConfig {
    fn default_digits() -> [u32; 2] {
        [4, 13]
    }
    fn default_buckets() -> usize {
        7
    }
}

impl EncodingSpec for CouplingBiasConfig {
    const KIND: &'static str = "coupling-bias";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(CouplingBias::new(self, target.heads, vb)?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        self.buckets as u128 * target.heads as u128
    }
}

/// The bucket of a query of significance `query` against a key of significance `key`, of
/// `buckets` ([`CouplingBias`]): `clip(query − key + ⌊B/2⌋, 0, B − 1)`.
pub fn bucket(query: u32, key: u32, buckets: usize) -> usize {
    let centre = (buckets / 2) as i64;
    (query as i64 - key as i64 + centre).clamp(0, buckets as i64 - 1) as usize
}

/// Position coupling's relative bias: `relative_attention_bias.weight: (buckets, heads)`.
#[derive(Debug)]
pub struct CouplingBias {
    embedding: Embedding,
    digits: [u32; 2],
    buckets: usize,
    device: Device,
}

impl CouplingBias {
    /// Loads or creates the bucket table `relative_attention_bias.weight` under `vb`.
    ///
    /// # Errors
    /// Zero heads or buckets, or more than the limits allow; digits whose first id is past
    /// their last.
    pub fn new(cfg: &CouplingBiasConfig, heads: usize, vb: VarBuilder) -> Result<Self> {
        let kind = CouplingBiasConfig::KIND;
        for (value, what) in [(heads, "heads"), (cfg.buckets, "buckets")] {
            if value == 0 {
                return Err(Error::Zero { kind, what });
            }
        }
        crate::limits::check("buckets", cfg.buckets, crate::limits::MAX_POSITIONS)?;
        let [first, last] = cfg.digits;
        if first > last {
            return Err(Error::Config(format!(
                "{kind} digits [{first}, {last}]: the first id is past the last"
            )));
        }
        let device = vb.device().clone();
        let embedding = candle_nn::embedding(cfg.buckets, heads, vb.pp("relative_attention_bias"))?;
        Ok(Self {
            embedding,
            digits: cfg.digits,
            buckets: cfg.buckets,
            device,
        })
    }

    /// The bias `(batch, heads, q, k)` of buckets `(batch, q, k)`.
    fn lookup(&self, buckets: &Tensor) -> Result<Tensor> {
        let bias = self.embedding.forward(buckets)?.permute((0, 3, 1, 2))?;
        Ok(bias.to_dtype(DType::F32)?.contiguous()?)
    }
}

impl PositionalEncoding for CouplingBias {
    fn kind(&self) -> &'static str {
        CouplingBiasConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            biases: true,
            reads_tokens: true,
            ..Capabilities::default()
        }
    }

    /// `W[bucket(i, j), h]` for the last `q_len` tokens of `cx.tokens` against all `k_len`,
    /// `(batch, heads, q_len, k_len)`.
    ///
    /// # Errors
    /// No tokens: without them there are no significances.
    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        let (q_len, k_len) = (cx.q_len, cx.k_len);
        let Some(tokens) = cx.tokens else {
            return Err(Error::Config(format!(
                "{} reads each digit's significance from the tokens: it acts only where \
                 attention is given them, which packed encoding and a rolling cache are not",
                CouplingBiasConfig::KIND
            )));
        };
        let kind = CouplingBiasConfig::KIND;
        let all = match tokens.before {
            Some(before) => Tensor::cat(&[before, tokens.ids], 1)?,
            None => tokens.ids.clone(),
        };
        let (batch, len) = match *all.dims() {
            [b, l] => (b, l),
            _ => {
                return Err(Error::Shape {
                    kind,
                    msg: format!("token ids must be (batch, seq), got {:?}", all.dims()),
                })
            }
        };
        if len != k_len || q_len > k_len || tokens.ids.dim(1)? != q_len {
            return Err(Error::Shape {
                kind,
                msg: format!(
                    "{q_len} queries against {k_len} keys, given {} new tokens after {}",
                    tokens.ids.dim(1)?,
                    len - tokens.ids.dim(1)?
                ),
            });
        }
        let ids = crate::abacus::places(kind, self.digits, Tokens::new(&all))?;
        let mut buckets = Vec::with_capacity(batch * q_len * k_len);
        for row in ids.chunks(k_len.max(1)).take(batch) {
            for &query in &row[k_len - q_len..] {
                buckets.extend(
                    row.iter()
                        .map(|&key| bucket(query, key, self.buckets) as u32),
                );
            }
        }
        let buckets = Tensor::from_vec(buckets, (batch, q_len, k_len), &self.device)?;
        Ok(Some(self.lookup(&buckets)?))
    }

    /// The bias among a run of `len` digits (significances 1 to `len`), for inspection.
    fn table(&self, len: usize) -> Result<Table> {
        crate::limits::check_table_len(len)?;
        let ids: Vec<u32> = (1..=len as u32).collect();
        let values: Vec<u32> = ids
            .iter()
            .flat_map(|&q| ids.iter().map(move |&k| bucket(q, k, self.buckets) as u32))
            .collect();
        let buckets = Tensor::from_vec(values, (1, len, len), &self.device)?;
        let bias = self.lookup(&buckets)?.squeeze(0)?;
        Ok(Table {
            title: "bias(query, key) = b_h[clip(id(query) − id(key) + ⌊B/2⌋)], learned \
                    (id: a digit's significance; here a run of digits)"
                .into(),
            form: Form::Bias {
                bias,
                index: Some(Index {
                    name: "bucket".into(),
                    values: buckets.squeeze(0)?,
                }),
            },
        })
    }
}
