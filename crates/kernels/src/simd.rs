//! Running a kernel with the widest vector instructions the CPU has.
//!
//! The crate is compiled for baseline x86-64 (SSE2, four f32 lanes, no FMA) so that one
//! binary runs on any x86-64 machine, which leaves the element-wise loops of the fused
//! kernels at a quarter of what AVX-512 could do. [`vectorized`] checks the CPU once and
//! calls the kernel from inside a function compiled for AVX-512 or for AVX2 + FMA, into
//! which the kernel is inlined and auto-vectorised again; elsewhere it calls it as it is. This is how gemm picks its
//! matmul kernel, at run time, so no build flag is needed.

/// The instruction sets a kernel can be compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// AVX-512 (F, VL, BW, DQ) with AVX2 and FMA: sixteen f32 lanes.
    Avx512,
    /// AVX2 with FMA: eight lanes.
    Avx2,
    /// What the crate was compiled for.
    Baseline,
}

impl Level {
    /// The widest level this CPU runs.
    pub(crate) fn detected() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512dq")
            {
                return Level::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Level::Avx2;
            }
        }
        Level::Baseline
    }

    /// The levels this CPU runs, widest first.
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        let all = [Level::Avx512, Level::Avx2, Level::Baseline];
        let widest = all.iter().position(|&l| l == Self::detected()).unwrap_or(2);
        all[widest..].to_vec()
    }

    /// Runs `f` compiled for this level.
    ///
    /// # Safety
    /// The CPU must have the level's instructions (it is [`Level::detected`] or narrower).
    #[inline(always)]
    pub(crate) unsafe fn run<R>(self, f: impl FnOnce() -> R) -> R {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller's promise.
            Level::Avx512 => unsafe { x86::avx512(f) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Level::Avx2 => unsafe { x86::avx2(f) },
            _ => f(),
        }
    }
}

/// Runs `f` compiled for the widest [`Level`] the CPU has. `f` should be a straight-line
/// loop over slices, marked `#[inline(always)]`: it is inlined into a function built for
/// those instructions, and LLVM vectorises it there.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    static LEVEL: std::sync::OnceLock<Level> = std::sync::OnceLock::new();
    let level = *LEVEL.get_or_init(Level::detected);
    // SAFETY: the level was detected on this CPU.
    unsafe { level.run(f) }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,avx")]
    pub(super) unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[target_feature(enable = "avx2,fma,avx")]
    pub(super) unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// [`super::widen`] eight values per instruction.
    ///
    /// # Safety
    /// The CPU must have F16C.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn widen_f16c(src: &[half::f16], dst: &mut [f32]) {
        use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
        let n = src.len().min(dst.len());
        let whole = n / 8 * 8;
        for i in (0..whole).step_by(8) {
            // SAFETY: `i + 8 ≤ n` elements of both slices; unaligned loads and stores.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        super::widen_scalar(&src[whole..n], &mut dst[whole..n]);
    }
}

/// Accumulators kept side by side by the reductions: one AVX-512 register of f32, so a
/// sum is sixteen independent sums the compiler can keep in a vector (a single running
/// sum would have to be added in order, one element at a time).
const LANES: usize = 16;

