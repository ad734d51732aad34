//! `rope-2d`: axial rotary embedding for a grid of image patches (Heo et al. 2024,
//! "Rotary Position Embedding for Vision Transformer", RoPE-Axial; code in
//! naver-ai/rope-vit, `compute_axial_cis`).
//!
//! A patch sits at a row `y` and a column `x` ([`Positions::Coords`] with two axes,
//! `(y, x)` a token). The first half of a head's pairs turn by the column, the second half
//! by the row, each with the same `d/4` frequencies:
//!
//! ```text
//! θ_k = base^(−4k/d),   k = 0 … d/4 − 1                     base = 100
//! pair k turns by x · θ_k,   pair d/4 + k by y · θ_k          (pairs (2j, 2j + 1))
//! ```
//!
//! so a score reads the offset between two patches on each axis, `(Δy, Δx)`, and nothing
//! mixes the axes. The pairs are rope-vit's: adjacent dimensions, as `view_as_complex`
//! takes them. One position a token is a patch of row 0 at that column: a sequence is one
//! row.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{check_base, require, tensor_from_fn, Form, PositionalEncoding, Table};
use crate::rope::Rope;
use crate::{Capabilities, EncodingSpec, PairLayout, Positions, Result, RotateContext, Target};

/// The settings of `rope-2d`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rope2dConfig {
    /// The wavelength base (rope-vit's 100 for RoPE-Axial).
    #[serde(default = "Rope2dConfig::default_base")]
    pub base: f64,
}

impl Rope2dConfig {
    fn default_base() -> f64 {
        100.0
    }
}

impl EncodingSpec for Rope2dConfig {
    const KIND: &'static str = "rope-2d";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Rope2d::new(
            self.base,
            target.head_dim()?,
            vb.device(),
        )?))
    }
}

/// Axial rotary embedding of queries and keys over rows and columns.
#[derive(Debug)]
pub struct Rope2d {
    /// The interleaved rotation that turns a head by a table.
    rope: Rope,
    /// `θ_k`, `d/4` of them.
    freqs: Vec<f64>,
    device: Device,
}

impl Rope2d {
    /// The rotation of heads of width `head_dim` (a multiple of 4) with base `base`.
    ///
    /// # Errors
    /// A head width that is not a multiple of 4, or a base out of range.
    pub fn new(base: f64, head_dim: usize, device: &Device) -> Result<Self> {
        let kind = Rope2dConfig::KIND;
        check_base(kind, base)?;
        require(
            kind,
            head_dim.is_multiple_of(4) && head_dim > 0,
            format!("a head width that is a multiple of 4 (a pair each way per frequency), got {head_dim}"),
        )?;
        let rope = Rope::new(head_dim, base, PairLayout::Interleaved, 1.0, device)?;
        let freqs = (0..head_dim / 4)
            .map(|k| base.powf(-((4 * k) as f64) / head_dim as f64))
            .collect();
        Ok(Self {
            rope,
            freqs,
            device: device.clone(),
        })
    }

    /// `(cos, sin)`, each `(len, head_dim/2)` f32, of the `len` patches `at`: `(y, x)`
    /// each, or one position a token (row 0, that column).
    ///
    /// # Errors
    /// Coordinates of another number of axes or tokens; a list of positions that is not one
    /// per token.
    pub fn cos_sin(&self, at: Positions, len: usize) -> Result<(Tensor, Tensor)> {
        let patches = at.patches(Rope2dConfig::KIND, len)?;
        let quarter = self.freqs.len();
        let angle = |p: usize, j: usize| {
            let (y, x) = patches[p];
            match j < quarter {
                true => x as f64 * self.freqs[j],
                false => y as f64 * self.freqs[j - quarter],
            }
        };
        let half = 2 * quarter;
        Ok((
            tensor_from_fn(len, half, &self.device, |p, j| angle(p, j).cos())?,
            tensor_from_fn(len, half, &self.device, |p, j| angle(p, j).sin())?,
        ))
    }
}

impl PositionalEncoding for Rope2d {
    fn kind(&self) -> &'static str {
        Rope2dConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            coords: 2,
            ..self.rope.capabilities()
        }
    }

    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let len = x.dims().get(2).copied().unwrap_or(0);
        let (cos, sin) = self.cos_sin(cx.at, len)?;
        self.rope.rotate_with(x, &cos, &sin)
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.table_at(Positions::From(0), len)
    }

    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        let (cos, sin) = self.cos_sin(at, len)?;
        let place = match at {
            Positions::Coords { .. } => "each patch at its (row, column)",
            _ => "one row: column p",
        };
        Ok(Table {
            title: format!("rotation by column · θ_k, then row · θ_k; {place}"),
            form: Form::Rotary { cos, sin },
        })
    }
}
