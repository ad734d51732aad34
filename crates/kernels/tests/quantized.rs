//! The quantized products of `ops::quantized`, on every kernel this CPU runs, against two
//! references computed here in f64 from candle's own dequantization:
//! - the same formula: `W` dequantized, times `x` quantized per block and dequantized
//!   again (equal up to f32 rounding);
//! - the f32 product `x Wᵀ` with `W` dequantized (equal up to the activations'
//!   quantization: a bound from the block scales).

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Module, Tensor};
use posenc_kernels::quantized::{quantized_matmul, quantized_matmul_on, Format, Kernel, BLOCK};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Every format with a kernel in `ops::quantized`.
fn formats() -> [GgmlDType; 5] {
    Format::ALL.map(Format::dtype)
}

/// `k` rounded up to whole blocks of `dtype` (256 values for the K-quants).
fn width(dtype: GgmlDType, k: usize) -> usize {
    k.next_multiple_of(dtype.block_size())
}

/// A tensor's values, flattened.
fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn random(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..rows * cols)
        .map(|i| {
            // Mixed magnitudes, a few exact zeros, and one all-zero block per matrix.
            if i < BLOCK {
                0.0
            } else {
                rng.random_range(-1.0f32..1.0) * if i % 7 == 0 { 4.0 } else { 1.0 }
            }
        })
        .collect()
}

/// The activations after quantization per block, as the kernels see them (llama.cpp's
/// Q8_0 on x86: `q = round(x / d)`, half to even, with `d = max|x| / 127`, and `d` kept
/// as f16).
fn requantized(x: &[f32]) -> Vec<f64> {
    x.chunks_exact(BLOCK)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            let d16 = f64::from(half::f16::from_f32(d).to_f32());
            b.iter()
                .map(move |&v| f64::from((v * inv).round_ties_even()) * d16)
        })
        .collect()
}

/// `x (m, k) · w (n, k)ᵀ` in f64.
fn product(x: &[f64], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for r in 0..n {
            y[i * n + r] = (0..k).map(|j| x[i * k + j] * f64::from(w[r * k + j])).sum();
        }
    }
    y
}

/// Q4_1's `m_w s` term takes `s = d Σ q` rounded to f16 (as llama.cpp's Q8_1), where a
/// reference has `f16(d) Σ q` (or candle's `f16(f16(Σ q) f16(d))`): two roundings, each
/// within 2⁻¹¹ |Σ x| |m_w| per block, |m_w| at most the block's largest |w|.
fn s_rounding(dtype: GgmlDType, x: &[f64], w: &[f32]) -> f64 {
    if dtype != GgmlDType::Q4_1 {
        return 0.0;
    }
    x.chunks_exact(BLOCK)
        .zip(w.chunks_exact(BLOCK))
        .map(|(x, w)| {
            let wmax = w.iter().map(|v| f64::from(v.abs())).fold(0.0, f64::max);
            2f64.powi(-10) * x.iter().sum::<f64>().abs() * wmax
        })
        .sum()
}

fn check(dtype: GgmlDType, m: usize, n: usize, k: usize, seed: u64) {
    let dev = Device::Cpu;
    let w = Tensor::from_vec(random(n, k, seed), (n, k), &dev).unwrap();
    let q = Arc::new(QTensor::quantize(&w, dtype).unwrap());
    let wd: Vec<f32> = values(&q.dequantize(&dev).unwrap());
    let xs = random(m, k, seed + 1);
    let x = Tensor::from_vec(xs.clone(), (m, k), &dev).unwrap();
    let same_x = requantized(&xs);
    let same_formula = product(&same_x, &wd, m, n, k);
    let exact: Vec<f64> = product(
        &xs.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        &wd,
        m,
        n,
        k,
    );
    for kernel in Kernel::available() {
        let y: Vec<f32> = values(
            &quantized_matmul_on(kernel, &x, std::slice::from_ref(&q))
                .unwrap()
                .expect("a format with a kernel"),
        );
        assert_eq!(y.len(), m * n);
        for i in 0..m {
            // The activations' rounding error bound: half a step per value (and the f16
            // scale's 2⁻¹¹), times |w|.
            let step: Vec<f64> = xs[i * k..(i + 1) * k]
                .chunks_exact(BLOCK)
                .map(|b| {
                    let amax = f64::from(b.iter().fold(0f32, |m, v| m.max(v.abs())));
                    amax / 127.0 / 2.0 + amax * 2f64.powi(-11)
                })
                .collect();
            let xr = &same_x[i * k..(i + 1) * k];
            for r in 0..n {
                let got = f64::from(y[i * n + r]);
                let want = same_formula[i * n + r];
                let scale: f64 = (0..k)
                    .map(|j| (f64::from(wd[r * k + j]) * xs[i * k + j] as f64).abs())
                    .sum::<f64>()
                    + 1e-6;
                let s_term = s_rounding(dtype, xr, &wd[r * k..(r + 1) * k]);
                assert!(
                    (got - want).abs() <= 1e-5 * scale + s_term,
                    "{dtype:?} {kernel:?} ({m}, {n}, {k}) [{i}, {r}]: {got} against {want}"
                );
                let bound: f64 = (0..k)
                    .map(|j| step[j / BLOCK] * f64::from(wd[r * k + j]).abs())
                    .sum::<f64>()
                    + 1e-5 * scale
                    + s_term;
                assert!(
                    (got - exact[i * n + r]).abs() <= bound,
                    "{dtype:?} {kernel:?} ({m}, {n}, {k}) [{i}, {r}]: {got} against f32's {}",
                    exact[i * n + r]
                );
            }
        }
    }
}

