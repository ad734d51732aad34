//! `mrope`: multimodal rotary embedding (Qwen2-VL, Wang et al. 2024; Qwen3-VL's interleaved
//! form), in which a token sits at a time, a row and a column, `(t, h, w)`.
//!
//! Each pair `i` of a head turns as RoPE's does, by `coord · θ_i`, but the coordinate is one
//! of the token's three, by the pair's section:
//!
//! ```text
//! θ_i = rope_theta^(−2i/d),   i = 0 … d/2 − 1,   d/2 = s_t + s_h + s_w
//! chunked (Qwen2-VL):      pairs [0, s_t) read t, [s_t, s_t + s_h) read h, the rest w
//! interleaved (Qwen3-VL):  pair i reads h if i mod 3 = 1 and i < 3·s_h,
//!                          w if i mod 3 = 2 and i < 3·s_w, t otherwise
//! ```
//!
//! in transformers' half-split layout (`rotate_half`). A text token sits at `(p, p, p)`, so
//! a sequence of text alone turns exactly as `rope` turns it. Positions come as data
//! ([`Positions::Coords`] with three axes, one row per token; one position per token is a
//! text token's on all three), and [`layout`] places a sequence of text and images by
//! Qwen2-VL's rule (`get_rope_index`). The settings are transformers' `rope_parameters`
//! keys: `rope_theta`, `mrope_section`, `mrope_interleaved`.

use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{check_base, require, tensor_from_fn, Form, PositionalEncoding, Table};
use crate::rope::Rope;
use crate::Target;
use crate::{Capabilities, EncodingSpec, Error, PairLayout, Positions, Result, RotateContext};

/// The settings of `mrope`, under transformers' names.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MropeConfig {
    /// The wavelength base (Qwen2-VL's 1 000 000).
    #[serde(default = "MropeConfig::default_theta")]
    pub rope_theta: f64,
    /// Pairs per axis, time, height and width, adding up to half the head width; left out,
    /// Qwen2-VL's shares of it (a quarter for time, the rest halved: `[16, 24, 24]` for
    /// heads of 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mrope_section: Option<[usize; 3]>,
    /// Qwen3-VL's interleaved sections instead of Qwen2-VL's chunks.
    #[serde(default)]
    pub mrope_interleaved: bool,
}

impl MropeConfig {
    fn default_theta() -> f64 {
        1_000_000.0
    }
    /// The sections for `half` pairs: the given ones, or Qwen2-VL's shares.
    pub fn sections(&self, half: usize) -> [usize; 3] {
        self.mrope_section.unwrap_or_else(|| {
            let t = half / 4;
            let h = (half - t) / 2;
            [t, h, half - t - h]
        })
    }
}

impl Default for MropeConfig {
    fn default() -> Self {
        Self {
            rope_theta: Self::default_theta(),
            mrope_section: None,
            mrope_interleaved: false,
        }
    }
}

impl EncodingSpec for MropeConfig {
    const KIND: &'static str = "mrope";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Mrope::new(self, target.head_dim()?, vb.device())?))
    }
}

/// Multimodal rotary embedding of queries and keys.
#[derive(Debug)]
pub struct Mrope {
    /// The rotation of a text token, and of any token once its tables are made.
    rope: Rope,
    /// `θ_i` for each pair.
    inv_freq: Vec<f64>,
    /// The axis (0 time, 1 height, 2 width) each pair reads.
    axis: Vec<usize>,
    interleaved: bool,
    device: candle_core::Device,
}

impl Mrope {
    /// The rotation of heads of width `head_dim` by `cfg`.
    ///
    /// # Errors
    /// An odd head width, a base out of range, or sections that do not add up to half the
    /// head width.
    pub fn new(cfg: &MropeConfig, head_dim: usize, device: &candle_core::Device) -> Result<Self> {
        let kind = MropeConfig::KIND;
        check_base(kind, cfg.rope_theta)?;
        let rope = Rope::new(head_dim, cfg.rope_theta, PairLayout::Halves, 1.0, device)?;
        let half = head_dim / 2;
        let [t, h, w] = cfg.sections(half);
        require(
            kind,
            t + h + w == half,
            format!(
                "mrope_section adding up to half the head width ({half}), got {:?} = {}",
                [t, h, w],
                t + h + w
            ),
        )?;
        let axis = (0..half)
            .map(|i| match cfg.mrope_interleaved {
                false if i < t => 0,
                false if i < t + h => 1,
                false => 2,
                true if i % 3 == 1 && i < 3 * h => 1,
                true if i % 3 == 2 && i < 3 * w => 2,
                true => 0,
            })
            .collect();
        let inv_freq = (0..half)
            .map(|i| cfg.rope_theta.powf(-((2 * i) as f64) / head_dim as f64))
            .collect();
        Ok(Self {
            rope,
            inv_freq,
            axis,
            interleaved: cfg.mrope_interleaved,
            device: device.clone(),
        })
    }

