//! Dropout (Srivastava et al. 2014; "Attention Is All You Need" §5.4), and the one rule
//! that says when a model is training.
//!
//! A model trains exactly when gradients flow through it: its weights are candle `Var`s
//! (built over a `VarMap`), so every activation tracks the ops that made it. Then dropout
//! acts. A model built over plain tensors ([`crate::Transformer::frozen`],
//! [`crate::LanguageModel::frozen`], any loaded checkpoint) is in evaluation, and dropout
//! is the identity. This is the only place the mode is decided: no forward function takes
//! a `train` flag. (burn's `Dropout` decides the same way, from its autodiff backend.)

use candle_core::Tensor;

/// Whether dropout with probability `p` acts on `x`: `p > 0` and `x` tracks gradients.
pub fn active(x: &Tensor, p: f32) -> bool {
    p > 0.0 && x.track_op()
}

/// Dropout with probability `p` while training ([`active`]), the identity otherwise.
pub fn dropout(x: &Tensor, p: f32) -> candle_core::Result<Tensor> {
    match active(x, p) {
        true => candle_nn::ops::dropout(x, p),
        false => Ok(x.clone()),
    }
}
