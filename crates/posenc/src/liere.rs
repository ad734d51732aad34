//! `liere`: rotations from learned skew-symmetric generators (Ostmeier et al. 2024,
//! "LieRE: Generalizing Rotary Position Encodings"; code in StanfordMIMI/LieRE:
//! `LierePositionEncoder`, `FlexibleAttention.apply_transforms`).
//!
//! RoPE turns each pair of a head's features by an angle; LieRE turns each block of `g`
//! features by a rotation of the whole block, the exponential of a skew-symmetric matrix
//! that is linear in the position:
//!
//! ```text
//! R(p) = exp(Σ_a p_a · B_a),   B_a = U_a − U_aᵀ,   U_a = triu(W_a, 1)   (g × g, per head, block)
//! q ← R(p_q) q,   k ← R(p_k) k,   so   ⟨R(p_q) q, R(p_k) k⟩ = ⟨q, R(p_q)ᵀ R(p_k) k⟩
//! ```
//!
//! `W (axes, heads · blocks, g, g)` is the weight, drawn uniformly in `[0, 2π)` as LieRE
//! draws it (its lower triangle is never read, as LieRE's is not). A head of `d` features
//! holds `⌊d / g⌋` blocks; features past the last block are left as they are, as LieRE
//! leaves them. When the `B_a` commute (2 × 2 blocks, RoPE-Mixed's case) `R(p_q)ᵀ R(p_k)`
//! depends on `p_k − p_q` alone; in general it does not.
//!
//! **Positions** are LieRE's: on an axis the grid of `n` patches spans
//! `linspace(0, n / n₀, n)`, `n₀` the trained grid's patches on that axis (`grid`), so the
//! trained grid runs from 0 to 1 and a larger one past 1, a patch's coordinate `c` at
//! `c · (n / n₀) / (n − 1)`. `n` is the extent of the coordinates given (one past the largest
//! on that axis), as LieRE reads it off the image: a patch's rotation depends on the size of
//! the image it is in. One position a token is a patch of the first row (of the first
//! frame) at the trained grid's spacing, `c / (n₀ − 1)`, whatever the sequence's length, so
//! that a key/value cache, a padded batch or a prompt read in chunks turns each token as one
//! forward over the whole sequence does (a row given as coordinates is an image, and takes
//! its extent's spacing instead).
//!
//! The exponential is computed in f64 by scaling and squaring a Taylor series (every
//! step a matrix product, so gradients flow through it) and cast to the queries' type. One
//! set of generators serves the whole stack: LieRE's code allows one per layer, but its ViT
//! hands every layer the first layer's (`Transformer.forward` replaces the transforms by
//! layer 0's before it reaches layer 1), so one set is what it trains.

use std::f64::consts::TAU;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, PositionalEncoding, Table};
use crate::{Capabilities, EncodingSpec, Error, Positions, Result, RotateContext, Target};

/// The settings of `liere`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LiereConfig {
    /// The trained grid of patches, `[rows, columns]` or `[frames, rows, columns]`: its
    /// length is the number of axes a token's position has, and positions are normalised
    /// to it (LieRE's `image_size / patch_size`).
    #[serde(default = "LiereConfig::default_grid")]
    pub grid: Vec<usize>,
    /// The width of the blocks one generator turns (LieRE's `generator_dim`), or `null`:
    /// the whole head (LieRE's default, 64 of a head of 64).
    #[serde(default)]
    pub generator_dim: Option<usize>,
}

impl LiereConfig {
    fn default_grid() -> Vec<usize> {
        vec![8, 8]
    }
}

/// The largest grid side a position is normalised to.
const MAX_SIDE: usize = 4096;
/// The widest block one generator turns: its rotations cost `g³` a product.
const MAX_BLOCK: usize = 256;
/// The most bytes the rotations of one call may take (f64, `tokens · heads · blocks · g²`).
const MAX_ROTATION_BYTES: usize = 1 << 30;
/// The Taylor terms of the exponential, after scaling to a norm of at most [`SCALED_NORM`]:
/// the first term left out is below `0.5¹³ / 13! ≈ 2e-14` of the identity.
const TAYLOR_TERMS: usize = 12;
/// The ∞-norm each generator is scaled down to before its series is summed.
const SCALED_NORM: f64 = 0.5;

