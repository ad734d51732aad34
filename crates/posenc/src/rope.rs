//! `rope`: rotary position embedding (Su et al. 2021, "RoFormer").
//!
//! Queries and keys, not embeddings, carry the position. Each pair `i` of a head's
//! dimensions is rotated by the angle `pos · θ_i`:
//!
//! ```text
//! θ_i = base^(−2i/d_rot),   i = 0 … d_rot/2 − 1            base = 10000
//! (x₁, x₂) ↦ (x₁ cos pos·θ_i − x₂ sin pos·θ_i,  x₂ cos pos·θ_i + x₁ sin pos·θ_i)
//! ```
//!
//! Rotations compose, so `⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩`: the score depends on the
//! offset `n − m` only. The pair `i` is `(i, i + d_rot/2)` in the half-split layout
//! (GPT-NeoX, Llama: `rotate_half`) or `(2i, 2i + 1)` in the interleaved one (GPT-J,
//! RoFormer: `rotate_every_two`). With `rotary_fraction < 1` (GPT-NeoX, Phi) only the
//! first `d_rot = ⌊head_dim · fraction⌋` dimensions rotate; the rest pass through.
//!
//! With `position_scale = s ≠ 1` every position is divided by `s` before it is rotated:
//! position interpolation (Chen et al. 2023), which squeezes a longer context into the
//! angles a model was trained on. `scaling` stretches the frequencies the ways transformers
//! does, with its `rope_parameters` keys ([`crate::rope_scaling`]: linear, dynamic NTK,
//! YaRN, Llama 3, LongRoPE), attention factor included.
//!
//! Dynamic NTK and LongRoPE depend on the length `n` of the sequence: the tables of a
//! forward over positions `0 … n − 1` are those of length `n`, as transformers computes
//! them for a whole sequence. With a key/value cache, new positions are rotated with the
//! frequencies of the length they reach, and cached keys keep theirs (transformers' cache
//! does the same).
//!
//! With no gradient to carry, candle's fused `rope`/`rope_i` kernels run; when the input
//! tracks a gradient, the differentiable `rope_slow`/`rope_i_slow` do the same sum.

use std::sync::Arc;

use candle_core::{Device, Tensor, D};
use candle_nn::{rotary_emb, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cache::GrowingTables;
use crate::encoding::{
    check_base, check_even, require, tensor_from_fn, Form, PositionalEncoding, Table,
};
use crate::rope_scaling::{self, Frequencies, RopeScaling, RopeType};
use crate::PairLayout;
use crate::{Capabilities, RotateContext};
use crate::{EncodingSpec, Error, Positions, Result, Target};

/// The settings of `rope`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RopeConfig {
    /// The wavelength base, 10000 in RoFormer.
    #[serde(default = "RopeConfig::default_base")]
    pub base: f64,
    /// Half-split (Llama, NeoX) or interleaved (GPT-J, RoFormer) pairs.
    #[serde(default)]
    pub layout: PairLayout,
    /// The fraction of each head's dimensions that rotate.
    #[serde(default = "RopeConfig::one")]
    pub rotary_fraction: f64,
    /// Positions are divided by this before rotating (position interpolation); 1 is
    /// RoFormer's.
    #[serde(
        default = "RopeConfig::one",
        skip_serializing_if = "RopeConfig::is_one"
    )]
    // Left out of configs at 1, so the schema names the default itself.
    #[schemars(extend("default" = 1.0))]
    pub position_scale: f64,
    /// Context extension, as transformers' `rope_parameters` ([`RopeScaling`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<RopeScaling>,
}

impl RopeConfig {
    fn default_base() -> f64 {
        10_000.0
    }
    fn one() -> f64 {
        1.0
    }
    fn is_one(x: &f64) -> bool {
        *x == 1.0
    }
}

impl EncodingSpec for RopeConfig {
    const KIND: &'static str = "rope";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        let rope = Rope::new(
            target.head_dim()?,
            self.base,
            self.layout,
            self.rotary_fraction,
            vb.device(),
        )?;
        let rope = rope.with_position_scale(self.position_scale)?;
        Ok(Arc::new(match &self.scaling {
            Some(scaling) => rope.with_scaling(scaling.clone(), target.context)?,
            None => rope,
        }))
    }
}

