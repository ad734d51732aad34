//! `alibi-2d`: ALiBi over a grid of patches, a head's slope times the Euclidean distance
//! between two patches (2D-ALiBi as CROMA uses it, Fuller et al. 2023; the slopes are
//! ALiBi's, Press et al. 2022).
//!
//! ```text
//! B[h, i, j] = −m_h · √((y_i − y_j)² + (x_i − x_j)²)        m_h = 2^(−8h/H), h = 1 … H
//! ```
//!
//! for a query patch at `(y_i, x_i)` and a key patch at `(y_j, x_j)` ([`Positions::Coords`]
//! with two axes): attention falls off with distance in every direction alike. One
//! position a token is a patch of row 0, so a sequence is ALiBi's symmetric form.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::alibi::alibi_slopes;
use crate::encoding::{require, Form, PositionalEncoding, Table};
use crate::{BiasContext, Capabilities, EncodingSpec, Positions, Result, Target};

/// The settings of `alibi-2d`: none, the slopes are ALiBi's for the model's heads.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Alibi2dConfig {}

impl EncodingSpec for Alibi2dConfig {
    const KIND: &'static str = "alibi-2d";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        require(Self::KIND, target.heads > 0, "at least one head")?;
        Ok(Arc::new(Alibi2d {
            slopes: alibi_slopes(target.heads),
            device: vb.device().clone(),
        }))
    }
}

/// A distance bias over rows and columns, one slope per head.
#[derive(Debug)]
pub struct Alibi2d {
    slopes: Vec<f64>,
    device: Device,
}

impl Alibi2d {
    /// The `(heads, q_len, k_len)` f32 bias of the queries against the keys `cx` places.
    ///
    /// # Errors
    /// Coordinates of another number of axes or tokens.
    pub fn bias_of(&self, cx: &BiasContext) -> Result<Tensor> {
        let kind = Alibi2dConfig::KIND;
        let (q, k) = (cx.q.patches(kind, cx.q_len)?, cx.k.patches(kind, cx.k_len)?);
        let mut out = Vec::with_capacity(self.slopes.len() * q.len() * k.len());
        for m in &self.slopes {
            for &(yi, xi) in &q {
                for &(yj, xj) in &k {
                    let (dy, dx) = (yi.abs_diff(yj) as f64, xi.abs_diff(xj) as f64);
                    out.push((-m * dy.hypot(dx)) as f32);
                }
            }
        }
        Ok(Tensor::from_vec(
            out,
            (self.slopes.len(), q.len(), k.len()),
            &self.device,
        )?)
    }
}

impl PositionalEncoding for Alibi2d {
    fn kind(&self) -> &'static str {
        Alibi2dConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            biases: true,
            coords: 2,
            ..Capabilities::default()
        }
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        Ok(Some(self.bias_of(cx)?))
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.table_at(Positions::From(0), len)
    }

    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        let bias = self.bias_of(&BiasContext::new(len, len, at, at))?;
        Ok(Table {
            title: "−m_h · the distance between query and key patch".into(),
            form: Form::Bias { bias, index: None },
        })
    }
}