    /// The axis (0 time, 1 height, 2 width) that pair `i` reads.
    pub fn axis_of(&self, i: usize) -> usize {
        self.axis[i]
    }

    /// `(cos, sin)`, each `(len, head_dim/2)` f32, of the `len` tokens `at` (three
    /// coordinates each, or one position a token, a text token's on every axis).
    ///
    /// # Errors
    /// Coordinates of another number of axes or tokens, or a list of positions that is not
    /// one per token.
    pub fn cos_sin(&self, at: Positions, len: usize) -> Result<(Tensor, Tensor)> {
        if !matches!(at, Positions::Coords { .. }) {
            return self.rope.cos_sin(at, len);
        }
        at.check_coords(MropeConfig::KIND, len, 3)?;
        let angle = |p: usize, i: usize| at.coord(p, self.axis[i]) as f64 * self.inv_freq[i];
        let (half, dev) = (self.inv_freq.len(), &self.device);
        Ok((
            tensor_from_fn(len, half, dev, |p, i| angle(p, i).cos())?,
            tensor_from_fn(len, half, dev, |p, i| angle(p, i).sin())?,
        ))
    }
}

impl PositionalEncoding for Mrope {
    fn kind(&self) -> &'static str {
        MropeConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            coords: 3,
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
        let form = match self.interleaved {
            true => "interleaved",
            false => "chunked",
        };
        let place = match at {
            Positions::Coords { .. } => "each token at its (t, h, w)",
            _ => "text at (p, p, p)",
        };
        Ok(Table {
            title: format!("rotation by coord · θ_i, {form} sections; {place}"),
            form: Form::Rotary { cos, sin },
        })
    }
}

/// A piece of a sequence that [`layout`] places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// This many text tokens.
    Text(usize),
    /// An image (or a video) of `t × h × w` tokens, as the language model sees them: after
    /// the vision encoder merges its patches (Qwen2-VL's grid divided by its
    /// `spatial_merge_size`), row after row, frame after frame.
    Image {
        /// Frames.
        t: usize,
        /// Rows.
        h: usize,
        /// Columns.
        w: usize,
    },
}

/// The largest coordinate [`layout`] places: far past any context, still exact in f32.
const MAX_COORD: usize = 1 << 24;

/// The coordinates `(t, h, w)` of a sequence of text and images, token after token, three
/// per token (for [`Positions::Coords`] with `axes: 3`), by Qwen2-VL's rule
/// (transformers' `Qwen2VLModel.get_rope_index`): text tokens count up from the last
/// position, one index on all three axes; an image's tokens sit at `start + (t, h, w)`,
/// where `start` is the next position; the text after it goes on from
/// `start + max(h, w)`.
///
/// # Errors
/// An image with no frames, rows or columns, or a sequence whose positions pass 2²⁴.
pub fn layout(segments: &[Segment]) -> Result<Vec<u32>> {
    let mut coords = Vec::new();
    let mut next = 0usize;
    let too_far = || Error::Config(format!("`mrope` places positions below {MAX_COORD} only"));
    for segment in segments {
        match *segment {
            Segment::Text(n) => {
                if next + n > MAX_COORD {
                    return Err(too_far());
                }
                for p in next..next + n {
                    coords.extend([p as u32; 3]);
                }
                next += n;
            }
            Segment::Image { t, h, w } => {
                require(
                    MropeConfig::KIND,
                    t > 0 && h > 0 && w > 0,
                    format!("an image of at least one frame, row and column, got {t} × {h} × {w}"),
                )?;
                if next + t.max(h).max(w) > MAX_COORD || t * h * w > MAX_COORD {
                    return Err(too_far());
                }
                for ti in 0..t {
                    for hi in 0..h {
                        for wi in 0..w {
                            coords.extend([next + ti, next + hi, next + wi].map(|c| c as u32));
                        }
                    }
                }
                next += h.max(w);
            }
        }
    }
    Ok(coords)
}
