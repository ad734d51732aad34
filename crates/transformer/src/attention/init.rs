//! The projections' weights, loaded or created.

use candle_nn::{init, Init, VarBuilder};

use crate::linear::Proj;
use crate::{BlockConfig, Result};

/// `W^Q, W^K, W^V, W^O` as `cfg` describes them, from PyTorch's packed `in_proj_weight`
/// (with `in_proj_bias` if `cfg.bias`), or from `q_proj`, `k_proj` and `v_proj` when `vb`
/// holds those and no packed one; a new model creates the packed form. Then `out_proj`.
pub(super) fn projections(cfg: &BlockConfig, vb: &VarBuilder) -> Result<[Proj; 4]> {
    let (d_model, bias) = (cfg.d_model, cfg.bias);
    let kv_dim = cfg.kv_heads * cfg.head_dim();
    let [q_proj, k_proj, v_proj] =
        if !vb.contains_tensor("in_proj_weight") && vb.contains_tensor("q_proj.weight") {
            let load = |name: &str, rows: usize| Proj::load(d_model, rows, bias, vb.pp(name));
            [
                load("q_proj", d_model)?,
                load("k_proj", kv_dim)?,
                load("v_proj", kv_dim)?,
            ]
        } else {
            packed(d_model, kv_dim, bias, vb)?
        };
    let out_proj = Proj::load(d_model, d_model, bias, vb.pp("out_proj"))?;
    Ok([q_proj, k_proj, v_proj, out_proj])
}

/// Xavier-uniform `W^Q, W^K, W^V` packed in `in_proj_weight` (as PyTorch's
/// `_reset_parameters`), biases zero, as views of the packed tensors.
fn packed(d_model: usize, kv_dim: usize, bias: bool, vb: &VarBuilder) -> Result<[Proj; 3]> {
    let rows = d_model + 2 * kv_dim;
    let bound = (6.0 / (rows + d_model) as f64).sqrt();
    let w = vb.get_with_hints(
        (rows, d_model),
        "in_proj_weight",
        Init::Uniform {
            lo: -bound,
            up: bound,
        },
    )?;
    let b = bias
        .then(|| vb.get_with_hints(rows, "in_proj_bias", init::ZERO))
        .transpose()?;
    let part = |start: usize, len: usize| Proj::rows_of(&w, b.as_ref(), start..start + len);
    Ok([
        part(0, d_model)?,
        part(d_model, kv_dim)?,
        part(d_model + kv_dim, kv_dim)?,
    ])
}