#[test]
fn every_kernel_equals_dequantize_then_multiply() {
    for dtype in formats() {
        // One block; odd row counts; fewer rows than a task; many tasks; several x rows.
        for (i, &(m, n, k)) in [
            (1, 1, 32),
            (1, 3, 64),
            (1, 17, 96),
            (1, 200, 576),
            (3, 33, 128),
            (5, 70, 1536),
            (31, 9, 32),
        ]
        .iter()
        .enumerate()
        {
            check(dtype, m, n, width(dtype, k), 10 * i as u64);
        }
    }
}

#[test]
fn kernels_agree_with_candle() {
    // candle's own quantized product (Q8_1 activations with f16 scales) is an independent
    // implementation of llama.cpp's: ours may differ only by those scales' rounding.
    let dev = Device::Cpu;
    for dtype in formats() {
        let (m, n, k) = (2, 40, 512);
        let w = Tensor::from_vec(random(n, k, 5), (n, k), &dev).unwrap();
        let q = Arc::new(QTensor::quantize(&w, dtype).unwrap());
        let x = Tensor::from_vec(random(m, k, 6), (m, k), &dev).unwrap();
        let ours: Vec<f32> = values(&quantized_matmul(&x, &q).unwrap().unwrap());
        let candle: Vec<f32> = values(
            &candle_core::quantized::QMatMul::from_arc(q.clone())
                .unwrap()
                .forward(&x)
                .unwrap(),
        );
        // The same quantization of x, so the same sums, but for candle's rounding of Q4_1's
        // `s` (and the order of f32 additions). For the K-quants candle quantizes x per
        // 256 (Q8_K) where we do per 32: the two differ by at most both roundings, half a
        // step of each per value, times |w|.
        let wd: Vec<f32> = values(&q.dequantize(&dev).unwrap());
        let xs = values(&x);
        let half_step = |i: usize, j: usize, per: usize| {
            let at = i * k + j / per * per;
            xs[at..at + per].iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0 / 2.0
        };
        let k_quant = dtype.block_size() == 256;
        for (o, (a, b)) in ours.iter().zip(&candle).enumerate() {
            let (i, r) = (o / n, o % n);
            let mass: f32 = (0..k).map(|j| (wd[r * k + j] * xs[i * k + j]).abs()).sum();
            let xr: Vec<f64> = xs[i * k..(i + 1) * k]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let s_term = s_rounding(dtype, &xr, &wd[r * k..(r + 1) * k]) as f32;
            let rounding: f32 = match k_quant {
                true => (0..k)
                    .map(|j| {
                        (half_step(i, j, 32) * 1.001 + half_step(i, j, 256)) * wd[r * k + j].abs()
                    })
                    .sum(),
                false => 0.0,
            };
            assert!(
                (a - b).abs() <= 1e-5 * mass + s_term + rounding,
                "{dtype:?}: {a} against candle's {b}"
            );
        }
    }
}

