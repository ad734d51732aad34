//! Softmax, LayerNorm, RMSNorm, the linear layer and attention for training off the CPU's
//! f32 kernels: the forward is candle's (a fused kernel, or a few ops on detached inputs)
//! and one graph node carries a backward of a few tensor ops.
//!
//! On a GPU the training step is bound by kernel launches, not arithmetic. candle-nn's
//! `softmax_last_dim`, `layer_norm` and `rms_norm` are one kernel each but carry no
//! gradient, so a tracked forward took their compositions (5 ops for softmax, 11 for
//! LayerNorm), and in the backward every op's gradient plus, per input, candle's
//! accumulation (a zeroed buffer and an add). Here the forward is the fused kernel on
//! detached inputs, and one node hands its output on with the whole backward
//! (σ = √(mean(x²) − mean(x)² + ε), or √(mean(x²) + ε) for RMSNorm; Σ over the rows):
//!
//! ```text
//! softmax    y = softmax(x)                  dx = y ⊙ (dy − Σⱼ dyⱼ yⱼ)
//! LayerNorm  y = x̂ ⊙ w + b, x̂ = (x − μ)/σ    dx = (g − mean(g) − x̂ ⊙ mean(g ⊙ x̂)) / σ
//! RMSNorm    y = x̂ ⊙ w,     x̂ = x/σ          dx = (g − x̂ ⊙ mean(g ⊙ x̂)) / σ
//!            g = dy ⊙ w,  dw = Σ dy ⊙ x̂,  db = Σ dy
//! ```
//!
//! The linear layer and attention ([`crate::linear`] and [`crate::attention`]
//! off the CPU's f32) are one node each in the same way; their formulas are in their files.
//!
//! Each is tested against the composition it replaces, forward and backward.

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, Layout, MetalStorage, Shape, Storage,
    Tensor, D,
};

/// Which op's backward a [`Computed`] node runs.
#[derive(Clone, Copy)]
enum Kind {
    Softmax,
    LayerNorm { eps: f32 },
    RmsNorm { eps: f32 },
}

/// An output `y` computed outside the graph, by fused kernels or by candle's ops on
/// detached inputs, waiting to be handed to the one node that stands for all of them.
/// The node's forward takes it and lets go of it, so that the graph (which keeps the node
/// until the backward) holds one copy, not two.
struct Handed {
    name: &'static str,
    y: std::sync::Mutex<Option<Tensor>>,
}

impl Handed {
    /// `y`, for the node called `name`.
    fn new(name: &'static str, y: Tensor) -> Self {
        Self {
            name,
            y: std::sync::Mutex::new(Some(y)),
        }
    }

    /// The node's output: a copy of `y`'s storage, which `pick` takes out of a `Storage`;
    /// `y` itself is dropped.
    fn output<S: BackendStorage>(
        &self,
        pick: fn(&Storage) -> Option<&S>,
    ) -> candle_core::Result<(S, Shape)> {
        let name = self.name;
        let taken = self.y.lock().ok().and_then(|mut y| y.take());
        let Some(y) = taken else {
            candle_core::bail!("{name}: the forward ran twice")
        };
        let (storage, layout) = y.storage_and_layout();
        // A storage clone copies the whole buffer: `y` must be all of it, in order.
        if !layout.is_contiguous() || layout.start_offset() != 0 {
            candle_core::bail!("{name}: the fused output is not a fresh tensor")
        }
        let Some(y) = pick(&storage) else {
            candle_core::bail!("{name}: the fused output is on another device")
        };
        Ok((y.try_clone(layout)?, layout.shape().clone()))
    }
}

/// A node whose output was computed outside the graph, by a fused kernel, from the
/// node's inputs; its backward is `kind`'s.
struct Computed {
    kind: Kind,
    y: Handed,
}

impl Computed {
    /// A node of `kind` whose output is `y`.
    fn new(kind: Kind, y: Tensor) -> Self {
        let name = match kind {
            Kind::Softmax => "softmax-with-grad",
            Kind::LayerNorm { .. } => "layer-norm-with-grad",
            Kind::RmsNorm { .. } => "rms-norm-with-grad",
        };
        Self {
            kind,
            y: Handed::new(name, y),
        }
    }
}

fn cpu(s: &Storage) -> Option<&CpuStorage> {
    match s {
        Storage::Cpu(s) => Some(s),
        _ => None,
    }
}

fn cuda(s: &Storage) -> Option<&CudaStorage> {
    match s {
        Storage::Cuda(s) => Some(s),
        _ => None,
    }
}

