//! A model's variables as plain tensors: what a checkpoint saves, and what inference
//! builds from. A leaf: the models and the checkpoint both read it.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};

/// The variables of `varmap` by name, as tensors sharing their storage.
pub fn variables(varmap: &VarMap) -> HashMap<String, Tensor> {
    varmap
        .data()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect()
}

/// A builder over the variables of `varmap` as plain tensors (sharing their storage): a
/// model built from it carries no gradient, so inference takes candle's fused kernels.
pub fn frozen(varmap: &VarMap, device: &Device) -> VarBuilder<'static> {
    let tensors = variables(varmap)
        .into_iter()
        .map(|(k, v)| (k, v.detach()))
        .collect();
    VarBuilder::from_tensors(tensors, DType::F32, device)
}
