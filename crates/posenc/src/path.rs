//! `path`: PaTH attention (Yang, Shen, Wen, Tan, Mishra, Ren, Panda & Kim, NeurIPS 2025;
//! fla's `PaTHAttention`).
//!
//! RoPE turns a key by a fixed rotation per position. PaTH turns it by transforms read from
//! the data, one per token, accumulated along the way from the key to the query:
//!
//! ```text
//! H_t  = I − β_t w_t w_tᵀ,   w_t = l2norm(silu(conv(x W_w))_t),   β_t = 2·σ(x_t·w_β + b_β)
//! S_ij = q_iᵀ H_i H_(i−1) ⋯ H_(j+1) k_j
//! ```
//!
//! `β ∈ (0, 2)` lets a transform's eigenvalue `1 − β` turn negative (a reflection). The
//! mathematics is [`crate::householder`]; this file reads `w` and `β` from the layer's
//! input as fla's layer does: `w` through a rank-32 bottleneck (`use_low_rank_w`) and a
//! causal depthwise convolution of width 3 with a SiLU (`use_w_shortconv`), per key head.
//! An optional forget gate (FoX's, `use_forget_gate`) adds `Σ ln σ(x·w_g + b_g)` between
//! key and query *before* the scale, as fla's kernels do.
//!
//! As FoX, every layer has weights of its own (`N.w_proj…`, `N.bt_proj…`, `N.g_proj…`).

use std::sync::Arc;

use candle_core::{DType, Tensor, D};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{require, Decay, FromInput, PositionalEncoding, Table};
use crate::householder::Householders;
use crate::per_layer::{layer_count, PerLayer};
use crate::{Capabilities, Direction, EncodingSpec, InputContext, Result, Target};

/// The settings of `path`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathConfig {
    /// The rank of `w`'s projection, through a bottleneck (fla's 32), or `null` for a full
    /// projection.
    #[serde(default = "PathConfig::default_low_rank")]
    pub low_rank: Option<usize>,
    /// The width of the causal depthwise convolution (SiLU after) on `w` (fla's 3), or
    /// `null` for none.
    #[serde(default = "PathConfig::default_short_conv")]
    pub short_conv: Option<usize>,
    /// FoX's forget gate beside the transforms.
    #[serde(default)]
    pub forget_gate: bool,
    /// Tokens per chunk of the UT transform (fla's 64): a power of two.
    #[serde(default = "PathConfig::default_chunk")]
    pub chunk: usize,
}

impl Default for PathConfig {
    fn default() -> Self {
        Self {
            low_rank: Self::default_low_rank(),
            short_conv: Self::default_short_conv(),
            forget_gate: false,
            chunk: Self::default_chunk(),
        }
    }
}

impl PathConfig {
    fn default_low_rank() -> Option<usize> {
        Some(32)
    }

    fn default_short_conv() -> Option<usize> {
        Some(3)
    }

    fn default_chunk() -> usize {
        64
    }

    fn check(&self) -> Result<()> {
        require(
            Self::KIND,
            self.chunk.is_power_of_two(),
            format!("a chunk that is a power of two, got {}", self.chunk),
        )?;
        require(
            Self::KIND,
            self.low_rank != Some(0) && self.short_conv != Some(0),
            "a low_rank and a short_conv of at least 1 (null for none)",
        )
    }

    /// The weights of one direction of one layer, with the convolution where `convolves`.
    fn reading_parameters(&self, target: &Target, convolves: bool) -> u128 {
        let d = target.d_model as u128;
        let kv_heads = target.key_heads() as u128;
        let kv = kv_heads * (target.d_model / target.heads.max(1)) as u128;
        let w = match self.low_rank {
            Some(r) => r as u128 * (d + kv),
            None => d * kv,
        };
        let conv = (self.short_conv.filter(|_| convolves)).map_or(0, |k| k as u128 * kv);
        let beta = kv_heads * (d + 1);
        let gate = match self.forget_gate {
            true => target.heads as u128 * (d + 1),
            false => 0,
        };
        w + conv + beta + gate
    }

