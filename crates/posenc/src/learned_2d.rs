//! `learned-2d`: one trained vector per patch of a grid (ViT, Dosovitskiy et al. 2021),
//! resampled to another grid as timm's `resample_abs_pos_embed` does.
//!
//! The table holds `rows × columns` vectors, row after row. A patch at `(y, x)` within the
//! trained grid adds its row of the table. An image past it, of `H × W` patches (the extent
//! of their coordinates, `max y + 1` by `max x + 1`), adds the table resampled to `H × W`,
//! bicubically with antialiasing, as `F.interpolate(mode="bicubic", antialias=True)`
//! resamples it (PIL's filter: the cubic of `a = −0.5`, its support widened by the scale
//! when shrinking, each output's weights normalized; [`Learned2d::table_for`] resamples to
//! smaller grids too, as timm would):
//!
//! ```text
//! PE_HW = R_H · T · R_Wᵀ        T: the table as (rows, columns, d), R: (new, old) weights
//! ```
//!
//! With `resample: false` an image past the trained grid is refused, by name. One position
//! a token is a patch in ViT's raster order, `p = y · columns + x`, of the trained grid: the
//! table read as one position per row, ending at `rows · columns` (a later position is
//! refused, as `learned` refuses one).

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{add_table, check_embeddings, require, PositionalEncoding, Table};
use crate::{Capabilities, EmbedContext, EncodingSpec, Error, Positions, Result, Target};

/// The settings of `learned-2d`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Learned2dConfig {
    /// The trained grid, `[rows, columns]` of patches.
    #[serde(default = "Learned2dConfig::default_grid")]
    pub grid: [usize; 2],
    /// Resample the table to another grid (timm's bicubic); false: refuse one.
    #[serde(default = "Learned2dConfig::yes")]
    pub resample: bool,
}

impl Learned2dConfig {
    fn default_grid() -> [usize; 2] {
        [8, 8]
    }
    fn yes() -> bool {
        true
    }
}

/// The largest grid side a table is resampled to.
const MAX_SIDE: usize = 4096;

impl EncodingSpec for Learned2dConfig {
    const KIND: &'static str = "learned-2d";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let [rows, columns] = self.grid;
        require(
            Self::KIND,
            (1..=MAX_SIDE).contains(&rows) && (1..=MAX_SIDE).contains(&columns),
            format!("a grid of 1 to {MAX_SIDE} rows and columns, got {rows} × {columns}"),
        )?;
        // timm's initialization: a normal of standard deviation 0.02.
        let init = Init::Randn {
            mean: 0.0,
            stdev: 0.02,
        };
        let table = vb.get_with_hints((rows * columns, target.d_model), "weight", init)?;
        Ok(Arc::new(Learned2d::with_table(
            self,
            table,
            target.d_model,
        )?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        (self.grid[0] * self.grid[1] * target.d_model) as u128
    }

    /// Enough rows of its columns to reach `positions` in raster order.
    fn for_positions(&self, positions: usize) -> Option<Self> {
        let [rows, columns] = self.grid;
        (rows * columns < positions).then(|| Self {
            grid: [positions.div_ceil(columns.max(1)), columns],
            resample: self.resample,
        })
    }
}

/// A learned table over a grid of patches, resampled to other grids.
#[derive(Debug)]
pub struct Learned2d {
    /// `(rows · columns, d_model)`, row after row.
    table: Tensor,
    grid: [usize; 2],
    resample: bool,
    d_model: usize,
}

/// PIL's bicubic filter, `a = −0.5`, as PyTorch's antialiased interpolation takes it.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// The `(new, old)` weights that resample `old` samples to `new`, as PyTorch's antialiased
/// bicubic interpolation computes them (`align_corners=False`).
pub fn resampling_weights(old: usize, new: usize, device: &Device) -> Result<Tensor> {
    let scale = old as f64 / new as f64;
    let (support, inv) = match scale >= 1.0 {
        true => (2.0 * scale, 1.0 / scale),
        false => (2.0, 1.0),
    };
    let mut w = vec![0f32; new * old];
    for i in 0..new {
        let center = scale * (i as f64 + 0.5);
        let lo = ((center - support + 0.5).floor() as i64).max(0) as usize;
        let hi = ((center + support + 0.5).floor() as i64).min(old as i64) as usize;
        let taps: Vec<f64> = (lo..hi)
            .map(|j| cubic((j as f64 - center + 0.5) * inv))
            .collect();
        let total: f64 = taps.iter().sum();
        for (j, t) in (lo..hi).zip(taps) {
            w[i * old + j] = if total != 0.0 {
                (t / total) as f32
            } else {
                0.0
            };
        }
    }
    Ok(Tensor::from_vec(w, (new, old), device)?)
}

impl Learned2d {
    /// The encoding of `config` over a given `(rows · columns, d_model)` table.
    ///
    /// # Errors
    /// A table of another shape.
    pub fn with_table(config: &Learned2dConfig, table: Tensor, d_model: usize) -> Result<Self> {
        let [rows, columns] = config.grid;
        require(
            Learned2dConfig::KIND,
            table.dims() == [rows * columns, d_model],
            format!(
                "a table of ({}, {d_model}) for {rows} × {columns} patches, got {:?}",
                rows * columns,
                table.dims()
            ),
        )?;
        Ok(Self {
            table,
            grid: config.grid,
            resample: config.resample,
            d_model,
        })
    }

