//! GELU (the erf form) in one vectorisable pass, with its own backward.
//!
//! ```text
//! GELU(x)  = x Φ(x) = ½ x (1 + erf(x/√2))
//! GELU'(x) = Φ(x) + x φ(x),          φ(x) = exp(−x²/2) / √(2π)
//! ```
//!
//! candle's `gelu_erf` calls a scalar `erf` per element, about a sixth of a training step
//! of a GELU model on two cores. Here erf is Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7):
//!
//! ```text
//! erf(z) = sign(z) (1 − (a₁t + a₂t² + a₃t³ + a₄t⁴ + a₅t⁵) e^(−z²)),   t = 1/(1 + p|z|)
//! ```
//!
//! and `e^y` is [`super::simd::exp`], all plain arithmetic the compiler turns into SIMD
//! ([`super::simd::vectorized`]). The result is within 1e-6 of candle's, forward and
//! backward, for |x| ≤ 10.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Result, Shape, Tensor};

use super::par_output;
use super::simd::{exp, vectorized};
use super::softmax::contiguous_f32;

/// `GELU(x)` (erf form) of an f32 tensor, elementwise. Differentiable.
///
/// # Errors
/// If `x` is not f32.
pub fn gelu_cpu(x: &Tensor) -> Result<Tensor> {
    if x.dtype() != DType::F32 {
        candle_core::bail!("gelu takes an f32 tensor, got {:?}", x.dtype());
    }
    x.contiguous()?.apply_op1(Gelu)
}

/// `GELU(x)` (erf form) of a tensor of any dtype on any device, elementwise: the fused
/// kernel ([`crate::cpu::gelu`]) for f32 on the CPU, candle's `gelu_erf` elsewhere.
/// Differentiable.
///
/// # Errors
/// candle's own, from the op that runs.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    match x.dtype() == DType::F32 && x.device().is_cpu() {
        true => gelu_cpu(x),
        false => x.gelu_erf(),
    }
}

/// Elements per parallel task.
const CHUNK: usize = 16_384;

/// `erf(z)`, Abramowitz & Stegun 7.1.26.
#[inline(always)]
fn erf(z: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152_1,
        1.061_405_4,
    ];
    let a = z.abs();
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let r = 1.0 - poly * exp(-a * a);
    r.copysign(z)
}

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;

/// 1/√(2π).
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// `GELU(x) = ½ x (1 + erf(x/√2))`: also the epilogue of [`super::linear_gelu`].
#[inline(always)]
pub(super) fn gelu_scalar(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2))
}

/// `f` elementwise, vectorised: `f` must be `#[inline(always)]`, or LLVM may leave it a
/// scalar call per element inside the vectorised loop.
fn map(x: &[f32], f: impl Fn(f32) -> f32 + Sync) -> Vec<f32> {
    par_output(x.len(), CHUNK, |task, y| {
        let x = &x[task * CHUNK..][..y.len()];
        vectorized(
            #[inline(always)]
            || {
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = f(x);
                }
            },
        )
    })
}

struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(s, l, self.name())?;
        let y = map(x, gelu_scalar);
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let slope = x.apply_op1_no_bwd(&GeluSlope)?;
        Ok(Some(grad.mul(&slope)?))
    }
}

/// `GELU'(x)`.
struct GeluSlope;

impl CustomOp1 for GeluSlope {
    fn name(&self) -> &'static str {
        "gelu-slope"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_f32(s, l, self.name())?;
        let d = map(
            x,
            #[inline(always)]
            |x| {
                let cdf = 0.5 * (1.0 + erf(x * FRAC_1_SQRT_2));
                cdf + x * FRAC_1_SQRT_2PI * exp(-0.5 * x * x)
            },
        );
        Ok((CpuStorage::F32(d), l.shape().clone()))
    }
}
