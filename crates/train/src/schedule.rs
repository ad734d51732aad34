//! The learning-rate schedule of "Attention Is All You Need" §5.3 (the "Noam" schedule).
//!
//! ```text
//! lr(step) = factor · d_model^(−1/2) · min(step^(−1/2), step · warmup^(−3/2))
//! ```
//!
//! It rises linearly for `warmup` steps, then decays as the inverse square root.

use serde::{Deserialize, Serialize};

/// The Noam schedule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Noam {
    /// Overall scale.
    pub factor: f64,
    /// Model width.
    pub d_model: usize,
    /// Warm-up steps.
    pub warmup: usize,
}

impl Noam {
    /// The learning rate at `step` (counted from 1; step 0 is treated as 1).
    pub fn lr(&self, step: usize) -> f64 {
        let step = step.max(1) as f64;
        let warmup = self.warmup.max(1) as f64;
        self.factor
            * (self.d_model as f64).powf(-0.5)
            * step.powf(-0.5).min(step * warmup.powf(-1.5))
    }
}

/// nanoGPT's schedule: a linear warm-up, then a cosine decay to a floor.
///
/// ```text
/// lr(t) = lr · (t + 1)/warmup                                                t < warmup
///       = min_lr + ½(1 + cos(π (t − warmup)/(steps − warmup)))(lr − min_lr)   after
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cosine {
    /// Peak learning rate.
    pub lr: f64,
    /// The floor the cosine decays to.
    pub min_lr: f64,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// Steps in all.
    pub steps: usize,
}

impl Cosine {
    /// The learning rate at step `t` (counted from 0).
    pub fn lr(&self, t: usize) -> f64 {
        if t < self.warmup {
            return self.lr * (t + 1) as f64 / self.warmup as f64;
        }
        let span = self.steps.saturating_sub(self.warmup).max(1);
        let progress = ((t - self.warmup) as f64 / span as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.min_lr + cosine * (self.lr - self.min_lr)
    }

    /// Checks `0 ≤ min_lr ≤ lr` and a finite `lr > 0`.
    ///
    /// # Errors
    /// Either out of range, named with its value.
    pub fn validate(&self) -> crate::Result<()> {
        posenc_error::ensure!(
            self.lr.is_finite() && self.lr > 0.0 && self.min_lr >= 0.0 && self.min_lr <= self.lr,
            "need 0 ≤ min_lr ≤ lr and lr > 0, got lr = {}, min_lr = {}",
            self.lr,
            self.min_lr
        );
        Ok(())
    }
}
