//! The fused kernels of `ops` against the compositions they replace, forward and
//! backward: the composition runs in f64 (so it is the reference, not a copy of the same
//! f32 rounding), and central finite differences check the fused backward on its own.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var, D};
use posenc_kernels::cpu::{add_layer_norm, gelu, layer_norm, masked_softmax};
use posenc_kernels::{attention, linear, linear_gelu, linear_rows, matmul};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    // A fixed pseudo-random fill, so failures reproduce.
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    if a.elem_count() == 0 {
        return 0.0;
    }
    // Either may live on a GPU: both are compared on the CPU.
    let f64_cpu = |t: &Tensor| {
        t.to_dtype(DType::F64)
            .unwrap()
            .to_device(&Device::Cpu)
            .unwrap()
    };
    (f64_cpu(a) - f64_cpu(b))
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

/// The gradients of `Σ y ⊙ r`, with `r` taken to `y`'s dtype and device.
fn grads_of(y: &Tensor, r: &Tensor) -> GradStore {
    let r = r
        .to_dtype(y.dtype())
        .unwrap()
        .to_device(y.device())
        .unwrap();
    (y * r).unwrap().sum_all().unwrap().backward().unwrap()
}

/// Asserts that each named variable's gradient in `grads` is within `tol` of its f64
/// twin's in `grads64`.
fn assert_grads_close(
    name: &str,
    tol: f64,
    pairs: &[(&str, &Var, &Var)],
    grads: &GradStore,
    grads64: &GradStore,
) {
    for (what, v, v64) in pairs {
        let (g, g64) = (
            grads.get(v.as_tensor()).unwrap(),
            grads64.get(v64.as_tensor()).unwrap(),
        );
        assert_eq!(g.dims(), v.dims(), "{name}: ∂/∂{what} shape");
        let diff = max_diff(g, g64);
        assert!(diff < tol, "{name}: ∂/∂{what} {diff}");
    }
}

/// The composition the attention used before: scale, fill masked scores, softmax, zero
/// the rows that see nothing.
fn softmax_composite(x: &Tensor, keep: &Tensor, scale: f64) -> Tensor {
    let keep = keep.broadcast_as(x.shape()).unwrap();
    let lowest = Tensor::new(f64::MIN, x.device())
        .unwrap()
        .to_dtype(x.dtype())
        .unwrap()
        .broadcast_as(x.shape())
        .unwrap();
    let filled = keep.where_cond(&(x * scale).unwrap(), &lowest).unwrap();
    let y = candle_nn::ops::softmax(&filled, D::Minus1).unwrap();
    let any = keep
        .max_keepdim(D::Minus1)
        .unwrap()
        .to_dtype(x.dtype())
        .unwrap();
    y.broadcast_mul(&any).unwrap()
}

/// A `(2, 1, 5, keys)` mask: causal in batch 0 (query `q` sees keys up to `q + keys − 5`);
/// batch 1 hides the last two keys and its first query sees nothing at all.
fn mask(keys: usize) -> Tensor {
    let mut keep = vec![0u8; 2 * 5 * keys];
    for q in 0..5 {
        for k in 0..keys {
            keep[q * keys + k] = u8::from(k + 5 <= q + keys);
            keep[5 * keys + q * keys + k] = u8::from(k + 2 < keys && q > 0);
        }
    }
    Tensor::from_vec(keep, (2, 1, 5, keys), &Device::Cpu).unwrap()
}

#[test]
fn masked_softmax_equals_the_composition_forward_and_backward() {
    // Rows shorter than one vector of the kernel, and longer with a ragged tail.
    for keys in [6, 37] {
        let x = randn(&[2, 3, 5, keys], 1);
        let r = randn(&[2, 3, 5, keys], 2); // the loss is Σ y ⊙ r
        let keep = mask(keys);
        let scale = 0.35;
        for with_mask in [true, false] {
            let keep = with_mask.then_some(&keep);
            let xv = Var::from_tensor(&x).unwrap();
            let y = masked_softmax(xv.as_tensor(), keep, scale as f32).unwrap();
            let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
            let gx = grads.get(xv.as_tensor()).unwrap();

            let x64 = Var::from_tensor(&x.to_dtype(DType::F64).unwrap()).unwrap();
            let all = Tensor::ones((1, 1, 5, keys), DType::U8, &Device::Cpu).unwrap();
            let y64 = softmax_composite(x64.as_tensor(), keep.unwrap_or(&all), scale);
            let r64 = r.to_dtype(DType::F64).unwrap();
            let grads64 = (&y64 * &r64)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let gx64 = grads64.get(x64.as_tensor()).unwrap();

            assert!(max_diff(&y, &y64) < 1e-6, "forward {}", max_diff(&y, &y64));
            assert!(max_diff(gx, gx64) < 1e-6, "backward {}", max_diff(gx, gx64));
            let values: Vec<f32> = y.flatten_all().unwrap().to_vec1().unwrap();
            assert!(values.iter().all(|v| v.is_finite()));
            // Masked keys get exactly zero weight.
            if let Some(keep) = keep {
                let hidden = keep.broadcast_as(y.shape()).unwrap().eq(0u8).unwrap();
                let leaked = hidden.where_cond(&y, &y.zeros_like().unwrap()).unwrap();
                assert_eq!(max_diff(&leaked, &y.zeros_like().unwrap()), 0.0);
            }
        }
        // The query that sees nothing: zero weights and zero gradient, never NaN.
        let y = masked_softmax(&x, Some(&keep), 1.0).unwrap();
        let row: Vec<f32> = y
            .get(1)
            .unwrap()
            .get(2)
            .unwrap()
            .get(0)
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(row, vec![0.0; keys]);
        // A mask whose key dimension is strided (read through a transposed view) gives
        // the same weights as its contiguous copy.
        let strided = keep
            .transpose(2, 3)
            .unwrap()
            .contiguous()
            .unwrap()
            .transpose(2, 3)
            .unwrap();
        assert_ne!(strided.stride()[3], 1);
        let y2 = masked_softmax(&x, Some(&strided), 1.0).unwrap();
        assert_eq!(max_diff(&y, &y2), 0.0);
    }
}

