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
//!
//! For f32 on the CPU a step is two passes per variable, in place: one updates both
//! moments (kept side by side in one `(2, n)` tensor), one the variable. As tensor ops
//! it was about a dozen, each allocating its result.
//!
//! Elsewhere (a GPU, or f64) it is tensor ops, on all those variables at once: their
//! gradients and values are concatenated into one flat tensor each, the moments are kept
//! as one `(2, Σn)` tensor of which each variable's are a view, and the update is about
//! fifteen ops on the whole, then one copy back into each variable. On a GPU each op is a
//! kernel launch: per variable it was about seventeen (as PyTorch's `foreach` AdamW, this
//! is what makes it fast there).

use std::collections::HashMap;
use std::path::Path;

use crate::error::Result;
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::VarMap;
use posenc_error::{ensure, invalid, Context};
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
    /// nanoGPT's settings for its small character-level models: β₂ 0.99 (for few steps
    /// per token), ε 1e-8 and weight decay 0.1.
    pub fn nanogpt() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }

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
    /// The first and second moments, `(2, n)` for a variable of `n` elements (a view into
    /// [`Together::mv`] once a step has updated it with others).
    mv: Tensor,
}

/// The moments of the variables last updated together, side by side: `(2, Σn)`, the
/// slots' in order.
struct Together {
    slots: Vec<usize>,
    mv: Tensor,
}

impl Slot {
    /// Moment `i` (0: m, 1: v) in the variable's shape.
    fn moment(&self, i: usize) -> Result<Tensor> {
        Ok(self.mv.get(i)?.reshape(self.var.shape())?)
    }
}

/// AdamW over every variable of a [`VarMap`], in name order.
pub struct AdamW {
    cfg: AdamWConfig,
    slots: Vec<Slot>,
    step: usize,
    together: Option<Together>,
}

impl AdamW {
    /// Fresh moments (zeros) for every variable of `varmap`.
    pub fn new(varmap: &VarMap, cfg: AdamWConfig) -> Result<Self> {
        let data = varmap
            .data()
            .lock()
            .map_err(|_| invalid!("poisoned VarMap"))?;
        let mut slots: Vec<Slot> = data
            .iter()
            .map(|(name, var)| {
                Ok(Slot {
                    name: name.clone(),
                    var: var.clone(),
                    mv: Tensor::zeros((2, var.elem_count()), var.dtype(), var.device())?,
                })
            })
            .collect::<Result<_>>()?;
        slots.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self {
            cfg,
            slots,
            step: 0,
            together: None,
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
        // Variables stepped as tensor ops, all at once, and their gradients.
        let (mut rest, mut rest_grads) = (Vec::new(), Vec::new());
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(g) = grads.get(slot.var.as_tensor()) else {
                continue;
            };
            let theta = slot.var.as_tensor();
            let step = posenc_kernels::AdamWStep {
                lr: lr as f32,
                beta1: beta1 as f32,
                beta2: beta2 as f32,
                c1: c1 as f32,
                c2: c2 as f32,
                eps: eps as f32,
                decay: (1.0 - lr * weight_decay) as f32,
            };
            if posenc_kernels::adamw_in_place(theta, &slot.mv, g, &step)? {
                continue;
            }
            rest.push(i);
            rest_grads.push(g.flatten_all()?);
        }
        if rest.is_empty() {
            return Ok(());
        }
        // The moments side by side: last step's, if it stepped the same variables.
        let mv = match self.together.take() {
            Some(together) if together.slots == rest => together.mv,
            _ => Tensor::cat(
                &rest.iter().map(|&i| &self.slots[i].mv).collect::<Vec<_>>(),
                1,
            )?,
        };
        // Detached: a gradient is the output of ops on the forward's activations, and a
        // moment built from it would hold that step's whole graph, and through the moment
        // of the step before, every earlier step's (on a GPU: one step's activations more
        // memory per step).
        let g = Tensor::cat(&rest_grads, 0)?.detach();
        let theta = Tensor::cat(
            &rest
                .iter()
                .map(|&i| self.slots[i].var.flatten_all())
                .collect::<candle_core::Result<Vec<_>>>()?,
            0,
        )?
        .detach();
        let m = ((mv.get(0)? * beta1)? + (&g * (1.0 - beta1))?)?;
        let v = ((mv.get(1)? * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
        let update = ((&m / c1)? / ((&v / c2)?.sqrt()? + eps)?)?;
        let decayed = if weight_decay > 0.0 {
            (theta * (1.0 - lr * weight_decay))?
        } else {
            theta
        };
        let theta = (decayed - (update * lr)?)?;
        let mv = Tensor::stack(&[m, v], 0)?;
        let mut at = 0;
        for &i in &rest {
            let slot = &mut self.slots[i];
            let n = slot.var.elem_count();
            slot.var
                .set(&theta.narrow(0, at, n)?.reshape(slot.var.shape())?)?;
            slot.mv = mv.narrow(1, at, n)?;
            at += n;
        }
        self.together = Some(Together { slots: rest, mv });
        Ok(())
    }

    /// The moments as named tensors (`m.NAME`, `v.NAME`).
    ///
    /// # Errors
    /// Only if a copy fails (out of memory).
    pub fn state(&self) -> Result<HashMap<String, Tensor>> {
        // Copies, as the step updates the moments in place; each of its own values only,
        // since off the CPU's f32 a moment is a view into the buffer all share, which
        // `Tensor::copy` would clone whole (and moving it to the CPU would move it whole).
        self.slots
            .iter()
            .flat_map(|s| {
                ["m", "v"].into_iter().enumerate().map(move |(i, key)| {
                    let t = s.moment(i).and_then(|t| Ok(t.force_contiguous()?));
                    t.map(|t| (format!("{key}.{}", s.name), t))
                })
            })
            .collect()
    }

    /// Restores the moments written by [`AdamW::state`] and the step count.
    pub fn restore(&mut self, state: &HashMap<String, Tensor>, step: usize) -> Result<()> {
        // Everything is checked before anything is replaced.
        let mut restored = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let mut moments = Vec::with_capacity(2);
            for key in ["m", "v"] {
                let name = format!("{key}.{}", slot.name);
                let t = state
                    .get(&name)
                    .with_context(|| format!("optimizer state lacks `{name}`"))?;
                ensure!(
                    t.dims() == slot.var.dims(),
                    "optimizer state `{name}` has shape {:?}, expected {:?}",
                    t.dims(),
                    slot.var.dims()
                );
                moments.push(t.to_dtype(slot.var.dtype())?.flatten_all()?);
            }
            // A fresh tensor: the step writes into it.
            restored.push(Tensor::stack(&moments, 0)?);
        }
        for (slot, mv) in self.slots.iter_mut().zip(restored) {
            slot.mv = mv;
        }
        self.together = None;
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
