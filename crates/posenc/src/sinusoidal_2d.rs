//! `sinusoidal-2d`: the fixed 2-D sinusoids of MAE (He et al. 2022, "Masked Autoencoders Are
//! Scalable Vision Learners"; `get_2d_sincos_pos_embed`, as transformers' ViTMAE has it).
//!
//! A patch at row `y` and column `x` ([`Positions::Coords`] with two axes, `(y, x)` a
//! token) adds to its embedding a vector whose first half encodes the column and second half
//! the row, each as `[sin … | cos …]` of the 1-D sinusoid over `d/4` frequencies:
//!
//! ```text
//! ω_k = 1 / base^(k / (d/4)),   k = 0 … d/4 − 1                     base = 10000
//! PE(y, x) = [sin(x ω) | cos(x ω) | sin(y ω) | cos(y ω)]
//! ```
//!
//! (MAE names the first half `emb_h`, but fills it from the grid's first axis, `meshgrid`'s
//! columns; the order here is the one its code computes.) One position a token is a patch
//! of row 0 at that column: a sequence is one row.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{
    add_table, check_base, check_embeddings, require, tensor_from_fn, PositionalEncoding, Table,
};
use crate::{Capabilities, EmbedContext, EncodingSpec, Positions, Result, Target};

/// The settings of `sinusoidal-2d`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sinusoidal2dConfig {
    /// The wavelength base, MAE's 10000.
    #[serde(default = "Sinusoidal2dConfig::default_base")]
    pub base: f64,
}

impl Sinusoidal2dConfig {
    fn default_base() -> f64 {
        10_000.0
    }
}

impl EncodingSpec for Sinusoidal2dConfig {
    const KIND: &'static str = "sinusoidal-2d";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Sinusoidal2d::new(
            self.base,
            target.d_model,
            vb.device(),
        )?))
    }
}

/// MAE's fixed 2-D sinusoids, added to the embeddings.
#[derive(Debug)]
pub struct Sinusoidal2d {
    d_model: usize,
    /// `ω_k`, `d/4` of them.
    omega: Vec<f64>,
    device: Device,
}

impl Sinusoidal2d {
    /// The sinusoids for embeddings of width `d_model` (a multiple of 4).
    ///
    /// # Errors
    /// A width that is not a multiple of 4, or a base out of range.
    pub fn new(base: f64, d_model: usize, device: &Device) -> Result<Self> {
        let kind = Sinusoidal2dConfig::KIND;
        check_base(kind, base)?;
        require(
            kind,
            d_model.is_multiple_of(4) && d_model > 0,
            format!("a width that is a multiple of 4 (sin and cos of each axis), got {d_model}"),
        )?;
        let quarter = d_model / 4;
        let omega = (0..quarter)
            .map(|k| base.powf(-(k as f64) / quarter as f64))
            .collect();
        Ok(Self {
            d_model,
            omega,
            device: device.clone(),
        })
    }

    /// The `(len, d_model)` f32 rows of the `len` patches `at`: `(y, x)` each, or one
    /// position a token (row 0, that column).
    ///
    /// # Errors
    /// Coordinates of another number of axes or tokens; a list that is not one per token.
    pub fn rows(&self, at: Positions, len: usize) -> Result<Tensor> {
        let patches = at.patches(Sinusoidal2dConfig::KIND, len)?;
        let q = self.omega.len();
        tensor_from_fn(len, self.d_model, &self.device, |p, i| {
            let (y, x) = patches[p];
            // Quarters: sin of the column, cos of the column, sin of the row, cos of the row.
            let coord = if i < 2 * q { x } else { y } as f64;
            let angle = coord * self.omega[i % q];
            match (i / q) % 2 {
                0 => angle.sin(),
                _ => angle.cos(),
            }
        })
    }
}

impl PositionalEncoding for Sinusoidal2d {
    fn kind(&self) -> &'static str {
        Sinusoidal2dConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            adds: true,
            coords: 2,
            ..Capabilities::default()
        }
    }

    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> Result<Tensor> {
        let seq = check_embeddings(self.kind(), x, self.d_model)?;
        add_table(x, &self.rows(cx.at, seq)?)
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.table_at(Positions::From(0), len)
    }

    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        let q = self.omega.len();
        // Each sin with its cos: the column's, then the row's.
        let pairs = (0..q)
            .map(|k| (k, k + q))
            .chain((0..q).map(|k| (2 * q + k, 3 * q + k)));
        let place = match at {
            Positions::Coords { .. } => "each patch at its (row, column)",
            _ => "one row: column p",
        };
        Ok(Table::additive(
            format!("PE(y, x): sin and cos of the column, then of the row; {place}"),
            self.rows(at, len)?,
            pairs.collect(),
        ))
    }
}