impl EncodingSpec for LiereConfig {
    const KIND: &'static str = "liere";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let kind = Self::KIND;
        let axes = self.grid.len();
        require(
            kind,
            (2..=3).contains(&axes) && self.grid.iter().all(|n| (1..=MAX_SIDE).contains(n)),
            format!(
                "a grid of 2 or 3 axes of 1 to {MAX_SIDE} patches, got {:?}",
                self.grid
            ),
        )?;
        let head_dim = target.head_dim()?;
        let g = self.generator_dim.unwrap_or(head_dim);
        require(
            kind,
            (2..=MAX_BLOCK.min(head_dim)).contains(&g),
            format!("a generator_dim of 2 to the head width ({head_dim}) and at most {MAX_BLOCK}, got {g}"),
        )?;
        let blocks = head_dim / g;
        let weight = vb.get_with_hints(
            (axes, target.heads * blocks, g, g),
            "generators",
            Init::Uniform { lo: 0.0, up: TAU },
        )?;
        // The strict upper triangle, which the generators are made of.
        let upper: Vec<f64> = (0..g * g)
            .map(|i| f64::from(u8::from(i % g > i / g)))
            .collect();
        Ok(Arc::new(Liere {
            weight,
            upper: Tensor::from_vec(upper, (g, g), vb.device())?,
            grid: self.grid.clone(),
            heads: target.heads,
            head_dim,
            block: g,
            device: vb.device().clone(),
        }))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        let head_dim = target.d_model / target.heads.max(1);
        let g = self.generator_dim.unwrap_or(head_dim).max(1);
        (self.grid.len() * target.heads * (head_dim / g) * g * g) as u128
    }
}

/// Rotations of blocks of each head, exponentials of learned generators.
#[derive(Debug)]
pub struct Liere {
    /// `W (axes, heads · blocks, g, g)`: head `h`'s block `b` is row `h · blocks + b`.
    weight: Tensor,
    /// `(g, g)` f64: 1 above the diagonal.
    upper: Tensor,
    grid: Vec<usize>,
    heads: usize,
    head_dim: usize,
    block: usize,
    device: Device,
}

impl Liere {
    fn blocks(&self) -> usize {
        self.head_dim / self.block
    }

    /// The generators `B_a = U_a − U_aᵀ`, `(axes, heads · blocks, g, g)` f64.
    pub fn generators(&self) -> Result<Tensor> {
        let w = self.weight.to_dtype(DType::F64)?;
        let u = w.broadcast_mul(&self.upper)?;
        Ok((&u - u.transpose(2, 3)?)?)
    }

    /// Each token's normalised position, `len × axes`, token after token: LieRE's
    /// `linspace(0, n / n₀, n)` on each axis, `n` the extent of the coordinates given.
    ///
    /// # Errors
    /// Coordinates of another number of axes or tokens; a list of positions that is not
    /// one per token.
    pub fn positions(&self, at: Positions, len: usize) -> Result<Vec<f64>> {
        let kind = LiereConfig::KIND;
        let axes = self.grid.len();
        let coords: Vec<usize> = match at {
            Positions::Coords { .. } => {
                at.check_coords(kind, len, axes)?;
                (0..len)
                    .flat_map(|i| (0..axes).map(move |a| at.coord(i, a)))
                    .collect()
            }
            _ => {
                at.check(kind, len)?;
                (0..len)
                    .flat_map(|i| (0..axes).map(move |a| usize::from(a + 1 == axes) * at.get(i)))
                    .collect()
            }
        };
        let extent: Vec<usize> = match at {
            Positions::Coords { .. } => (0..axes)
                .map(|a| {
                    (0..len)
                        .map(|i| coords[i * axes + a] + 1)
                        .max()
                        .unwrap_or(0)
                })
                .collect(),
            // A sequence keeps the trained spacing: its extent would change as a cache, a
            // padded batch or a prompt read in chunks grows it.
            _ => self.grid.clone(),
        };
        let spacing: Vec<f64> = extent
            .iter()
            .zip(&self.grid)
            .map(|(&n, &trained)| match n > 1 {
                true => n as f64 / trained as f64 / (n - 1) as f64,
                false => 0.0,
            })
            .collect();
        Ok(coords
            .iter()
            .enumerate()
            .map(|(i, &c)| c as f64 * spacing[i % axes])
            .collect())
    }