/// Central differences of `Σ f(x) ⊙ r` at a few entries of `x`, against `analytic`.
fn check_finite_differences(
    f: impl Fn(&Tensor) -> Tensor,
    x: &Tensor,
    r: &Tensor,
    analytic: &Tensor,
) {
    let loss = |x: &Tensor| -> f64 {
        (f(x) * r)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar()
            .unwrap()
    };
    let flat: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
    let grad: Vec<f32> = analytic.flatten_all().unwrap().to_vec1().unwrap();
    let h = 1e-2f32;
    for i in (0..flat.len()).step_by(flat.len() / 17 + 1) {
        let shifted = |d: f32| {
            let mut v = flat.clone();
            v[i] += d;
            Tensor::from_vec(v, x.shape(), x.device()).unwrap()
        };
        let numeric = (loss(&shifted(h)) - loss(&shifted(-h))) / (2.0 * f64::from(h));
        let want = f64::from(grad[i]);
        assert!(
            (numeric - want).abs() < 2e-3 * (1.0 + want.abs()),
            "entry {i}: finite difference {numeric}, backward {want}"
        );
    }
}

#[test]
fn masked_softmax_backward_matches_finite_differences() {
    let x = randn(&[2, 3, 5, 6], 3);
    let r = randn(&[2, 3, 5, 6], 4);
    let keep = mask(6);
    let xv = Var::from_tensor(&x).unwrap();
    let y = masked_softmax(xv.as_tensor(), Some(&keep), 0.5).unwrap();
    let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    check_finite_differences(
        |x| masked_softmax(x, Some(&keep), 0.5).unwrap(),
        &x,
        &r,
        grads.get(xv.as_tensor()).unwrap(),
    );
}

#[test]
fn layer_norm_equals_the_composition_forward_and_backward() {
    // Rows shorter than one vector of the kernel, and longer with a ragged tail.
    for (rows, d) in [(7, 12), (9, 45)] {
        let x = randn(&[rows, d], 5).affine(3.0, 1.5).unwrap();
        let w = randn(&[d], 6);
        let b = randn(&[d], 7);
        let r = randn(&[rows, d], 8);
        let eps = 1e-5;
        let vars: Vec<Var> = [&x, &w, &b]
            .iter()
            .map(|t| Var::from_tensor(t).unwrap())
            .collect();
        let y = layer_norm(
            vars[0].as_tensor(),
            vars[1].as_tensor(),
            vars[2].as_tensor(),
            eps,
        )
        .unwrap();
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();

        let vars64: Vec<Var> = [&x, &w, &b]
            .iter()
            .map(|t| Var::from_tensor(&t.to_dtype(DType::F64).unwrap()).unwrap())
            .collect();
        let y64 = candle_nn::ops::layer_norm_slow(
            vars64[0].as_tensor(),
            vars64[1].as_tensor(),
            vars64[2].as_tensor(),
            eps,
        )
        .unwrap();
        let grads64 = grads_of(&y64, &r);
        assert!(max_diff(&y, &y64) < 1e-5, "forward {}", max_diff(&y, &y64));
        for (name, (v, v64)) in ["x", "weight", "bias"].iter().zip(vars.iter().zip(&vars64)) {
            let (g, g64) = (
                grads.get(v.as_tensor()).unwrap(),
                grads64.get(v64.as_tensor()).unwrap(),
            );
            assert!(max_diff(g, g64) < 1e-4, "∂/∂{name}: {}", max_diff(g, g64));
        }
        // A 3-D input (batch, seq, d) is normalised row by row too.
        let x3 = x.reshape((1, rows, d)).unwrap();
        let y3 = layer_norm(&x3, &w, &b, eps).unwrap();
        assert_eq!(max_diff(&y3.reshape((rows, d)).unwrap(), &y), 0.0);
    }
}

