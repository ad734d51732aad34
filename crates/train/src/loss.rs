//! Cross-entropy with label smoothing that ignores padding (Szegedy et al. 2016; "Attention
//! Is All You Need" §5.4 uses ε = 0.1).
//!
//! With `V` classes and the target distribution `q = (1 − ε)·onehot(y) + ε/V` (PyTorch's
//! `CrossEntropyLoss(label_smoothing=ε, ignore_index=pad)`):
//!
//! ```text
//! ℓ_i = (1 − ε)·(−log p_i[y_i]) + ε·mean_c(−log p_i[c]),     loss = Σ_{y_i ≠ pad} ℓ_i / #{y_i ≠ pad}
//! ```
//!
//! [`label_smoothed_nll`] composes it from candle ops on log-probabilities;
//! [`label_smoothed_cross_entropy`] is the same loss fused with the log-softmax (a kernel of
//! `posenc-kernels`), one pass forward and one backward, and is what training uses.

use crate::error::Result;
use candle_core::{DType, Tensor, D};
use posenc_error::ensure;

/// Checks `scores (n, V)` against `targets (n)` and `smoothing ∈ [0, 1)`.
fn check_arguments(scores: &Tensor, targets: &Tensor, smoothing: f64) -> Result<()> {
    let (n, _) = scores.dims2()?;
    ensure!(
        targets.dims() == [n],
        "targets {:?} do not match the scores {:?}",
        targets.dims(),
        scores.dims()
    );
    ensure!(
        (0.0..1.0).contains(&smoothing),
        "label smoothing must be in [0, 1), got {smoothing}"
    );
    Ok(())
}

/// Mean label-smoothed negative log-likelihood of `targets (n)` under `log_probs (n, V)`,
/// over the targets that are not `pad`.
pub fn label_smoothed_nll(
    log_probs: &Tensor,
    targets: &Tensor,
    smoothing: f64,
    pad: u32,
) -> Result<Tensor> {
    check_arguments(log_probs, targets, smoothing)?;
    let nll = log_probs
        .gather(&targets.unsqueeze(1)?, 1)?
        .squeeze(1)?
        .neg()?;
    let uniform = log_probs.mean(D::Minus1)?.neg()?;
    let per_token = ((nll * (1.0 - smoothing))? + (uniform * smoothing)?)?;
    let keep = targets.ne(pad)?.to_dtype(log_probs.dtype())?;
    let count = keep.sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()?;
    ensure!(
        count > 0.0,
        "every target is padding: nothing to learn from"
    );
    Ok(((per_token * keep)?.sum_all()? / f64::from(count))?)
}

/// [`label_smoothed_nll`] of `log_softmax(logits)`, fused where the kernels can
/// ([`posenc_kernels::smoothed_cross_entropy`]: f32 on the CPU), one pass per row computing
/// the log-sum-exp, the loss and (in backward) the gradient `(softmax(z) − q)/count`, where
/// `q` is the smoothed target and `count` the number of targets that are not `pad`, never
/// forming the `(n, V)` log-probabilities. Elsewhere candle's ops compose the same loss.
///
/// # Errors
/// As [`label_smoothed_nll`].
pub fn label_smoothed_cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    smoothing: f64,
    pad: u32,
) -> Result<Tensor> {
    check_arguments(logits, targets, smoothing)?;
    match posenc_kernels::smoothed_cross_entropy(logits, targets, smoothing, pad)? {
        Some(loss) => Ok(loss),
        // The fused kernel is the CPU's; elsewhere candle's ops compose the same loss.
        None => {
            let log_probs = candle_nn::ops::log_softmax(logits, candle_core::D::Minus1)?;
            label_smoothed_nll(&log_probs, targets, smoothing, pad)
        }
    }
}