/// `Σ f(a_i, b_i)` over two slices of equal length, in [`LANES`] interleaved partial sums.
#[inline(always)]
fn sum_zip(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&a, &b)| f(a, b))
        .sum();
    for (a, b) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += f(a[i], b[i]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ x_i`.
#[inline(always)]
pub(crate) fn sum(x: &[f32]) -> f32 {
    sum_zip(x, x, |x, _| x)
}

/// `Σ (x_i − c)²`.
#[inline(always)]
pub(crate) fn sum_sq_dev(x: &[f32], c: f32) -> f32 {
    sum_zip(x, x, |x, _| (x - c) * (x - c))
}

/// `Σ a_i b_i`.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    sum_zip(a, b, |a, b| a * b)
}

/// `max_i x_i` (−∞ for an empty slice; NaNs are skipped).
#[inline(always)]
pub(crate) fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for c in chunks {
        for i in 0..LANES {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    acc.iter().fold(tail, |m, &v| m.max(v))
}

/// `e^y` for f32 `y`, vectorisable: `2^n · e^f` with `n = round(y log₂e)` found by the
/// 1.5·2²³ trick and `e^f`, `|f| ≤ ½ ln 2`, a degree-6 Taylor polynomial. Relative error
/// below 1e-6 + 1e-7·|y| for −87 ≤ y ≤ 88 (rounding `y log₂e` to f32 costs |y|·2⁻²⁴);
/// exactly 0 below −87 (so `e^−∞ = 0`), e⁸⁸ above 88.
#[inline(always)]
pub(crate) fn exp(y: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 · 2²³: adding it rounds to an integer.
    const ROUND: f32 = 12_582_912.0;
    let underflow = y < -87.0;
    let y = y.clamp(-87.0, 88.0);
    let t = y * LOG2E;
    // Adding 1.5·2²³ leaves round(t) in the low mantissa bits of `r`.
    let r = t + ROUND;
    let n = r - ROUND;
    // |f| ≤ ½ ln 2.
    let f = (t - n) * std::f32::consts::LN_2;
    // e^f, Taylor to degree 6 on |f| ≤ 0.347: remainder below 2e-7 relative.
    let p = 1.0
        + f * (1.0
            + f * (0.5
                + f * (1.0 / 6.0 + f * (1.0 / 24.0 + f * (1.0 / 120.0 + f * (1.0 / 720.0))))));
    // 2^n from integer arithmetic on the bits alone (no float-to-int conversion).
    let n_bits = r.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(n_bits.wrapping_add(127) << 23);
    if underflow {
        0.0
    } else {
        p * scale
    }
}

/// `dst_i = src_i` widened from f16 to f32 (exactly: every f16 is an f32), eight at a time
/// with F16C's `vcvtph2ps` where the CPU has it.
///
/// # Panics
/// Never: lengths that differ widen the shorter one.
pub(crate) fn widen(src: &[half::f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        static F16C: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *F16C.get_or_init(|| std::arch::is_x86_feature_detected!("f16c")) {
            // SAFETY: the CPU has F16C (and with it AVX).
            return unsafe { x86::widen_f16c(src, dst) };
        }
    }
    widen_scalar(src, dst);
}

/// [`widen`] one element at a time.
#[inline(always)]
fn widen_scalar(src: &[half::f16], dst: &mut [f32]) {
    dst.iter_mut().zip(src).for_each(|(d, s)| *d = s.to_f32());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Widening every f16 bit pattern (NaNs, infinities, subnormals, both zeros) with F16C
    /// equals half's conversion, at offsets that leave ragged tails.
    #[test]
    fn widening_f16_is_exact_for_every_value() {
        let all: Vec<half::f16> = (0..=u16::MAX).map(half::f16::from_bits).collect();
        for skip in [0, 3] {
            let src = &all[skip..];
            let mut got = vec![0f32; src.len()];
            widen(src, &mut got);
            let mut want = vec![0f32; src.len()];
            widen_scalar(src, &mut want);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{:#06x}: {g} against {w}",
                    src[i].to_bits()
                );
            }
            assert_eq!(want[1000 - skip], src[1000 - skip].to_f32());
        }
    }

    /// Every level this CPU runs computes the helpers as f64 arithmetic does, on lengths
    /// below, at and past one vector, with a ragged tail.
    #[test]
    fn helpers_agree_with_f64_at_every_level() {
        for level in Level::available() {
            for n in [0, 1, 15, 16, 17, 100, 1000] {
                let x: Vec<f32> = (0..n)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                    .collect();
                let y: Vec<f32> = (0..n)
                    .map(|i| ((i * 13 % 29) as f32 - 14.0) / 3.0)
                    .collect();
                // SAFETY: the level is one this CPU runs.
                let (s, d, m, v) =
                    unsafe { level.run(|| (sum(&x), dot(&x, &y), max(&x), sum_sq_dev(&x, 0.5))) };
                let f = |v: &[f32]| v.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
                let (x64, y64) = (f(&x), f(&y));
                let tol = 1e-5 * (1.0 + n as f64);
                assert!(
                    (f64::from(s) - x64.iter().sum::<f64>()).abs() < tol,
                    "{level:?} sum n={n}"
                );
                let dot64: f64 = x64.iter().zip(&y64).map(|(a, b)| a * b).sum();
                assert!((f64::from(d) - dot64).abs() < tol, "{level:?} dot n={n}");
                let sq64: f64 = x64.iter().map(|v| (v - 0.5) * (v - 0.5)).sum();
                assert!(
                    (f64::from(v) - sq64).abs() < tol * 10.0,
                    "{level:?} sq n={n}"
                );
                let max64 = x64.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                assert_eq!(f64::from(m), max64, "{level:?} max n={n}");
            }
            let ys: Vec<f32> = (-2000..=1936).map(|i| i as f32 / 22.0).collect();
            // SAFETY: as above.
            let e: Vec<f32> = unsafe { level.run(|| ys.iter().map(|&y| exp(y)).collect()) };
            for (&y, &e) in ys.iter().zip(&e) {
                let want = f64::from(y).exp();
                if y < -87.0 {
                    assert_eq!(e, 0.0, "{level:?} exp({y})");
                } else {
                    // Rounding `y log₂e` costs up to |y|·2⁻²⁴ in the exponent.
                    let rel = (f64::from(e) - want).abs() / want;
                    assert!(
                        rel < 1e-6 + 1e-7 * f64::from(y.abs()),
                        "{level:?} exp({y}) = {e}, relative error {rel}"
                    );
                }
            }
            // SAFETY: as above.
            assert_eq!(unsafe { level.run(|| exp(f32::NEG_INFINITY)) }, 0.0);
        }
    }
}