/// Rotary position embedding of queries and keys.
#[derive(Debug)]
pub struct Rope {
    head_dim: usize,
    rotary_dim: usize,
    layout: PairLayout,
    base: f64,
    /// The frequencies within the trained context (all of them, but for dynamic NTK and
    /// LongRoPE).
    frequencies: Frequencies,
    /// The scaling with its trained context `L`, and LongRoPE's frequencies past `L`.
    scaling: Option<(RopeScaling, usize, Option<Frequencies>)>,
    position_scale: f64,
    device: Device,
    cache: GrowingTables,
    long_cache: GrowingTables,
}

impl Rope {
    /// Rotary embedding for heads of width `head_dim`, rotating the first
    /// `⌊head_dim · rotary_fraction⌋` dimensions (must be even and non-zero).
    pub fn new(
        head_dim: usize,
        base: f64,
        layout: PairLayout,
        rotary_fraction: f64,
        device: &Device,
    ) -> Result<Self> {
        let kind = RopeConfig::KIND;
        check_even(kind, head_dim, "head_dim = d_model / heads")?;
        require(
            kind,
            rotary_fraction > 0.0 && rotary_fraction <= 1.0,
            format!("0 < rotary_fraction ≤ 1, got {rotary_fraction}"),
        )?;
        check_base(kind, base)?;
        let rotary_dim = (head_dim as f64 * rotary_fraction).floor() as usize;
        check_even(
            kind,
            rotary_dim,
            "rotated part ⌊head_dim · rotary_fraction⌋, must be even and > 0",
        )?;
        Ok(Self {
            head_dim,
            rotary_dim,
            layout,
            base,
            frequencies: rope_scaling::plain(rotary_dim, base),
            scaling: None,
            position_scale: 1.0,
            device: device.clone(),
            cache: GrowingTables::default(),
            long_cache: GrowingTables::default(),
        })
    }

    /// The same rotation with its frequencies stretched by `scaling`; `context` is the
    /// model's trained context, `L` where the scaling does not name it.
    ///
    /// # Errors
    /// A setting out of its domain, or one the type needs and does not have, named.
    pub fn with_scaling(mut self, scaling: RopeScaling, context: Option<usize>) -> Result<Self> {
        let original = scaling.validate(self.rotary_dim, context)?;
        let (dim, base) = (self.rotary_dim, self.base);
        self.frequencies = scaling.frequencies(dim, base, original, original);
        let long = (scaling.rope_type == RopeType::Longrope)
            .then(|| scaling.frequencies(dim, base, original, original + 1));
        self.scaling = Some((scaling, original, long));
        Ok(self)
    }

    /// The same rotation with each inverse frequency `θ_i` replaced by `map(θ_i)`: 0 makes
    /// its pair position-independent (it does not turn).
    pub(crate) fn map_frequencies(mut self, map: impl Fn(f64) -> f64) -> Self {
        for f in &mut self.frequencies.inv_freq {
            *f = map(*f);
        }
        self
    }

    /// The same rotation with every position divided by `scale` (position interpolation).
    ///
    /// # Errors
    /// A scale that is not a positive finite number.
    pub fn with_position_scale(mut self, scale: f64) -> Result<Self> {
        require(
            RopeConfig::KIND,
            scale.is_finite() && scale > 0.0,
            format!("position_scale > 0, got {scale}"),
        )?;
        self.position_scale = scale;
        Ok(self)
    }

    /// The number of dimensions of each head that rotate.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    /// `(cos, sin)` of `pos · θ_i` for the `len` positions `at`, each `(len, rotary_dim/2)`
    /// f32, times the scaling's attention factor.
    pub fn cos_sin(&self, at: Positions, len: usize) -> Result<(Tensor, Tensor)> {
        at.check(RopeConfig::KIND, len)?;
        // A piece of a longer sequence takes the frequencies of the length it will reach.
        let end = at.reach(len);
        let tables = match &self.scaling {
            Some((scaling, original, long)) if scaling.depends_on_length() && end > *original => {
                match long {
                    Some(long) => self.cache_rows(long, &self.long_cache, at, len)?,
                    // Dynamic NTK past L: this length's frequencies, for these rows only.
                    None => {
                        let f = scaling.frequencies(self.rotary_dim, self.base, *original, end);
                        self.angles(&f, len, |i| at.get(i))?
                    }
                }
            }
            _ => self.cache_rows(&self.frequencies, &self.cache, at, len)?,
        };
        Ok((tables[0].clone(), tables[1].clone()))
    }