fn metal(s: &Storage) -> Option<&MetalStorage> {
    match s {
        Storage::Metal(s) => Some(s),
        _ => None,
    }
}

/// A custom op's name (its `Handed`'s) and three forwards (CPU, CUDA, Metal) for inputs
/// named `$arg`: each a copy of the fused output (the inputs are read by the backward
/// only).
macro_rules! forward_is_a_copy {
    ($($arg:ident),+) => {
        fn name(&self) -> &'static str {
            self.y.name
        }

        fn cpu_fwd(
            &self,
            $($arg: &CpuStorage, _: &Layout),+
        ) -> candle_core::Result<(CpuStorage, Shape)> {
            self.y.output(cpu)
        }

        fn cuda_fwd(
            &self,
            $($arg: &CudaStorage, _: &Layout),+
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            self.y.output(cuda)
        }

        fn metal_fwd(
            &self,
            $($arg: &MetalStorage, _: &Layout),+
        ) -> candle_core::Result<(MetalStorage, Shape)> {
            self.y.output(metal)
        }
    };
}

// After the macro, which they use.
mod attention;
mod linear;

pub(super) use attention::{attention, Dims};
pub(super) use linear::linear;

impl CustomOp1 for Computed {
    forward_is_a_copy!(_x);

    fn bwd(&self, _: &Tensor, y: &Tensor, dy: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dot = (dy * y)?.sum_keepdim(D::Minus1)?;
        Ok(Some((y * dy.broadcast_sub(&dot)?)?))
    }
}

impl CustomOp2 for Computed {
    forward_is_a_copy!(_x, _w);

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw) = self.norm_grads(x, w, dy)?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp3 for Computed {
    forward_is_a_copy!(_x, _w, _b);

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _: &Tensor,
        _: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw) = self.norm_grads(x, w, dy)?;
        let d = dy.dim(D::Minus1)?;
        let db = dy.reshape(((), d))?.sum(0)?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

impl Computed {
    /// `dx` and `dw` of a LayerNorm or RMSNorm (the module doc's formulas).
    fn norm_grads(
        &self,
        x: &Tensor,
        w: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let d = x.dim(D::Minus1)?;
        let mean = |t: &Tensor| t.sum_keepdim(D::Minus1)? / d as f64;
        let (centred, eps) = match self.kind {
            Kind::LayerNorm { eps } => (x.broadcast_sub(&mean(x)?)?, eps),
            Kind::RmsNorm { eps } => (x.clone(), eps),
            Kind::Softmax => candle_core::bail!("softmax has no weight"),
        };
        let rstd = (mean(&centred.sqr()?)? + f64::from(eps))?.sqrt()?.recip()?;
        let xhat = centred.broadcast_mul(&rstd)?;
        let g = dy.broadcast_mul(w)?;
        let mut inner = g.sub(&xhat.broadcast_mul(&mean(&(&g * &xhat)?)?)?)?;
        if let Kind::LayerNorm { .. } = self.kind {
            inner = inner.broadcast_sub(&mean(&g)?)?;
        }
        let dx = inner.broadcast_mul(&rstd)?;
        let dw = (dy * &xhat)?.reshape(((), d))?.sum(0)?;
        Ok((dx, dw))
    }
}

/// Softmax over the last dimension, differentiable, one fused kernel forward.
///
/// # Shapes
/// `x`: any; the result has its shape.
///
/// # Errors
/// A dtype candle's kernel does not take.
pub fn softmax_last_dim(x: &Tensor) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    let y = candle_nn::ops::softmax_last_dim(&x.detach())?;
    x.apply_op1(Computed::new(Kind::Softmax, y))
}

/// LayerNorm over the last dimension, differentiable in `x`, `w` and `b`, one fused kernel
/// forward.
///
/// # Shapes
/// `x`: `(…, d)`; `w`, `b`: `(d)`. The result has `x`'s shape.
///
/// # Errors
/// Mismatched widths, or a dtype candle's kernel does not take.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    let y = candle_nn::ops::layer_norm(&x.detach(), &w.detach(), &b.detach(), eps)?;
    x.apply_op3(w, b, Computed::new(Kind::LayerNorm { eps }, y))
}

/// RMSNorm over the last dimension, differentiable in `x` and `w`, one fused kernel
/// forward.
///
/// # Shapes
/// `x`: `(…, d)`; `w`: `(d)`. The result has `x`'s shape.
///
/// # Errors
/// Mismatched widths, or a dtype candle's kernel does not take.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    let y = candle_nn::ops::rms_norm(&x.detach(), &w.detach(), eps)?;
    x.apply_op2(w, Computed::new(Kind::RmsNorm { eps }, y))
}
