//! AdamW (Loshchilov & Hutter 2019) whose moments can be saved and restored, so training
//! resumes exactly. (candle-nn's `AdamW` keeps its moments private.)
//!
//! ```text
//! m ← β₁m + (1 − β₁)g      v ← β₂v + (1 − β₂)g²      m̂ = m/(1 − β₁ᵗ)      v̂ = v/(1 − β₂ᵗ)
//! θ ← θ − lr·(m̂/(√v̂ + ε) + λθ)
//! ```
//!
//! The paper's settings are β = (0.9, 0.98), ε = 1e-9, no weight decay (candle's defaults
//! differ: β₂ = 0.999, ε = 1e-8, λ = 0.01).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, ensure, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdamWConfig {
    /// β₁.
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay λ.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.98,
            eps: 1e-9,
            weight_decay: 0.0,
        }
    }
}

impl AdamWConfig {
    /// Checks β₁, β₂ ∈ [0, 1), ε > 0 and λ ≥ 0, all finite.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [("adam.beta1", self.beta1), ("adam.beta2", self.beta2)] {
            ensure!((0.0..1.0).contains(&v), "{name} must be in [0, 1), got {v}");
        }
        ensure!(
            self.eps.is_finite() && self.eps > 0.0,
            "adam.eps must be a small positive number, got {}",
            self.eps
        );
        ensure!(
            self.weight_decay.is_finite() && self.weight_decay >= 0.0,
            "adam.weight_decay must be a finite number ≥ 0, got {}",
            self.weight_decay
        );
        Ok(())
    }
}

struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
}

/// AdamW over every variable of a [`VarMap`], in name order.
pub struct AdamW {
    cfg: AdamWConfig,
    slots: Vec<Slot>,
    step: usize,
}

impl AdamW {
    /// Fresh moments (zeros) for every variable of `varmap`.
    pub fn new(varmap: &VarMap, cfg: AdamWConfig) -> Result<Self> {
        let data = varmap
            .data()
            .lock()
            .map_err(|_| anyhow!("poisoned VarMap"))?;
        let mut slots: Vec<Slot> = data
            .iter()
            .map(|(name, var)| {
                Ok(Slot {
                    name: name.clone(),
                    var: var.clone(),
                    m: var.zeros_like()?,
                    v: var.zeros_like()?,
                })
            })
            .collect::<Result<_>>()?;
        slots.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self {
            cfg,
            slots,
            step: 0,
        })
    }

    /// Steps taken so far.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// Applies one update with learning rate `lr`. Variables without a gradient are skipped.
    pub fn step(&mut self, grads: &GradStore, lr: f64) -> Result<()> {
        self.step += 1;
        let AdamWConfig {
            beta1,
            beta2,
            eps,
            weight_decay,
        } = self.cfg;
        let t = self.step as i32;
        let (c1, c2) = (1.0 - beta1.powi(t), 1.0 - beta2.powi(t));
        for slot in &mut self.slots {
            let Some(g) = grads.get(slot.var.as_tensor()) else {
                continue;
            };
            slot.m = ((&slot.m * beta1)? + (g * (1.0 - beta1))?)?;
            slot.v = ((&slot.v * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
            let update = ((&slot.m / c1)? / ((&slot.v / c2)?.sqrt()? + eps)?)?;
            let theta = slot.var.as_tensor();
            let decayed = if weight_decay > 0.0 {
                (theta * (1.0 - lr * weight_decay))?
            } else {
                theta.clone()
            };
            slot.var.set(&(decayed - (update * lr)?)?)?;
        }
        Ok(())
    }

    /// The moments as named tensors (`m.NAME`, `v.NAME`).
    pub fn state(&self) -> HashMap<String, Tensor> {
        self.slots
            .iter()
            .flat_map(|s| {
                [
                    (format!("m.{}", s.name), s.m.clone()),
                    (format!("v.{}", s.name), s.v.clone()),
                ]
            })
            .collect()
    }

    /// Restores the moments written by [`AdamW::state`] and the step count.
    pub fn restore(&mut self, state: &HashMap<String, Tensor>, step: usize) -> Result<()> {
        for slot in &mut self.slots {
            for (key, dst) in [("m", &mut slot.m), ("v", &mut slot.v)] {
                let name = format!("{key}.{}", slot.name);
                let t = state
                    .get(&name)
                    .with_context(|| format!("optimizer state lacks `{name}`"))?;
                ensure!(
                    t.dims() == dst.dims(),
                    "optimizer state `{name}` has shape {:?}, expected {:?}",
                    t.dims(),
                    dst.dims()
                );
                *dst = t.clone();
            }
        }
        self.step = step;
        Ok(())
    }

    /// Loads moments from a safetensors file.
    pub fn load(&mut self, path: &Path, step: usize) -> Result<()> {
        let device = self
            .slots
            .first()
            .map(|s| s.var.device().clone())
            .unwrap_or(candle_core::Device::Cpu);
        let state = candle_core::safetensors::load(path, &device)
            .with_context(|| format!("reading {}", path.display()))?;
        self.restore(&state, step)
    }
}
