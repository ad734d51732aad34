//! Seeded initialisation, so the same seed gives the same model (candle's CPU random
//! generator cannot be seeded).
//!
//! As the Annotated Transformer: every matrix (rank ≥ 2) is Glorot/Xavier-uniform,
//! `U(−a, a)` with `a = √(6 / (fan_in + fan_out))`; biases are zero and LayerNorm gains one.

use crate::error::Result;
use candle_core::Tensor;
use candle_nn::{Init, VarMap};
use posenc_error::invalid;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Re-initialises every variable of `varmap` from `seed`, in name order.
pub fn initialize(varmap: &VarMap, seed: u64) -> Result<()> {
    let data = varmap
        .data()
        .lock()
        .map_err(|_| invalid!("poisoned VarMap"))?;
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for name in names {
        let var = &data[name];
        let dims = var.dims().to_vec();
        let t = if dims.len() >= 2 {
            let (fan_out, fan_in) = (dims[0], dims[1..].iter().product::<usize>());
            let a = (6.0 / (fan_in + fan_out) as f64).sqrt();
            let values: Vec<f32> = (0..var.elem_count())
                .map(|_| rng.random_range(-a..a) as f32)
                .collect();
            Tensor::from_vec(values, dims, var.device())?
        } else if name.ends_with("bias") {
            var.zeros_like()?
        } else {
            var.ones_like()?
        };
        var.set(&t.to_dtype(var.dtype())?)?;
    }
    Ok(())
}

/// A [`VarBuilder`](candle_nn::VarBuilder) whose new variables start as their modules ask
/// (each [`Init`] hint: candle's PyTorch-like defaults for linear layers, an encoding's own,
/// such as RoPE-Mixed's random angles or a learned table's normal), drawn from `seed`
/// rather than candle's unseeded generator. Each variable's draws come from its own stream
/// of a generator seeded by `seed` and its name, so they do not depend on the order modules
/// are built in. Variables already in `varmap` are returned as they are.
///
/// [`initialize`] instead redraws every variable by its rank alone; a task whose model
/// holds weights that must start as their paper starts them builds it through this.
pub fn seeded(
    varmap: &VarMap,
    seed: u64,
    device: &candle_core::Device,
) -> candle_nn::VarBuilder<'static> {
    let backend: Box<dyn candle_nn::var_builder::SimpleBackend> = Box::new(Seeded {
        varmap: varmap.clone(),
        seed,
    });
    candle_nn::VarBuilder::from_backend(backend, candle_core::DType::F32, device.clone())
}

struct Seeded {
    varmap: VarMap,
    seed: u64,
}

/// FNV-1a of `name`: the stream a variable's values come from.
fn stream_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `n` values of `init` for a variable of `shape`, from `rng`: Box–Muller for normals.
fn draw(init: Init, shape: &candle_core::Shape, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let n = shape.elem_count();
    let mut normal = || {
        let (u, v): (f64, f64) = (rng.random_range(f64::EPSILON..1.0), rng.random());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    };
    match init {
        Init::Const(c) => vec![c as f32; n],
        Init::Randn { mean, stdev } => (0..n).map(|_| (mean + stdev * normal()) as f32).collect(),
        Init::Uniform { lo, up } => (0..n).map(|_| rng.random_range(lo..up) as f32).collect(),
        Init::Kaiming {
            dist,
            fan,
            non_linearity,
        } => {
            let std = non_linearity.gain() / (fan.for_shape(shape) as f64).sqrt();
            match dist {
                candle_nn::init::NormalOrUniform::Normal => {
                    (0..n).map(|_| (std * normal()) as f32).collect()
                }
                candle_nn::init::NormalOrUniform::Uniform => {
                    let bound = 3f64.sqrt() * std;
                    (0..n)
                        .map(|_| rng.random_range(-bound..bound) as f32)
                        .collect()
                }
            }
        }
    }
}

impl candle_nn::var_builder::SimpleBackend for Seeded {
    fn get(
        &self,
        shape: candle_core::Shape,
        name: &str,
        init: Init,
        dtype: candle_core::DType,
        device: &candle_core::Device,
    ) -> candle_core::Result<Tensor> {
        let mut data = self
            .varmap
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("poisoned VarMap".into()))?;
        if let Some(var) = data.get(name) {
            let t = var.as_tensor();
            if t.shape() != &shape {
                candle_core::bail!("{name} has shape {:?}, not {:?}", t.dims(), shape.dims());
            }
            return Ok(t.clone());
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stream_of(name));
        let values = Tensor::from_vec(draw(init, &shape, &mut rng), shape, device)?;
        let var = candle_core::Var::from_tensor(&values.to_dtype(dtype)?)?;
        let t = var.as_tensor().clone();
        data.insert(name.to_string(), var);
        Ok(t)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _: candle_core::DType,
        _: &candle_core::Device,
    ) -> candle_core::Result<Tensor> {
        let data = self
            .varmap
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("poisoned VarMap".into()))?;
        match data.get(name) {
            Some(var) => Ok(var.as_tensor().clone()),
            None => candle_core::bail!("no variable {name}: it needs a shape to be made"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.varmap
            .data()
            .lock()
            .is_ok_and(|d| d.contains_key(name))
    }
}