    /// The table over an `h × w` grid, `(h · w, d_model)`: the trained one, or it
    /// resampled.
    ///
    /// # Errors
    /// Another grid where resampling is off; a side past 4 096.
    pub fn table_for(&self, h: usize, w: usize) -> Result<Tensor> {
        let [rows, columns] = self.grid;
        if [h, w] == self.grid {
            return Ok(self.table.clone());
        }
        let kind = Learned2dConfig::KIND;
        if !self.resample {
            return Err(Error::Config(format!(
                "`{kind}` has a table of {rows} × {columns} patches and resampling off: a grid \
                 of {h} × {w} needs `resample: true`"
            )));
        }
        require(
            kind,
            h <= MAX_SIDE && w <= MAX_SIDE,
            format!("a grid of at most {MAX_SIDE} rows and columns, got {h} × {w}"),
        )?;
        let (dev, dtype) = (self.table.device(), self.table.dtype());
        let (ry, rx) = (
            resampling_weights(rows, h, dev)?.to_dtype(dtype)?,
            resampling_weights(columns, w, dev)?.to_dtype(dtype)?,
        );
        let d = self.d_model;
        // Rows first: (h, columns · d), then columns: (h, d, columns) · (columns, w).
        let t = ry.matmul(&self.table.reshape((rows, columns * d))?)?;
        let t = t.reshape((h, columns, d))?.transpose(1, 2)?.contiguous()?;
        let t = t.broadcast_matmul(&rx.t()?)?; // (h, d, w)
        Ok(t.transpose(1, 2)?.reshape((h * w, d))?)
    }

    /// The `(len, d_model)` rows of the `len` patches `at`: `(y, x)` each, from the table
    /// over their extent (resampled past the trained grid), or one position a token in
    /// raster order.
    ///
    /// # Errors
    /// As [`Learned2d::table_for`]; coordinates of another number of axes or tokens; a
    /// position past the table's end.
    pub fn rows(&self, at: Positions, len: usize) -> Result<Tensor> {
        let kind = Learned2dConfig::KIND;
        let [rows, columns] = self.grid;
        let (table, index) = match at {
            Positions::Coords { .. } => {
                let patches = at.patches(kind, len)?;
                let (h, w) = patches
                    .iter()
                    .fold((0, 0), |(h, w), &(y, x)| (h.max(y + 1), w.max(x + 1)));
                // Within the trained grid, its own rows; past it, the table resampled to
                // the image's extent.
                let (h, w) = match h <= rows && w <= columns {
                    true => (rows, columns),
                    false => (h, w),
                };
                let index: Vec<u32> = patches.iter().map(|&(y, x)| (y * w + x) as u32).collect();
                (self.table_for(h, w)?, index)
            }
            _ => {
                at.check(kind, len)?;
                crate::encoding::check_end(kind, at, len, rows * columns)?;
                let index: Vec<u32> = (0..len).map(|p| at.get(p) as u32).collect();
                (self.table.clone(), index)
            }
        };
        let index = Tensor::new(index, table.device())?;
        Ok(table.index_select(&index, 0)?)
    }
}

impl PositionalEncoding for Learned2d {
    fn kind(&self) -> &'static str {
        Learned2dConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            adds: true,
            coords: 2,
            max_positions: Some(self.grid[0] * self.grid[1]),
            max_grid: (!self.resample).then_some(self.grid),
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
        let [rows, columns] = self.grid;
        Ok(Table::additive(
            format!("a learned row per patch of {rows} × {columns}, resampled to other grids"),
            self.rows(at, len)?,
            Vec::new(),
        ))
    }
}