/// The training paths off the CPU's f32 kernels (`ops::with_grad`: candle's fused forward
/// kernel, a backward of tensor ops) against the compositions they replace, in f64: the
/// outputs and the gradient of every input, for f32 and f64 inputs, on a transposed
/// (non-contiguous) input whose rows are shorter and longer than a warp; then in f32 on
/// each GPU present (the path these ops serve). (candle's norm kernels take no f64 on the
/// CPU.)
#[test]
fn with_grad_ops_equal_the_compositions_forward_and_backward() {
    use posenc_kernels::with_grad;
    type Op = fn(&[&Tensor]) -> candle_core::Result<Tensor>;
    let cases: [(&str, &[DType], usize, Op, Op); 3] = [
        (
            "softmax",
            &[DType::F32, DType::F64],
            1,
            |t| with_grad::softmax_last_dim(t[0]),
            |t| candle_nn::ops::softmax(t[0], D::Minus1),
        ),
        (
            "layer norm",
            &[DType::F32],
            3,
            |t| with_grad::layer_norm(t[0], t[1], t[2], 1e-5),
            |t| candle_nn::ops::layer_norm_slow(t[0], t[1], t[2], 1e-5),
        ),
        (
            "rms norm",
            &[DType::F32],
            2,
            |t| with_grad::rms_norm(t[0], t[1], 1e-5),
            |t| candle_nn::ops::rms_norm_slow(t[0], t[1], 1e-5),
        ),
    ];
    let gpus = posenc_testkit::devices().into_iter().skip(1);
    let gpus: Vec<(DType, Device)> = gpus.map(|d| (DType::F32, d)).collect();
    for (name, dtypes, inputs, op, composite) in cases {
        let cpu = dtypes.iter().map(|&t| (t, Device::Cpu));
        for (dtype, device) in cpu.chain(gpus.iter().cloned()) {
            for d in [12, 45] {
                // x is (2, d, 5) transposed to (2, 5, d); w and b are (d).
                let x = randn(&[2, d, 5], 11).affine(3.0, 1.5).unwrap();
                let all = [x, randn(&[d], 12), randn(&[d], 13)];
                let r = randn(&[2, 5, d], 14).to_dtype(DType::F64).unwrap();
                let run = |dtype: DType, device: &Device, f: Op| {
                    let vars: Vec<Var> = all[..inputs]
                        .iter()
                        .map(|t| {
                            let t = t.to_dtype(dtype).unwrap().to_device(device).unwrap();
                            Var::from_tensor(&t).unwrap()
                        })
                        .collect();
                    let x = vars[0].as_tensor().transpose(1, 2).unwrap();
                    let rest: Vec<&Tensor> = vars[1..].iter().map(Var::as_tensor).collect();
                    let args: Vec<&Tensor> = std::iter::once(&x).chain(rest).collect();
                    let y = f(&args).unwrap();
                    let r = r.to_device(device).unwrap();
                    let loss = (y.to_dtype(DType::F64).unwrap() * &r).unwrap();
                    let grads = loss.sum_all().unwrap().backward().unwrap();
                    let cpu = |t: &Tensor| t.to_device(&Device::Cpu).unwrap();
                    let g: Vec<Tensor> = vars
                        .iter()
                        .map(|v| cpu(grads.get(v.as_tensor()).unwrap()))
                        .collect();
                    (cpu(&y), g)
                };
                let (y, g) = run(dtype, &device, op);
                let (y64, g64) = run(DType::F64, &Device::Cpu, composite);
                assert_eq!(y.dtype(), dtype);
                let what = format!("{name}, {dtype:?} on {device:?}, width {d}");
                assert!(
                    max_diff(&y, &y64) < 1e-5,
                    "{what}: forward {}",
                    max_diff(&y, &y64)
                );
                for (i, (g, g64)) in g.iter().zip(&g64).enumerate() {
                    let diff = max_diff(g, g64);
                    assert!(diff < 1e-4, "{what}: gradient of input {i}: {diff}");
                }
            }
        }
    }
}

