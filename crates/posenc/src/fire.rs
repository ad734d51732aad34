//! `fire`: functional interpolation for relative positions (Li, You, Bhojanapalli, Li,
//! Rawat, Reddi, Ye, Chern, Yu, Guo & Kumar 2023, "Functional Interpolation for Relative
//! Positions Improves Long Context Transformers").
//!
//! A small MLP `f_θ: ℝ → ℝᴴ` maps the query–key distance, log-scaled and divided by the
//! query's own (thresholded) position, to one bias per head:
//!
//! ```text
//! bias(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) ),   ψ(x) = ln(|c·x| + 1)
//! f_θ(x)     = W₂ · relu(W₁·x + b₁) + b₂          (hidden width 32)
//! ```
//!
//! The normalisation puts every distance a query sees in `[0, 1]` however long the
//! sequence is (progressive interpolation), so a longer sequence reuses the inputs the
//! MLP was trained on; `ψ` stretches the near distances apart. `c` and the threshold `L`
//! are learned: `L = |ℓ · L₀|` with the multiplier `ℓ` learned from 1 and `L₀` set in the
//! config (the paper's pseudo-code, with `c₀ = 0.1`, `L₀ = 512`; the denominator gets
//! `+ 10⁻⁶`). The paper shows the form can express T5's buckets, ALiBi and Kerple.
//!
//! **The threshold and short contexts.** Below `L` every query divides by `ψ(L)`, so a model
//! trained on contexts shorter than `L` sees MLP inputs only up to `ψ(context)/ψ(L)` (0.50
//! for a context of 64 and `L₀ = 512`), and past its context meets inputs up to 1 it never
//! trained on. Set `threshold` at or below the training context to train on all of `[0, 1)`;
//! the README measures both.
//!
//! The paper's models are causal: later keys are masked, and their distance is 0 here. In
//! an encoder the distance is `|i − j|` (the pseudo-code's `abs`), so a key after the
//! query may give an input above 1.
//!
//! Weights (the pseudo-code's `state_dict` names): `mlp.0.weight` `(width, 1)`,
//! `mlp.0.bias` `(width,)`, `mlp.2.weight` `(heads, width)`, `mlp.2.bias` `(heads,)`,
//! `c` and `L_multiplier` (scalars). The linear layers start as PyTorch's `nn.Linear`
//! does, uniform in `±1/√fan_in`.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cache::GeometryCache;
use crate::encoding::{distances, require, PositionalEncoding, Table};
use crate::{BiasContext, Capabilities};
use crate::{Direction, EncodingSpec, Positions, Result, Target};

/// The settings of `fire`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FireConfig {
    /// The MLP's hidden width (32 in the paper).
    #[serde(default = "FireConfig::default_width")]
    pub mlp_width: usize,
    /// The initial `c` of `ψ(x) = ln(|c·x| + 1)`.
    #[serde(default = "FireConfig::default_c")]
    pub c: f64,
    /// `L₀`: the threshold `L` starts here, and is learned as a multiple of it.
    #[serde(default = "FireConfig::default_threshold")]
    pub threshold: f64,
}

impl Default for FireConfig {
    fn default() -> Self {
        Self {
            mlp_width: Self::default_width(),
            c: Self::default_c(),
            threshold: Self::default_threshold(),
        }
    }
}

impl FireConfig {
    fn default_width() -> usize {
        32
    }
    fn default_c() -> f64 {
        0.1
    }
    fn default_threshold() -> f64 {
        512.0
    }

    fn check(&self) -> Result<()> {
        const KIND: &str = FireConfig::KIND;
        // The MLP's hidden layer is `(q_len · k_len, width)`: the paper's 32 is far below this.
        crate::limits::check_positive("mlp_width", self.mlp_width, 1024)?;
        require(
            KIND,
            self.c.is_finite() && self.c > 0.0,
            format!("c > 0, got {}", self.c),
        )?;
        require(
            KIND,
            self.threshold.is_finite() && self.threshold > 0.0,
            format!("threshold > 0, got {}", self.threshold),
        )
    }
}

impl EncodingSpec for FireConfig {
    const KIND: &'static str = "fire";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Fire::new(
            self,
            target.heads,
            target.direction,
            vb,
        )?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        let (w, h) = (self.mlp_width as u128, target.heads as u128);
        2 * w + w * h + h + 2
    }
}

/// A learned function of the normalised, log-scaled distance: one small MLP with an output
/// per head, shared by the layers of the stack that holds it (as every bias here is).
#[derive(Debug)]
pub struct Fire {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    c: Tensor,
    l_multiplier: Tensor,
    threshold: f64,
    direction: Direction,
    device: Device,
    cache: GeometryCache,
}

