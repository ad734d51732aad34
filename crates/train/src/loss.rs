//! Cross-entropy with label smoothing that ignores padding (Szegedy et al. 2016; "Attention
//! Is All You Need" §5.4 uses ε = 0.1).
//!
//! With `V` classes and the target distribution `q = (1 − ε)·onehot(y) + ε/V` (PyTorch's
//! `CrossEntropyLoss(label_smoothing=ε, ignore_index=pad)`):
//!
//! ```text
//! ℓ_i = (1 − ε)·(−log p_i[y_i]) + ε·mean_c(−log p_i[c]),     loss = Σ_{y_i ≠ pad} ℓ_i / #{y_i ≠ pad}
//! ```

use anyhow::{ensure, Result};
use candle_core::{DType, Tensor, D};

/// Mean label-smoothed negative log-likelihood of `targets (n)` under `log_probs (n, V)`,
/// over the targets that are not `pad`.
pub fn label_smoothed_nll(
    log_probs: &Tensor,
    targets: &Tensor,
    smoothing: f64,
    pad: u32,
) -> Result<Tensor> {
    let (n, _) = log_probs.dims2()?;
    ensure!(
        targets.dims() == [n],
        "targets {:?} do not match log-probabilities {:?}",
        targets.dims(),
        log_probs.dims()
    );
    ensure!(
        (0.0..1.0).contains(&smoothing),
        "label smoothing must be in [0, 1), got {smoothing}"
    );
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