    /// One direction's projections under `vb`, as fla names them, with the short
    /// convolution where `convolves`.
    fn reading(&self, target: &Target, vb: &VarBuilder, convolves: bool) -> Result<Reading> {
        let (d, heads, kv_heads) = (target.d_model, target.heads, target.key_heads());
        let kv = kv_heads * target.head_dim()?;
        let uniform = |fan_in: usize| {
            let bound = 1.0 / (fan_in as f64).sqrt();
            Init::Uniform {
                lo: -bound,
                up: bound,
            }
        };
        // PyTorch's `nn.Linear` and `nn.Conv1d` initialization.
        let linear = |vb: VarBuilder, rows: usize, cols: usize| -> Result<Tensor> {
            Ok(vb.get_with_hints((rows, cols), "weight", uniform(cols))?)
        };
        let affine = |vb: VarBuilder, rows: usize| -> Result<(Tensor, Tensor)> {
            let bias = vb.get_with_hints(rows, "bias", uniform(d))?;
            Ok((linear(vb, rows, d)?, bias))
        };
        let w_proj = match self.low_rank {
            Some(r) => vec![
                linear(vb.pp("w_proj.0"), r, d)?,
                linear(vb.pp("w_proj.1"), kv, r)?,
            ],
            None => vec![linear(vb.pp("w_proj"), kv, d)?],
        };
        let conv = (self.short_conv.filter(|_| convolves))
            .map(|k| {
                vb.pp("w_conv1d")
                    .get_with_hints((kv, 1, k), "weight", uniform(k))
            })
            .transpose()?;
        let gate = match self.forget_gate {
            true => Some(affine(vb.pp("g_proj"), heads)?),
            false => None,
        };
        Ok(Reading {
            w_proj,
            conv,
            beta: affine(vb.pp("bt_proj"), kv_heads)?,
            gate,
            head_dim: target.head_dim()?,
            chunk: self.chunk,
        })
    }
}

impl EncodingSpec for PathConfig {
    const KIND: &'static str = "path";

    /// Each layer `N` reads under `N.` (fla's names: `w_proj.0`, `w_proj.1`, `w_conv1d`,
    /// `bt_proj`, `g_proj`), and in bidirectional attention the keys after a query under
    /// `N.after.`.
    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        self.check()?;
        let layers = PerLayer::build(target, &vb, |vb| {
            let after = match target.direction {
                Direction::Causal => None,
                // Without the convolution, which backwards would read the padding after a
                // sequence's last token into it.
                Direction::Bidirectional => Some(self.reading(target, &vb.pp("after"), false)?),
            };
            Ok(PathLayer {
                before: self.reading(target, &vb, true)?,
                after,
                heads: target.heads,
            })
        })?;
        Ok(Arc::new(layers))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        let after = match target.direction {
            Direction::Causal => 0,
            Direction::Bidirectional => self.reading_parameters(target, false),
        };
        let layers = layer_count(target) as u128;
        (self.reading_parameters(target, true) + after) * layers
    }
}

/// PaTH for every layer of a stack; asked directly, it answers as the first layer's.
pub type Path = PerLayer<PathLayer>;

/// One layer's PaTH: the projections for the keys before each query, and in bidirectional
/// attention a second set for the keys after it, read over the reversed sequence (as FoX's
/// second gates mirror its first) without the short convolution: backwards it would read
/// the padding after a sequence into its last tokens.
#[derive(Debug)]
pub struct PathLayer {
    before: Reading,
    after: Option<Reading>,
    heads: usize,
}

impl PositionalEncoding for PathLayer {
    fn kind(&self) -> &'static str {
        PathConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reads_input: true,
            transforms: true,
            input_history: self
                .before
                .conv
                .as_ref()
                .map_or(0, |c| c.dim(2).unwrap_or(1) - 1),
            ..Capabilities::default()
        }
    }

    /// # Shapes
    /// - `cx.input`: `(batch, seq, d_model)`; `cx.before`: `(batch, earlier, d_model)`
    /// - `w`: `(batch, kv_heads, seq, head_dim)`; `β`: `(batch, kv_heads, seq)`
    /// - the forget gate's [`Decay`]: `(batch, heads, seq)`
    ///
    /// # Errors
    /// Earlier rows in bidirectional attention, which a cache never serves.
    fn read_input(&self, cx: &InputContext) -> Result<FromInput> {
        let x = cx.input.to_dtype(DType::F32)?;
        let early = match cx.before {
            Some(e) => Some(e.to_dtype(DType::F32)?),
            None => None,
        };
        let transforms = self.before.transforms(&x, early.as_ref())?;
        let gates = self.before.log_gates(&x)?;
        let Some(after) = &self.after else {
            return Ok(FromInput {
                decay: gates.map(|before| Decay {
                    before,
                    after: None,
                }),
                transforms: Some(transforms),
            });
        };
        if early.is_some() {
            return Err(crate::Error::Config(format!(
                "`{}`: a key/value cache serves causal attention, not transforms of the keys after a query",
                PathConfig::KIND
            )));
        }
        // The sequence read backwards, then its transforms put back in order.
        let n = x.dim(1)?;
        let reversed: Vec<u32> = (0..n as u32).rev().collect();
        let reversed = Tensor::new(reversed.as_slice(), x.device())?;
        let mirror = after.transforms(&x.contiguous()?.index_select(&reversed, 1)?, None)?;
        let w = mirror.w().index_select(&reversed, 2)?;
        let beta = mirror.beta().index_select(&reversed, 2)?;
        let mirror = Householders::new(&w, &beta)?.with_chunk(after.chunk)?;
        let decay = match (gates, after.log_gates(&x)?) {
            (Some(before), Some(after)) => Some(Decay {
                before,
                after: Some(after),
            }),
            _ => None,
        };
        Ok(FromInput {
            decay,
            transforms: Some(transforms.with_after(mirror)?),
        })
    }

    /// On a zero input every `w` is 0 and every transform `I`: no bias at all (the forget
    /// gate's resting decay aside, which this table leaves out).
    fn table(&self, len: usize) -> Result<Table> {
        let device = self.before.beta.0.device();
        let bias = Tensor::zeros((self.heads, len, len), DType::F32, device)?;
        Ok(Table::bias(
            "PaTH on a zero input: w = 0, every transform I, no bias",
            bias,
        ))
    }
}