/// The residual's sum and norm in one pass at inference (nothing tracked) equals
/// candle-nn's LayerNorm composition of `x + y` in f64, on rows shorter and longer than
/// one vector; with a tracked input it is the differentiable `layer_norm(x + y)`, whose
/// gradients reach both summands. Shapes that do not fit are errors.
#[test]
fn add_layer_norm_equals_the_composition_of_the_sum() {
    for (rows, d) in [(7, 12), (9, 45)] {
        let (x, y) = (
            randn(&[1, rows, d], 30).affine(3.0, 1.5).unwrap(),
            randn(&[1, rows, d], 31),
        );
        let (w, b) = (randn(&[d], 32), randn(&[d], 33));
        let f64_of = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
        let eps = 1e-5;
        let reference = candle_nn::ops::layer_norm_slow(
            &(f64_of(&x) + f64_of(&y)).unwrap(),
            &f64_of(&w),
            &f64_of(&b),
            eps,
        )
        .unwrap();
        let fused = add_layer_norm(&x, &y, &w, &b, eps).unwrap();
        assert!(!fused.track_op(), "the inference op records no backward");
        assert!(
            max_diff(&fused, &reference) < 1e-5,
            "fused {}",
            max_diff(&fused, &reference)
        );

        let (xv, yv) = (Var::from_tensor(&x).unwrap(), Var::from_tensor(&y).unwrap());
        let out = add_layer_norm(xv.as_tensor(), yv.as_tensor(), &w, &b, eps).unwrap();
        assert!(
            max_diff(&out, &reference) < 1e-5,
            "tracked {}",
            max_diff(&out, &reference)
        );
        let r = randn(&[1, rows, d], 34);
        let grads = (&out * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let s64 = Var::from_tensor(&(f64_of(&x) + f64_of(&y)).unwrap()).unwrap();
        let grads64 =
            (candle_nn::ops::layer_norm_slow(s64.as_tensor(), &f64_of(&w), &f64_of(&b), eps)
                .unwrap()
                * f64_of(&r))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let g64 = grads64.get(s64.as_tensor()).unwrap();
        for (name, v) in [("x", &xv), ("y", &yv)] {
            let g = grads.get(v.as_tensor()).unwrap();
            assert!(max_diff(g, g64) < 1e-4, "∂/∂{name}: {}", max_diff(g, g64));
        }
    }
    let (x, w) = (randn(&[2, 8], 35), randn(&[8], 36));
    let e = add_layer_norm(&x, &randn(&[2, 7], 37), &w, &w, 1e-5).unwrap_err();
    assert!(e.to_string().contains("shape"), "{e}");
    let e = add_layer_norm(&x, &x, &randn(&[7], 38), &w, 1e-5).unwrap_err();
    assert!(e.to_string().contains("must be (8,)"), "{e}");
}

#[test]
fn layer_norm_backward_matches_finite_differences() {
    let (rows, d) = (5, 8);
    let x = randn(&[rows, d], 9);
    let w = randn(&[d], 10);
    let b = randn(&[d], 11);
    let r = randn(&[rows, d], 12);
    let xv = Var::from_tensor(&x).unwrap();
    let y = layer_norm(xv.as_tensor(), &w, &b, 1e-5).unwrap();
    let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    check_finite_differences(
        |x| layer_norm(x, &w, &b, 1e-5).unwrap(),
        &x,
        &r,
        grads.get(xv.as_tensor()).unwrap(),
    );
}

#[test]
fn gelu_equals_the_erf_form_forward_and_backward() {
    // x over [−10, 10], with 0 and the far tails where erf saturates.
    let mut v: Vec<f32> = randn(&[4000], 14)
        .affine(5.0, 0.0)
        .unwrap()
        .to_vec1()
        .unwrap();
    v.extend([0.0, -0.0, 1e-6, -1e-6, 30.0, -30.0, 100.0, -100.0]);
    let x = Tensor::new(v.as_slice(), &Device::Cpu).unwrap();
    let r = randn(&[v.len()], 15);
    let xv = Var::from_tensor(&x).unwrap();
    let y = gelu(xv.as_tensor()).unwrap();
    let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    // The composition it replaces: candle's erf GELU, here in f64.
    let xv64 = Var::from_tensor(&x.to_dtype(DType::F64).unwrap()).unwrap();
    let y64 = xv64.as_tensor().gelu_erf().unwrap();
    let grads64 = grads_of(&y64, &r);
    assert!(max_diff(&y, &y64) < 1e-5, "forward {}", max_diff(&y, &y64));
    let (g, g64) = (
        grads.get(xv.as_tensor()).unwrap(),
        grads64.get(xv64.as_tensor()).unwrap(),
    );
    assert!(max_diff(g, g64) < 1e-5, "backward {}", max_diff(g, g64));
    // And against candle's own f32 kernel, which inference used before.
    let before = x.gelu_erf().unwrap();
    assert!(max_diff(&y, &before) < 1e-5, "{}", max_diff(&y, &before));
    // Shapes pass through.
    let x3 = x.narrow(0, 0, 4000).unwrap().reshape((4, 25, 40)).unwrap();
    assert_eq!(gelu(&x3).unwrap().dims(), &[4, 25, 40]);
}

#[test]
fn gelu_backward_matches_finite_differences() {
    let x = randn(&[6, 7], 16).affine(2.0, 0.0).unwrap();
    let r = randn(&[6, 7], 17);
    let xv = Var::from_tensor(&x).unwrap();
    let y = gelu(xv.as_tensor()).unwrap();
    let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    check_finite_differences(
        |x| gelu(x).unwrap(),
        &x,
        &r,
        grads.get(xv.as_tensor()).unwrap(),
    );
}

/// The operands of the matmul tests: plain matrices, a transposed weight (a linear
/// layer's `x Wᵀ`), attention's batch of small products with strided keys (spread over
/// the threads), heads read through a transposed view (non-contiguous batch dimensions),
/// a batch of products large enough for gemm to split each, and an empty inner dimension.
fn matmul_cases() -> Vec<(&'static str, Tensor, Tensor)> {
    let t = |x: Tensor| x.t().unwrap();
    vec![
        ("plain", randn(&[33, 20], 20), randn(&[20, 17], 21)),
        ("x Wᵀ", randn(&[50, 24], 22), t(randn(&[19, 24], 23))),
        (
            "Q Kᵀ",
            randn(&[2, 12, 9, 8], 24),
            t(randn(&[2, 12, 11, 8], 25)),
        ),
        (
            "heads by strides",
            randn(&[2, 9, 12, 8], 26).transpose(1, 2).unwrap(),
            randn(&[2, 12, 8, 5], 27),
        ),
        ("large", randn(&[2, 130, 90], 28), randn(&[2, 90, 100], 29)),
        ("empty inner", randn(&[3, 0], 30), randn(&[0, 4], 31)),
    ]
}

#[test]
fn matmul_equals_candles_forward_and_backward() {
    for (name, a, b) in matmul_cases() {
        let (av, bv) = (Var::from_tensor(&a).unwrap(), Var::from_tensor(&b).unwrap());
        let c = matmul(av.as_tensor(), bv.as_tensor()).unwrap();
        let r = randn(c.dims(), 32);
        let grads = (&c * &r).unwrap().sum_all().unwrap().backward().unwrap();
        // candle's matmul in f64 is the reference.
        let f64_var = |x: &Tensor| {
            Var::from_tensor(&x.to_dtype(DType::F64).unwrap().contiguous().unwrap()).unwrap()
        };
        let (a64, b64) = (f64_var(&a), f64_var(&b));
        let c64 = a64.as_tensor().matmul(b64.as_tensor()).unwrap();
        let grads64 = (&c64 * &r.to_dtype(DType::F64).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(c.dims(), c64.dims(), "{name}");
        assert!(
            max_diff(&c, &c64) < 1e-4,
            "{name}: forward {}",
            max_diff(&c, &c64)
        );
        for (what, v, v64) in [("a", &av, &a64), ("b", &bv, &b64)] {
            let (g, g64) = (
                grads.get(v.as_tensor()).unwrap(),
                grads64.get(v64.as_tensor()).unwrap(),
            );
            assert_eq!(g.dims(), v.dims(), "{name}: ∂/∂{what} shape");
            assert!(
                max_diff(g, g64) < 1e-4,
                "{name}: ∂/∂{what} {}",
                max_diff(g, g64)
            );
        }
    }
}

#[test]
fn matmul_backward_matches_finite_differences() {
    let a = randn(&[3, 4, 6], 33);
    let b = randn(&[3, 5, 6], 34).transpose(1, 2).unwrap();
    let r = randn(&[3, 4, 5], 35);
    let av = Var::from_tensor(&a).unwrap();
    let c = matmul(av.as_tensor(), &b).unwrap();
    let grads = (&c * &r).unwrap().sum_all().unwrap().backward().unwrap();
    check_finite_differences(
        |a| matmul(a, &b).unwrap(),
        &a,
        &r,
        grads.get(av.as_tensor()).unwrap(),
    );
}

/// The composition the fused linear layer replaces: product with the transposed weight,
/// bias, ReLU.
fn linear_composite(x: &Tensor, w: &Tensor, b: Option<&Tensor>, relu: bool) -> Tensor {
    let y = x.broadcast_matmul(&w.t().unwrap()).unwrap();
    let y = match b {
        Some(b) => y.broadcast_add(b).unwrap(),
        None => y,
    };
    if relu {
        y.relu().unwrap()
    } else {
        y
    }
}

/// Where the ops run: f32 on the CPU (their kernels), then f64 on the CPU and f32 on
/// each GPU present, which take candle's ops under one node (`ops::with_grad`).
fn placements() -> Vec<(DType, Device)> {
    let gpus = posenc_testkit::devices().into_iter().skip(1);
    let mut all = vec![(DType::F32, Device::Cpu), (DType::F64, Device::Cpu)];
    all.extend(gpus.map(|d| (DType::F32, d)));
    all
}

/// `t` as a variable of `dtype` on `device`.
fn var_on(t: &Tensor, dtype: DType, device: &Device) -> Var {
    Var::from_tensor(&t.to_dtype(dtype).unwrap().to_device(device).unwrap()).unwrap()
}

#[test]
fn linear_equals_the_composition_forward_and_backward() {
    let x = randn(&[3, 7, 20], 50);
    // A weight that is a row range of a packed matrix, as attention's W^Q, W^K, W^V are.
    let packed = randn(&[3 * 19, 20], 51);
    let b = randn(&[19], 52);
    let r = randn(&[3, 7, 19], 53);
    for (dtype, device) in placements() {
        for (case, with_bias, relu) in [
            ("bias", true, false),
            ("no bias", false, false),
            ("bias, ReLU", true, true),
            ("ReLU", false, true),
        ] {
            let name = format!("{case}, {dtype:?} on {device:?}");
            let (xv, pv, bv) = (
                var_on(&x, dtype, &device),
                var_on(&packed, dtype, &device),
                var_on(&b, dtype, &device),
            );
            let w = pv.as_tensor().narrow(0, 19, 19).unwrap();
            let bias = with_bias.then(|| bv.as_tensor());
            let y = linear(xv.as_tensor(), &w, bias, relu).unwrap();
            let grads = grads_of(&y, &r);

            let f64_var = |t: &Tensor| var_on(t, DType::F64, &Device::Cpu);
            let (xv64, pv64, bv64) = (f64_var(&x), f64_var(&packed), f64_var(&b));
            let w64 = pv64.as_tensor().narrow(0, 19, 19).unwrap();
            let y64 = linear_composite(
                xv64.as_tensor(),
                &w64,
                with_bias.then(|| bv64.as_tensor()),
                relu,
            );
            let grads64 = grads_of(&y64, &r);
            assert_eq!(y.dims(), &[3, 7, 19], "{name}");
            assert_eq!(y.dtype(), dtype, "{name}");
            assert!(
                max_diff(&y, &y64) < 1e-5,
                "{name}: forward {}",
                max_diff(&y, &y64)
            );
            let mut pairs = vec![("x", &xv, &xv64), ("packed weight", &pv, &pv64)];
            if with_bias {
                pairs.push(("bias", &bv, &bv64));
            }
            assert_grads_close(&name, 1e-4, &pairs, &grads, &grads64);
        }
    }
}

/// `linear_rows` (attention's `W^Q, W^K, W^V` as rows of `in_proj_weight`) equals the
/// composition of the packed tensors' `narrow`s, forward and backward, the packed weight's
/// and bias's gradients zero outside the rows, wherever the op runs.
#[test]
fn linear_rows_equals_the_composition_of_the_narrows() {
    let x = randn(&[3, 7, 20], 60);
    let packed = randn(&[3 * 19, 20], 61);
    let packed_b = randn(&[3 * 19], 62);
    let r = randn(&[3, 7, 19], 63);
    let rows = 19..38;
    let narrow = |t: &Tensor| t.narrow(0, 19, 19).unwrap();
    for (dtype, device) in placements() {
        for relu in [false, true] {
            let name = format!("relu {relu}, {dtype:?} on {device:?}");
            let vars = [&x, &packed, &packed_b].map(|t| var_on(t, dtype, &device));
            let [xv, wv, bv] = vars.each_ref().map(Var::as_tensor);
            let y = linear_rows(xv, wv, Some(bv), rows.clone(), relu).unwrap();
            let grads = grads_of(&y, &r);

            let vars64 = [&x, &packed, &packed_b].map(|t| var_on(t, DType::F64, &Device::Cpu));
            let [xv64, wv64, bv64] = vars64.each_ref().map(Var::as_tensor);
            let y64 = linear_composite(xv64, &narrow(wv64), Some(&narrow(bv64)), relu);
            let grads64 = grads_of(&y64, &r);
            assert!(
                max_diff(&y, &y64) < 1e-5,
                "{name}: forward {}",
                max_diff(&y, &y64)
            );
            let pairs = [
                ("x", &vars[0], &vars64[0]),
                ("packed weight", &vars[1], &vars64[1]),
                ("packed bias", &vars[2], &vars64[2]),
            ];
            assert_grads_close(&name, 1e-4, &pairs, &grads, &grads64);
        }
    }
    // Rows past the packed weight are an error.
    assert!(linear_rows(&x, &packed, None, 50..60, false).is_err());
}

#[test]
fn linear_backward_matches_finite_differences() {
    let x = randn(&[6, 5], 54);
    let w = randn(&[4, 5], 55);
    let b = randn(&[4], 56);
    let r = randn(&[6, 4], 57);
    let (xv, wv) = (Var::from_tensor(&x).unwrap(), Var::from_tensor(&w).unwrap());
    let y = linear(xv.as_tensor(), wv.as_tensor(), Some(&b), true).unwrap();
    let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    check_finite_differences(
        |x| linear(x, &w, Some(&b), true).unwrap(),
        &x,
        &r,
        grads.get(xv.as_tensor()).unwrap(),
    );
    check_finite_differences(
        |w| linear(&x, w, Some(&b), true).unwrap(),
        &w,
        &r,
        grads.get(wv.as_tensor()).unwrap(),
    );
}

/// `linear_gelu` at inference (one op, GELU applied in the bias pass) and when a gradient
/// flows (`gelu(linear(…))`) equals `gelu_erf(x Wᵀ + b)` in f64, with and without a bias;
/// through a tracked input, its gradient is the f64 composition's.
#[test]
fn linear_gelu_equals_the_composition_in_f64() {
    let (x, w, b) = (
        randn(&[3, 7, 12], 60),
        randn(&[19, 12], 61),
        randn(&[19], 62),
    );
    let f64_of = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
    for bias in [Some(&b), None] {
        let pre = f64_of(&x)
            .broadcast_matmul(&f64_of(&w).t().unwrap())
            .unwrap();
        let pre = match bias {
            Some(b) => pre.broadcast_add(&f64_of(b)).unwrap(),
            None => pre,
        };
        let reference = pre.gelu_erf().unwrap();
        // Inference: nothing tracked, the fused op.
        let y = linear_gelu(&x, &w, bias).unwrap();
        assert!(!y.track_op(), "the fused op records no backward");
        assert!(
            max_diff(&y, &reference) < 1e-5,
            "fused forward {}",
            max_diff(&y, &reference)
        );
        // Training: a tracked weight takes the differentiable composition.
        let wv = Var::from_tensor(&w).unwrap();
        let y = linear_gelu(&x, wv.as_tensor(), bias).unwrap();
        assert!(
            max_diff(&y, &reference) < 1e-5,
            "tracked forward {}",
            max_diff(&y, &reference)
        );
        let r = randn(&[3, 7, 19], 63);
        let g = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let wv64 = Var::from_tensor(&f64_of(&w)).unwrap();
        let pre64 = f64_of(&x)
            .broadcast_matmul(&wv64.as_tensor().t().unwrap())
            .unwrap();
        let pre64 = match bias {
            Some(b) => pre64.broadcast_add(&f64_of(b)).unwrap(),
            None => pre64,
        };
        let g64 = (pre64.gelu_erf().unwrap() * f64_of(&r))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let (gw, gw64) = (
            g.get(wv.as_tensor()).unwrap(),
            g64.get(wv64.as_tensor()).unwrap(),
        );
        assert!(max_diff(gw, gw64) < 1e-4, "∂/∂W {}", max_diff(gw, gw64));
    }
    let e = linear_gelu(&x, &randn(&[19, 11], 64), None).unwrap_err();
    assert!(e.to_string().contains("do not fit"), "{e}");
}

/// The composition the fused attention replaces, in whatever dtype `q` has: key and
/// value heads repeated for grouped queries, scores, [`softmax_composite`], dropout's
/// rescaled keep mask from the sample `u`, the weighted sum, heads merged.
fn attention_composite(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    keep: &Tensor,
    scale: f64,
    drop: Option<(f64, &Tensor)>,
) -> (Tensor, Tensor) {
    let (b, h, tq, d) = q.dims4().unwrap();
    let (_, kv, tk, _) = k.dims4().unwrap();
    let repeat = |x: &Tensor| {
        x.unsqueeze(2)
            .unwrap()
            .broadcast_as((b, kv, h / kv, tk, d))
            .unwrap()
            .reshape((b, h, tk, d))
            .unwrap()
    };
    let scores = q.matmul(&repeat(k).t().unwrap()).unwrap();
    let w = softmax_composite(&scores, keep, scale);
    let dropped = match drop {
        Some((p, u)) => {
            let kept = u.ge(p).unwrap().to_dtype(w.dtype()).unwrap();
            (&w * (kept / (1.0 - p)).unwrap()).unwrap()
        }
        None => w.clone(),
    };
    let out = dropped
        .matmul(&repeat(v))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((b, tq, h * d))
        .unwrap();
    (out, w)
}

#[test]
fn attention_equals_the_composition_forward_and_backward() {
    let (b, h, kv, tq, tk, d) = (2, 4, 2, 5, 37, 8);
    // Q, K, V as projections leave them, heads merged; the op takes them so, or with
    // the heads split by strides (not copied).
    let q = randn(&[b, tq, h * d], 40);
    let k = randn(&[b, tk, kv * d], 41);
    let v = randn(&[b, tk, kv * d], 42);
    let split = |x: &Tensor| {
        let (b, t, hd) = x.dims3().unwrap();
        x.reshape((b, t, hd / d, d))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
    };
    let r = randn(&[b, tq, h * d], 43);
    let u = ((randn(&[b, h, tq, tk], 44) + 2.0).unwrap() / 4.0).unwrap();
    let scale = 0.35;
    let all = Tensor::ones((1, 1, tq, tk), DType::U8, &Device::Cpu).unwrap();
    let masked = mask(tk);
    let cases = [
        ("masked", Some(&masked), None, false),
        ("unmasked", None, None, false),
        ("masked, dropout", Some(&masked), Some(0.3), false),
        ("masked, q and v merged", Some(&masked), None, true),
        ("dropout, q and v merged", None, Some(0.3), true),
    ];
    for (dtype, device) in placements() {
        for (case, keep, drop, merged) in cases {
            let name = format!("{case}, {dtype:?} on {device:?}");
            let vars = [&q, &k, &v].map(|t| var_on(t, dtype, &device));
            let sample = drop.map(|p| (p as f32, u.to_device(&device).unwrap()));
            let [qa, ka, va] = vars.each_ref().map(|v| split(v.as_tensor()));
            let (qa, va) = match merged {
                true => (vars[0].as_tensor().clone(), vars[2].as_tensor().clone()),
                false => (qa, va),
            };
            let keep_on = keep.map(|m| m.to_device(&device).unwrap());
            let (out, w) =
                attention(&qa, &ka, &va, d, keep_on.as_ref(), scale as f32, sample).unwrap();
            let grads = grads_of(&out, &r);

            let vars64 = [&q, &k, &v].map(|t| var_on(t, DType::F64, &Device::Cpu));
            let u64 = u.to_dtype(DType::F64).unwrap();
            let (out64, w64) = attention_composite(
                &split(vars64[0].as_tensor()).contiguous().unwrap(),
                &split(vars64[1].as_tensor()).contiguous().unwrap(),
                &split(vars64[2].as_tensor()).contiguous().unwrap(),
                keep.unwrap_or(&all),
                scale,
                drop.map(|p| (p, &u64)),
            );
            let grads64 = grads_of(&out64, &r);
            assert_eq!(out.dtype(), dtype, "{name}");
            assert!(
                max_diff(&out, &out64) < 1e-5,
                "{name}: output {}",
                max_diff(&out, &out64)
            );
            assert!(
                max_diff(&w, &w64) < 1e-6,
                "{name}: weights {}",
                max_diff(&w, &w64)
            );
            let pairs = [
                ("q", &vars[0], &vars64[0]),
                ("k", &vars[1], &vars64[1]),
                ("v", &vars[2], &vars64[2]),
            ];
            assert_grads_close(&name, 1e-5, &pairs, &grads, &grads64);
            let values: Vec<f64> = out
                .to_dtype(DType::F64)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert!(values.iter().all(|v| v.is_finite()), "{name}");
        }
    }
}

#[test]
fn attention_backward_matches_finite_differences() {
    let (b, h, kv, tq, tk, d) = (2, 2, 1, 5, 6, 4);
    let q = randn(&[b, h, tq, d], 45);
    let k = randn(&[b, kv, tk, d], 46);
    let v = randn(&[b, kv, tk, d], 47);
    let r = randn(&[b, tq, h * d], 48);
    let keep = mask(tk);
    let vars = [&q, &k, &v].map(|t| Var::from_tensor(t).unwrap());
    let (out, _) = attention(
        vars[0].as_tensor(),
        vars[1].as_tensor(),
        vars[2].as_tensor(),
        d,
        Some(&keep),
        0.5,
        None,
    )
    .unwrap();
    let grads = (&out * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let run = |q: &Tensor, k: &Tensor, v: &Tensor| {
        attention(q, k, v, d, Some(&keep), 0.5, None).unwrap().0
    };
    check_finite_differences(
        |q| run(q, &k, &v),
        &q,
        &r,
        grads.get(vars[0].as_tensor()).unwrap(),
    );
    check_finite_differences(
        |k| run(&q, k, &v),
        &k,
        &r,
        grads.get(vars[1].as_tensor()).unwrap(),
    );
    check_finite_differences(
        |v| run(&q, &k, v),
        &v,
        &r,
        grads.get(vars[2].as_tensor()).unwrap(),
    );
}

#[test]
fn fused_ops_refuse_what_they_cannot_do() {
    let x = randn(&[2, 3], 13).to_dtype(DType::F16).unwrap();
    assert!(gelu(&x).unwrap_err().to_string().contains("f32"));
    assert!(masked_softmax(&x, None, 1.0)
        .unwrap_err()
        .to_string()
        .contains("f32"));
    let x = randn(&[2, 3], 14);
    let e = layer_norm(&x, &randn(&[4], 1), &randn(&[4], 2), 1e-5).unwrap_err();
    assert!(e.to_string().contains("(3,)"), "{e}");
    let bad_mask = Tensor::ones((2, 5), DType::U8, &Device::Cpu).unwrap();
    assert!(masked_softmax(&x, Some(&bad_mask), 1.0).is_err());
    // Inner dimensions that differ, and batches that differ, are errors naming the shapes.
    let e = matmul(&x, &randn(&[4, 2], 15)).unwrap_err();
    assert!(e.to_string().contains("[2, 3]"), "{e}");
    assert!(matmul(&randn(&[2, 2, 3], 16), &randn(&[3, 3, 2], 17)).is_err());
    assert!(matmul(&randn(&[3], 18), &randn(&[3], 19)).is_err());
    // Attention: key heads that do not divide the query heads, mismatched widths.
    let q = randn(&[1, 3, 2, 4], 20);
    let e = attention(
        &q,
        &randn(&[1, 2, 2, 4], 21),
        &randn(&[1, 2, 2, 4], 22),
        4,
        None,
        1.0,
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("kv dividing h"), "{e}");
    let k = randn(&[1, 1, 2, 5], 23);
    assert!(attention(&q, &k, &k, 4, None, 1.0, None).is_err());
    // Merged heads whose width the head size does not divide, a head size that differs.
    let e = attention(&randn(&[1, 2, 6], 29), &k, &k, 4, None, 1.0, None).unwrap_err();
    assert!(e.to_string().contains("[1, 2, 6]"), "{e}");
    assert!(attention(&q, &q, &q, 2, None, 1.0, None).is_err());
    // Linear: an input of the wrong width, a bias of the wrong length.
    let e = linear(&randn(&[2, 6], 24), &randn(&[3, 5], 25), None, false).unwrap_err();
    assert!(e.to_string().contains("[2, 6]"), "{e}");
    let e = linear(
        &randn(&[2, 5], 26),
        &randn(&[3, 5], 27),
        Some(&randn(&[4], 28)),
        false,
    );
    assert!(e.is_err());
}
