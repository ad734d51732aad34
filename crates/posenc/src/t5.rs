//! `t5`: relative position buckets with a learned bias (Raffel et al. 2020, T5 §2.1).
//!
//! The offset `r = j − i` of key `j` from query `i` falls into one of `num_buckets`
//! buckets; each bucket has a learned scalar per head, added to the attention scores:
//!
//! ```text
//! bidirectional: B = num_buckets/2, bucket = B·[r > 0] + b(|r|)
//! unidirectional: B = num_buckets,  bucket = b(max(−r, 0))         (later keys share bucket 0)
//! b(n) = n                                             if n < B/2   (exact near the query)
//!      = min(B − 1, B/2 + ⌊ln(n/(B/2)) / ln(max_distance/(B/2)) · (B − B/2)⌋)   otherwise
//! ```
//!
//! Nearby offsets get their own buckets; far ones share logarithmically wider buckets,
//! and everything past `max_distance` shares the last. The arithmetic follows
//! Hugging Face's `T5Attention._relative_position_bucket` step by step, in f32 like it.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Embedding, Module, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cache::GeometryCache;
use crate::encoding::{require, Form, Index, PositionalEncoding, Table};
use crate::{BiasContext, Capabilities};
use crate::{Direction, EncodingSpec, Error, Positions, Result, Target};

/// The settings of `t5`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct T5Config {
    /// Number of buckets.
    #[serde(default = "T5Config::default_buckets")]
    pub num_buckets: usize,
    /// Offsets at or past this share the last bucket.
    #[serde(default = "T5Config::default_distance")]
    pub max_distance: usize,
    /// Distinguish keys before and after the query, or not. Unset: as T5 does, yes in an
    /// encoder and no in a decoder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidirectional: Option<bool>,
}

impl T5Config {
    fn default_buckets() -> usize {
        32
    }
    fn default_distance() -> usize {
        128
    }
}

impl EncodingSpec for T5Config {
    const KIND: &'static str = "t5";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let bidirectional = self
            .bidirectional
            .unwrap_or(target.direction == Direction::Bidirectional);
        Ok(Arc::new(T5Bias::new(
            target.heads,
            self.num_buckets,
            self.max_distance,
            bidirectional,
            vb,
        )?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        self.num_buckets as u128 * target.heads as u128
    }
}

/// The T5 bucket of relative position `relative = key − query`.
pub fn relative_position_bucket(
    relative: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> usize {
    let mut buckets = num_buckets as i64;
    let mut bucket = 0i64;
    let n = if bidirectional {
        buckets /= 2;
        if relative > 0 {
            bucket += buckets;
        }
        relative.abs()
    } else {
        (-relative).max(0)
    };
    let max_exact = buckets / 2;
    bucket += if n < max_exact {
        n
    } else {
        let scale =
            (n as f32 / max_exact as f32).ln() / (max_distance as f32 / max_exact as f32).ln();
        let large = max_exact + (scale * (buckets - max_exact) as f32) as i64;
        large.min(buckets - 1)
    };
    bucket as usize
}

/// T5 relative attention bias: `relative_attention_bias.weight: (num_buckets, heads)`.
#[derive(Debug)]
pub struct T5Bias {
    embedding: Embedding,
    num_buckets: usize,
    max_distance: usize,
    bidirectional: bool,
    device: Device,
    cache: GeometryCache,
}

impl T5Bias {
    /// Loads or creates the bucket table `relative_attention_bias.weight` under `vb`.
    pub fn new(
        heads: usize,
        num_buckets: usize,
        max_distance: usize,
        bidirectional: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        for (value, what) in [(heads, "heads"), (max_distance, "max_distance")] {
            if value == 0 {
                return Err(Error::Zero {
                    kind: T5Config::KIND,
                    what,
                });
            }
        }
        crate::limits::check("num_buckets", num_buckets, crate::limits::MAX_POSITIONS)?;
        let exact = if bidirectional {
            num_buckets / 4
        } else {
            num_buckets / 2
        };
        require(
            T5Config::KIND,
            exact > 0 && max_distance > exact,
            format!(
                "num_buckets ≥ {} and max_distance > {exact} (got num_buckets = {num_buckets}, max_distance = {max_distance})",
                if bidirectional { 4 } else { 2 }
            ),
        )?;
        let device = vb.device().clone();
        let embedding = candle_nn::embedding(num_buckets, heads, vb.pp("relative_attention_bias"))?;
        Ok(Self {
            embedding,
            num_buckets,
            max_distance,
            bidirectional,
            device,
            cache: GeometryCache::default(),
        })
    }

    /// Whether keys after the query have buckets of their own.
    pub fn bidirectional(&self) -> bool {
        self.bidirectional
    }

    /// The `(q_len, k_len)` u32 bucket of each pair of `q_len` queries at `q` and `k_len`
    /// keys at `k`.
    pub fn buckets(
        &self,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Tensor> {
        self.cache.get(T5Config::KIND, (q_len, k_len), (q, k), || {
            self.compute_buckets(q_len, k_len, q, k)
        })
    }

    fn compute_buckets(
        &self,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Tensor> {
        let mut ids = Vec::with_capacity(q_len * k_len);
        for qi in 0..q_len {
            for kj in 0..k_len {
                let relative = k.get(kj) as i64 - q.get(qi) as i64;
                let b = relative_position_bucket(
                    relative,
                    self.bidirectional,
                    self.num_buckets,
                    self.max_distance,
                );
                ids.push(b as u32);
            }
        }
        Ok(Tensor::from_vec(ids, (q_len, k_len), &self.device)?)
    }

    fn lookup(&self, buckets: &Tensor) -> Result<Tensor> {
        // (q, k) -> (q, k, heads) -> (heads, q, k)
        let bias = self.embedding.forward(buckets)?.permute((2, 0, 1))?;
        Ok(bias.to_dtype(DType::F32)?.contiguous()?)
    }
}

impl PositionalEncoding for T5Bias {
    fn kind(&self) -> &'static str {
        T5Config::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            biases: true,
            ..Capabilities::default()
        }
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        let buckets = self.buckets(cx.q_len, cx.k_len, cx.q, cx.k)?;
        Ok(Some(self.lookup(&buckets)?))
    }

    fn table(&self, len: usize) -> Result<Table> {
        let buckets = self.buckets(len, len, 0.into(), 0.into())?;
        let bias = self.lookup(&buckets)?;
        Ok(Table {
            title: "bias(query, key) = b_h[bucket(key − query)], learned".into(),
            form: Form::Bias {
                bias,
                index: Some(Index {
                    name: "bucket".into(),
                    values: buckets,
                }),
            },
        })
    }
}