    /// The rotations of the `len` tokens `at`, `(heads, len, blocks, g, g)` f64.
    ///
    /// # Errors
    /// As [`Liere::positions`]; rotations past 1 GiB (too many tokens for
    /// the blocks' width).
    pub fn rotations(&self, at: Positions, len: usize) -> Result<Tensor> {
        let (g, blocks, axes) = (self.block, self.blocks(), self.grid.len());
        let bytes = len
            .saturating_mul(self.heads * blocks * g * g)
            .saturating_mul(8);
        crate::limits::check("liere's rotations (bytes)", bytes, MAX_ROTATION_BYTES)?;
        let p = Tensor::from_vec(self.positions(at, len)?, (len, axes), &self.device)?;
        let b = self.generators()?.reshape((axes, ()))?;
        let generator = p.matmul(&b)?.reshape((len * self.heads * blocks, g, g))?;
        let rotation = expm(&generator)?;
        Ok(rotation
            .reshape((len, self.heads, blocks, g, g))?
            .transpose(0, 1)?)
    }
}

/// `exp(a)` of each `(g, g)` matrix of `a (n, g, g)` (f64): scaled by `2^−s` to an ∞-norm of
/// at most [`SCALED_NORM`], its Taylor series summed by Horner's rule, then squared `s`
/// times. The scaling is chosen from the values but is a constant of the graph, so the
/// gradient is the series' and the squarings'.
fn expm(a: &Tensor) -> Result<Tensor> {
    let g = a.dim(2)?;
    let norm = a.abs()?.sum(2)?.max_all()?.to_scalar::<f64>()?;
    if !norm.is_finite() {
        return Err(Error::Config(format!(
            "`liere`'s generators are not finite (norm {norm}): the weights have diverged"
        )));
    }
    let squarings = match norm > SCALED_NORM {
        true => (norm / SCALED_NORM).log2().ceil() as i32,
        false => 0,
    };
    let a = (a * 0.5f64.powi(squarings))?;
    let eye = Tensor::eye(g, DType::F64, a.device())?.broadcast_as(a.shape())?;
    let mut e = eye.clone();
    for k in (1..=TAYLOR_TERMS).rev() {
        e = (&eye + (a.matmul(&e)? / k as f64)?)?;
    }
    for _ in 0..squarings {
        e = e.matmul(&e)?;
    }
    Ok(e)
}

impl PositionalEncoding for Liere {
    fn kind(&self) -> &'static str {
        LiereConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            coords: self.grid.len(),
            ..Capabilities::default()
        }
    }

    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let kind = LiereConfig::KIND;
        let (b, h, t, d) = x.dims4().map_err(|_| Error::Shape {
            kind,
            msg: format!(
                "expected queries/keys (batch, heads, seq, head_dim), got {:?}",
                x.dims()
            ),
        })?;
        require(
            kind,
            h == self.heads && d == self.head_dim,
            format!(
                "queries and keys of {} heads of {} (its generators are per head), got {h} of {d}",
                self.heads, self.head_dim
            ),
        )?;
        let (g, blocks) = (self.block, self.blocks());
        let turned = blocks * g;
        // (heads · t · blocks, g, g) @ (heads · t · blocks, g, batch): every block of every
        // sequence of the batch in one product.
        let r = self
            .rotations(cx.at, t)?
            .to_dtype(x.dtype())?
            .reshape((h * t * blocks, g, g))?;
        let v = x
            .narrow(3, 0, turned)?
            .reshape((b, h, t, blocks, g))?
            .permute((1, 2, 3, 4, 0))?
            .reshape((h * t * blocks, g, b))?;
        let y = r
            .matmul(&v)?
            .reshape((h, t, blocks, g, b))?
            .permute((4, 0, 1, 2, 3))?
            .reshape((b, h, t, turned))?;
        Ok(match turned < d {
            true => Tensor::cat(&[&y, &x.narrow(3, turned, d - turned)?], 3)?,
            false => y,
        })
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.table_at(Positions::From(0), len)
    }

    /// `trace(R(p_q)ᵀ R(p_k)) / d` per head, `(heads, len, len)`: the score a query and a key
    /// of the same content get from their positions alone, averaged over the content (its
    /// features' basis), as the explorer reads a rotary kind by distance.
    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        let r = self.rotations(at, len)?; // (heads, len, blocks, g, g)
        let flat = r.reshape((self.heads, len, ()))?;
        let kept = (self.head_dim - self.blocks() * self.block) as f64;
        let score = ((flat.matmul(&flat.transpose(1, 2)?)? + kept)? / self.head_dim as f64)?;
        let place = match at {
            Positions::Coords { .. } => "each patch at its coordinates",
            _ => "one row: column p",
        };
        Ok(Table::bias(
            format!("trace(R_qᵀ R_k) / d, what equal query and key score by position; {place}"),
            score.to_dtype(DType::F32)?,
        ))
    }
}