/// The projections of one direction of one layer: `w`, `β` and the forget gate.
#[derive(Debug)]
struct Reading {
    /// `w`'s projection: one `(kv·head_dim, d_model)`, or a bottleneck's two.
    w_proj: Vec<Tensor>,
    /// The depthwise convolution `(kv·head_dim, 1, width)`, if any.
    conv: Option<Tensor>,
    /// `β`'s projection `(kv, d_model)` and bias `(kv)`.
    beta: (Tensor, Tensor),
    /// The forget gate's projection `(heads, d_model)` and bias, if any.
    gate: Option<(Tensor, Tensor)>,
    head_dim: usize,
    chunk: usize,
}

impl Reading {
    /// `x (batch, seq, d)` times a `(rows, d)` weight, plus a bias.
    fn project(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let y = x.broadcast_matmul(&weight.to_dtype(x.dtype())?.t()?)?;
        Ok(match bias {
            Some(b) => y.broadcast_add(&b.to_dtype(x.dtype())?)?,
            None => y,
        })
    }

    /// The causal depthwise convolution of `x (batch, seq, channels)`, `early` of whose
    /// first rows are the input before this read (the rest zeros), then SiLU; the rows
    /// after those `early`.
    fn convolve(&self, x: &Tensor, early: usize) -> Result<Tensor> {
        let Some(conv) = &self.conv else {
            return Ok(x.narrow(1, early, x.dim(1)? - early)?);
        };
        let width = conv.dim(2)?;
        let n = x.dim(1)? - early;
        // Zeros before the sequence's first row, as fla's convolution pads.
        let padded = x.pad_with_zeros(1, (width - 1).saturating_sub(early), 0)?;
        let start = padded.dim(1)? - n - (width - 1);
        let mut sum = padded.zeros_like()?.narrow(1, 0, n)?;
        for s in 0..width {
            let tap = conv
                .narrow(2, s, 1)?
                .squeeze(2)?
                .squeeze(1)?
                .to_dtype(x.dtype())?;
            sum = (sum + padded.narrow(1, start + s, n)?.broadcast_mul(&tap)?)?;
        }
        Ok(candle_nn::ops::silu(&sum)?)
    }

    /// `w` and `β` of `x (batch, seq, d_model)` (f32), after the rows `early`.
    fn transforms(&self, x: &Tensor, early: Option<&Tensor>) -> Result<Householders> {
        let (b, n, _) = x.dims3()?;
        let all = match early {
            Some(e) => Tensor::cat(&[e, x], 1)?,
            None => x.clone(),
        };
        let w = (self.w_proj.iter()).try_fold(all, |h, weight| Self::project(&h, weight, None))?;
        let w = self.convolve(&w, early.map_or(Ok(0), |e| e.dim(1))?)?;
        let kv = w.dim(2)? / self.head_dim;
        let w = w.reshape((b, n, kv, self.head_dim))?.transpose(1, 2)?;
        // fla's l2_norm: w / √(Σw² + 10⁻⁶).
        let norm = (w.sqr()?.sum_keepdim(D::Minus1)? + 1e-6)?.sqrt()?;
        let w = w.broadcast_div(&norm)?.contiguous()?;
        let (weight, bias) = &self.beta;
        let beta = (candle_nn::ops::sigmoid(&Self::project(x, weight, Some(bias))?)? * 2.0)?;
        let beta = beta.transpose(1, 2)?.contiguous()?;
        Householders::new(&w, &beta)?.with_chunk(self.chunk)
    }

    /// The forget gate's log-gates `(batch, heads, seq)` of `x` (f32), times the scale
    /// `1/√head_dim` (fla adds them before it scales; attention adds a decay after), as
    /// `ln σ(z) = −relu(−z) − ln(1 + e^(−|z|))`, which neither overflows nor loses the small
    /// gates; `None` without a gate.
    fn log_gates(&self, x: &Tensor) -> Result<Option<Tensor>> {
        let Some((weight, bias)) = &self.gate else {
            return Ok(None);
        };
        let z = Self::project(x, weight, Some(bias))?;
        let tail = (z.abs()?.neg()?.exp()? + 1.0)?.log()?;
        let log_gates = (z.neg()?.relu()?.neg()? - tail)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        Ok(Some((log_gates * scale)?.transpose(1, 2)?.contiguous()?))
    }
}
