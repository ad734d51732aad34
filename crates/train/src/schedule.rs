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
