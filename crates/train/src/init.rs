//! Seeded initialisation, so the same seed gives the same model (candle's CPU random
//! generator cannot be seeded).
//!
//! As the Annotated Transformer: every matrix (rank ≥ 2) is Glorot/Xavier-uniform,
//! `U(−a, a)` with `a = √(6 / (fan_in + fan_out))`; biases are zero and LayerNorm gains one.

use crate::error::Result;
use candle_core::Tensor;
use candle_nn::VarMap;
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