#[test]
fn other_formats_and_devices_are_left_to_the_caller() {
    let dev = Device::Cpu;
    let w = Tensor::from_vec(random(8, 256, 1), (8, 256), &dev).unwrap();
    let q = Arc::new(QTensor::quantize(&w, GgmlDType::Q5K).unwrap());
    let x = Tensor::from_vec(random(1, 256, 2), (1, 256), &dev).unwrap();
    assert!(quantized_matmul(&x, &q).unwrap().is_none());
    let q8 = Arc::new(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap());
    let f64x = x.to_dtype(candle_core::DType::F64).unwrap();
    assert!(quantized_matmul(&f64x, &q8).unwrap().is_none());
}

#[test]
fn a_wrong_width_is_an_error_not_a_panic() {
    let dev = Device::Cpu;
    let w = Tensor::from_vec(random(8, 64, 1), (8, 64), &dev).unwrap();
    let q = Arc::new(QTensor::quantize(&w, GgmlDType::Q4_1).unwrap());
    let x = Tensor::from_vec(random(1, 32, 2), (1, 32), &dev).unwrap();
    let err = quantized_matmul(&x, &q).unwrap_err().to_string();
    assert!(err.contains("32 columns"), "{err}");
    // A K-quant's rows are whole super-blocks of 256.
    let w = Tensor::from_vec(random(8, 512, 1), (8, 512), &dev).unwrap();
    let q = Arc::new(QTensor::quantize(&w, GgmlDType::Q6K).unwrap());
    let x = Tensor::from_vec(random(1, 288, 2), (1, 288), &dev).unwrap();
    let err = quantized_matmul(&x, &q).unwrap_err().to_string();
    assert!(
        err.contains("288 columns") && err.contains("blocks of 256"),
        "{err}"
    );
}

#[test]
fn rows_of_a_quantized_table_equal_candles_dequantization() {
    use posenc_kernels::quantized::dequantize_rows;
    let dev = Device::Cpu;
    let ids = [0u32, 7, 3, 7, 63];
    for dtype in formats() {
        let w = Tensor::from_vec(random(64, 256, 9), (64, 256), &dev).unwrap();
        let q = QTensor::quantize(&w, dtype).unwrap();
        let want = q
            .dequantize(&dev)
            .unwrap()
            .index_select(&Tensor::new(&ids, &dev).unwrap(), 0)
            .unwrap();
        let got = dequantize_rows(&q, &ids).unwrap();
        assert_eq!(values(&got), values(&want), "{dtype:?}");
    }
    let q = QTensor::quantize(
        &Tensor::from_vec(random(4, 32, 1), (4, 32), &dev).unwrap(),
        GgmlDType::Q8_0,
    )
    .unwrap();
    let err = dequantize_rows(&q, &[4]).unwrap_err().to_string();
    assert!(err.contains("token id 4"), "{err}");
}

#[test]
fn fused_products_equal_the_products_one_by_one() {
    use posenc_kernels::quantized::quantized_matmul_fused;
    let dev = Device::Cpu;
    let (m, k) = (3, 256);
    let x = Tensor::from_vec(random(m, k, 40), (m, k), &dev).unwrap();
    let weights: Vec<Arc<QTensor>> = [
        (GgmlDType::Q4_1, 40),
        (GgmlDType::Q8_0, 17),
        (GgmlDType::Q4K, 9),
        (GgmlDType::Q4_0, 64),
        (GgmlDType::Q6K, 33),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(dtype, n))| {
        let w = Tensor::from_vec(random(n, k, 41 + i as u64), (n, k), &dev).unwrap();
        Arc::new(QTensor::quantize(&w, dtype).unwrap())
    })
    .collect();
    let fused = quantized_matmul_fused(&x, &weights).unwrap().unwrap();
    let singles: Vec<Tensor> = weights
        .iter()
        .map(|w| quantized_matmul(&x, w).unwrap().unwrap())
        .collect();
    let want = Tensor::cat(&singles, 1).unwrap();
    assert_eq!(fused.dims(), want.dims());
    assert_eq!(values(&fused), values(&want));
    // One weight without a kernel here: the caller multiplies them another way.
    let mut mixed = weights.clone();
    let w = Tensor::from_vec(random(8, 256, 1), (8, 256), &dev).unwrap();
    mixed.push(Arc::new(QTensor::quantize(&w, GgmlDType::Q5K).unwrap()));
    assert!(quantized_matmul_fused(&x, &mixed).unwrap().is_none());
}