impl Fire {
    /// Loads or creates the MLP, `c` and `L_multiplier` under `vb`, for `heads` heads.
    ///
    /// # Errors
    /// A setting out of its domain (`c` or `threshold` not positive, width 0).
    pub fn new(
        cfg: &FireConfig,
        heads: usize,
        direction: Direction,
        vb: VarBuilder,
    ) -> Result<Self> {
        cfg.check()?;
        crate::limits::check_positive("heads", heads, crate::limits::MAX_HEADS)?;
        let width = cfg.mlp_width;
        let bound = |fan_in: usize| {
            let b = 1.0 / (fan_in as f64).sqrt();
            Init::Uniform { lo: -b, up: b }
        };
        Ok(Self {
            w1: vb.get_with_hints((width, 1), "mlp.0.weight", bound(1))?,
            b1: vb.get_with_hints(width, "mlp.0.bias", bound(1))?,
            w2: vb.get_with_hints((heads, width), "mlp.2.weight", bound(width))?,
            b2: vb.get_with_hints(heads, "mlp.2.bias", bound(width))?,
            c: vb.get_with_hints((), "c", Init::Const(cfg.c))?,
            l_multiplier: vb.get_with_hints((), "L_multiplier", Init::Const(1.0))?,
            threshold: cfg.threshold,
            direction,
            device: vb.device().clone(),
            cache: GeometryCache::default(),
        })
    }

    /// The `(q_len, k_len)` inputs of the MLP, `ψ(i − j) / ψ(max(L, i))`, differentiable in
    /// `c` and `L_multiplier`.
    pub fn normalized_distances(
        &self,
        q_len: usize,
        k_len: usize,
        q: Positions,
        k: Positions,
    ) -> Result<Tensor> {
        let d = self
            .cache
            .get(FireConfig::KIND, (q_len, k_len), (q, k), || {
                distances(self.direction, q_len, k_len, q, k, &self.device)
            })?;
        let i: Vec<f32> = (0..q_len).map(|t| q.get(t) as f32).collect();
        let i = Tensor::from_vec(i, (q_len, 1), &self.device)?;
        let c = self.c.to_dtype(DType::F32)?.abs()?;
        let threshold = (self.l_multiplier.to_dtype(DType::F32)? * self.threshold)?.abs()?;
        // ψ(x) = ln(|c·x| + 1); x ≥ 0 here, so |c·x| = |c|·x.
        let psi = |x: &Tensor| -> Result<Tensor> { Ok((x.broadcast_mul(&c)? + 1.0)?.log()?) };
        let numerator = psi(&d)?;
        let denominator = (psi(&i.broadcast_maximum(&threshold)?)? + 1e-6)?;
        Ok(numerator.broadcast_div(&denominator)?)
    }

    /// The `(heads, q_len, k_len)` bias of `q_len` queries at `q` against `k_len` keys at
    /// `k`, differentiable in every weight.
    pub fn bias(&self, q_len: usize, k_len: usize, q: Positions, k: Positions) -> Result<Tensor> {
        let x = self
            .normalized_distances(q_len, k_len, q, k)?
            .reshape((q_len * k_len, 1))?;
        let f32 = |t: &Tensor| t.to_dtype(DType::F32);
        let (w1, b1, w2, b2) = (
            f32(&self.w1)?,
            f32(&self.b1)?,
            f32(&self.w2)?,
            f32(&self.b2)?,
        );
        let width = w1.dim(0)?;
        // W₁ is (width, 1): the first layer is an outer product.
        let hidden = x
            .broadcast_mul(&w1.reshape((1, width))?)?
            .broadcast_add(&b1)?
            .relu()?;
        let out = hidden.matmul(&w2.t()?)?.broadcast_add(&b2)?;
        let heads = out.dim(1)?;
        Ok(out.t()?.reshape((heads, q_len, k_len))?.contiguous()?)
    }
}

impl PositionalEncoding for Fire {
    fn kind(&self) -> &'static str {
        FireConfig::KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            biases: true,
            ..Capabilities::default()
        }
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        Ok(Some(self.bias(cx.q_len, cx.k_len, cx.q, cx.k)?))
    }

    fn table(&self, len: usize) -> Result<Table> {
        let bias = self.bias(len, len, 0.into(), 0.into())?;
        Ok(Table::bias(
            "bias = f(ψ(i − j) / ψ(max(L, i))), learned",
            bias,
        ))
    }
}