    /// Rotates `x: (batch, heads, seq, head_dim)` by the tables `cos` and `sin`, each
    /// `(seq, rotary_dim / 2)` f32 (as [`Rope::cos_sin`] gives them, or scaled per row and
    /// pair by an encoding built on this one, as xPos is), in this rotation's layout; the
    /// dimensions past `rotary_dim` pass unchanged.
    ///
    /// # Errors
    /// `x` of another rank or head width.
    pub fn rotate_with(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let seq = match x.dims() {
            &[_, _, seq, hd] if hd == self.head_dim => seq,
            dims => {
                return Err(Error::Shape {
                    kind: RopeConfig::KIND,
                    msg: format!(
                        "expected queries/keys of shape (batch, heads, seq, {}), got {dims:?}",
                        self.head_dim
                    ),
                })
            }
        };
        let (cos, sin) = (cos.to_dtype(x.dtype())?, sin.to_dtype(x.dtype())?);
        if cos.dims() != [seq, self.rotary_dim / 2] || sin.dims() != cos.dims() {
            return Err(Error::Shape {
                kind: RopeConfig::KIND,
                msg: format!(
                    "expected cos and sin tables of shape ({seq}, {}), got {:?} and {:?}",
                    self.rotary_dim / 2,
                    cos.dims(),
                    sin.dims()
                ),
            });
        }
        let rot = x.narrow(D::Minus1, 0, self.rotary_dim)?;
        let rotated = match (self.layout, x.track_op()) {
            (PairLayout::Halves, true) => rotary_emb::rope_slow(&rot, &cos, &sin)?,
            (PairLayout::Interleaved, true) => rotary_emb::rope_i_slow(&rot, &cos, &sin)?,
            (PairLayout::Halves, false) => rotary_emb::rope(&rot.contiguous()?, &cos, &sin)?,
            (PairLayout::Interleaved, false) => rotary_emb::rope_i(&rot.contiguous()?, &cos, &sin)?,
        };
        if self.rotary_dim == self.head_dim {
            return Ok(rotated);
        }
        let pass = x.narrow(D::Minus1, self.rotary_dim, self.head_dim - self.rotary_dim)?;
        Ok(Tensor::cat(&[&rotated, &pass], D::Minus1)?)
    }

    /// The rows `at` of the tables of `f`, grown in `cache` as longer sequences ask.
    fn cache_rows(
        &self,
        f: &Frequencies,
        cache: &GrowingTables,
        at: Positions,
        len: usize,
    ) -> Result<Vec<Tensor>> {
        cache.rows(at, len, |n| self.angles(f, n, |p| p))
    }

    /// `[attention · cos, attention · sin]` of `position(p) · θ_i` for rows `p < n`.
    fn angles(
        &self,
        f: &Frequencies,
        n: usize,
        position: impl Fn(usize) -> usize,
    ) -> Result<Vec<Tensor>> {
        let half = self.rotary_dim / 2;
        let angle = |p: usize, i: usize| position(p) as f64 / self.position_scale * f.inv_freq[i];
        Ok(vec![
            tensor_from_fn(n, half, &self.device, |p, i| {
                f.attention * angle(p, i).cos()
            })?,
            tensor_from_fn(n, half, &self.device, |p, i| {
                f.attention * angle(p, i).sin()
            })?,
        ])
    }
}

impl PositionalEncoding for Rope {
    fn kind(&self) -> &'static str {
        RopeConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rotates: true,
            ..Capabilities::default()
        }
    }

    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let (cos, sin) = self.cos_sin(cx.at, x.dims().get(2).copied().unwrap_or(0))?;
        self.rotate_with(x, &cos, &sin)
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.table_at(Positions::From(0), len)
    }

    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        let (cos, sin) = self.cos_sin(at, len)?;
        Ok(Table {
            title: "rotation by pos · θ_i".into(),
            form: Form::Rotary { cos, sin },
        })
    }
}

/// A [`Rope`] under another kind's name, whose table adds what that kind changed: the
/// kinds that stop some of RoPE's pairs (`p-rope`, `hope`) are this.
#[derive(Debug)]
pub struct NamedRope {
    kind: &'static str,
    rope: Rope,
    note: String,
}

impl NamedRope {
    /// `rope` as the kind `kind`, its table's title followed by `note`.
    pub fn new(kind: &'static str, rope: Rope, note: String) -> Self {
        Self { kind, rope, note }
    }
}

impl PositionalEncoding for NamedRope {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn capabilities(&self) -> Capabilities {
        self.rope.capabilities()
    }

    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        self.rope.rotate(x, cx)
    }

    fn table(&self, len: usize) -> Result<Table> {
        self.table_at(Positions::From(0), len)
    }

    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        let mut table = self.rope.table_at(at, len)?;
        table.title = format!("{}; {}", table.title, self.note);
        Ok(table)
    }
}
