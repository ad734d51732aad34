//! `rope-mixed`: rotary embedding with learned frequencies that mix a patch's row and column
//! (Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", RoPE-Mixed; code
//! in naver-ai/rope-vit: `init_random_2d_freqs`, `compute_mixed_cis`).
//!
//! Each head `h` turns its adjacent pair `j` by `x · fx[h, j] + y · fy[h, j]` for a patch at
//! row `y` and column `x`: the frequencies are a learned direction in the plane, so a pair
//! can read a diagonal. They start as rope-vit starts them, with a random angle `a_h` per
//! head and the magnitudes of RoPE-Axial:
//!
//! ```text
//! m_k = base^(−4k/d),   k = 0 … d/4 − 1                          base = 10
//! fx[h] = (m · cos a_h,  m · cos(a_h + π/2)),   fy[h] = (m · sin a_h,  m · sin(a_h + π/2))
//! ```
//!
//! The weights are the angles `angles (heads)`, drawn uniformly in `[0, 2π)`, and
//! `freqs_offset (2, heads, d/2)`, zero at first: the frequencies are the ones the angles
//! give plus the offset, so every entry is free, as rope-vit's are. Both learn (rope-vit
//! learns the frequencies alone: the angles here are one more direction per head, which
//! the offset could also take). One set serves the whole stack, as every learned kind here
//! does (rope-vit learns a set a layer). One position a token is a patch of row 0, so a
//! sequence is one row.

use std::f64::consts::{FRAC_PI_2, TAU};
use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{check_base, require, Form, PositionalEncoding, Table};
use crate::{Capabilities, EncodingSpec, Error, Positions, Result, RotateContext, Target};

/// The settings of `rope-mixed`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RopeMixedConfig {
    /// The base of the starting magnitudes (rope-vit's 10 for RoPE-Mixed).
    #[serde(default = "RopeMixedConfig::default_base")]
    pub base: f64,
}

impl RopeMixedConfig {
    fn default_base() -> f64 {
        10.0
    }
}

impl EncodingSpec for RopeMixedConfig {
    const KIND: &'static str = "rope-mixed";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let kind = Self::KIND;
        check_base(kind, self.base)?;
        let head_dim = target.head_dim()?;
        require(
            kind,
            head_dim.is_multiple_of(4) && head_dim > 0,
            format!("a head width that is a multiple of 4, got {head_dim}"),
        )?;
        let heads = target.heads;
        let angles = vb.get_with_hints(heads, "angles", Init::Uniform { lo: 0.0, up: TAU })?;
        let offset =
            vb.get_with_hints((2, heads, head_dim / 2), "freqs_offset", Init::Const(0.0))?;
        let magnitudes = (0..head_dim / 4)
            .map(|k| self.base.powf(-((4 * k) as f64) / head_dim as f64) as f32)
            .collect::<Vec<_>>();
        Ok(Arc::new(RopeMixed {
            angles,
            offset,
            magnitudes: Tensor::new(magnitudes, vb.device())?,
            device: vb.device().clone(),
        }))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        (target.heads + target.d_model) as u128
    }
}

/// Rotary embedding whose frequencies over rows and columns are learned per head.
#[derive(Debug)]
pub struct RopeMixed {
    /// Each head's starting angle, `(heads)`.
    angles: Tensor,
    /// What training adds to the frequencies, `(2, heads, head_dim / 2)`: x's, then y's.
    offset: Tensor,
    /// `m_k`, `(head_dim / 4)`.
    magnitudes: Tensor,
    device: Device,
}

impl RopeMixed {
    /// The frequencies `(fx, fy)`, each `(heads, head_dim / 2)`: the angles', plus the
    /// offset.
    pub fn frequencies(&self) -> Result<(Tensor, Tensor)> {
        let a = self.angles.unsqueeze(1)?; // (heads, 1)
        let m = self.magnitudes.to_dtype(a.dtype())?.unsqueeze(0)?; // (1, d/4)
        let b = (&a + FRAC_PI_2)?;
        let fx = Tensor::cat(
            &[m.broadcast_mul(&a.cos()?)?, m.broadcast_mul(&b.cos()?)?],
            1,
        )?;
        let fy = Tensor::cat(
            &[m.broadcast_mul(&a.sin()?)?, m.broadcast_mul(&b.sin()?)?],
            1,
        )?;
        Ok(((fx + self.offset.get(0)?)?, (fy + self.offset.get(1)?)?))
    }

    /// `(cos, sin)`, each `(heads, len, head_dim / 2)` f32, of the `len` patches `at`:
    /// `(y, x)` each, or one position a token (row 0, that column).
    ///
    /// # Errors
    /// Coordinates of another number of axes or tokens; a list of positions that is not one
    /// per token.
    pub fn cos_sin(&self, at: Positions, len: usize) -> Result<(Tensor, Tensor)> {
        let (ys, xs): (Vec<f32>, Vec<f32>) = at
            .patches(RopeMixedConfig::KIND, len)?
            .into_iter()
            .map(|(y, x)| (y as f32, x as f32))
            .unzip();
        let dtype = self.offset.dtype();
        let column = |v: Vec<f32>| Tensor::from_vec(v, (1, len, 1), &self.device)?.to_dtype(dtype);
        let (fx, fy) = self.frequencies()?;
        let angle = (column(xs)?.broadcast_mul(&fx.unsqueeze(1)?)?
            + column(ys)?.broadcast_mul(&fy.unsqueeze(1)?)?)?;
        Ok((angle.cos()?, angle.sin()?))
    }
}

impl PositionalEncoding for RopeMixed {
    fn kind(&self) -> &'static str {
        RopeMixedConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            coords: 2,
            ..Capabilities::default()
        }
    }

    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let kind = RopeMixedConfig::KIND;
        let (b, h, t, d) = x.dims4().map_err(|_| Error::Shape {
            kind,
            msg: format!(
                "expected queries/keys (batch, heads, seq, head_dim), got {:?}",
                x.dims()
            ),
        })?;
        let heads = self.angles.dim(0)?;
        require(
            kind,
            h == heads && d == 2 * self.offset.dim(2)?,
            format!(
                "queries and keys of {heads} heads of {} (its frequencies are per head), got {h} of {d}",
                2 * self.offset.dim(2)?
            ),
        )?;
        let (cos, sin) = self.cos_sin(cx.at, t)?;
        let (cos, sin) = (
            cos.to_dtype(x.dtype())?.unsqueeze(0)?.unsqueeze(4)?,
            sin.to_dtype(x.dtype())?.unsqueeze(0)?.unsqueeze(4)?,
        );
        // Adjacent pairs (2j, 2j + 1), as rope-vit's `view_as_complex` takes them.
        let pairs = x.reshape((b, h, t, d / 2, 2))?;
        let (re, im) = (pairs.narrow(4, 0, 1)?, pairs.narrow(4, 1, 1)?);
        let out_re = (re.broadcast_mul(&cos)? - im.broadcast_mul(&sin)?)?;
        let out_im = (im.broadcast_mul(&cos)? + re.broadcast_mul(&sin)?)?;
        Ok(Tensor::cat(&[out_re, out_im], 4)?.reshape((b, h, t, d))?)
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
            title: format!("head 0's rotation by x · fx + y · fy; {place}"),
            form: Form::Rotary {
                cos: cos.get(0)?,
                sin: sin.get(0)?,
            },
        })
    }
}
