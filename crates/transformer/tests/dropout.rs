//! Dropout: seeded per step, dropping a share `p` of the units and scaling the rest by
//! `1 / (1 − p)`, with the gradient of that product; the identity in evaluation.

use candle_core::{Device, Tensor, Var};
use posenc_transformer::dropout::{dropout, seed, uniform};

const P: f32 = 0.25;

/// `(n,)` ones that track gradients, as a training activation does.
fn training_ones(n: usize) -> Var {
    Var::ones(n, candle_core::DType::F32, &Device::Cpu).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn the_same_seed_and_step_drop_the_same_units() {
    let x = training_ones(4096);
    let draw = |s: u64, step: u64| {
        seed(s, step);
        values(&dropout(x.as_tensor(), P).unwrap())
    };
    assert_eq!(draw(7, 3), draw(7, 3));
    assert_ne!(draw(7, 3), draw(7, 4));
    assert_ne!(draw(7, 3), draw(8, 3));
}

#[test]
fn a_share_p_is_dropped_and_the_rest_scaled() {
    let n = 200_000;
    let x = training_ones(n);
    seed(1, 0);
    let y = values(&dropout(x.as_tensor(), P).unwrap());
    let scale = 1.0 / (1.0 - P);
    assert!(
        y.iter().all(|&v| v == 0.0 || v == scale),
        "values other than 0 and 1/(1-p)"
    );
    let dropped = y.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
    // The binomial share's standard deviation is sqrt(p(1-p)/n) ≈ 0.001: 5 of them.
    assert!((dropped - f64::from(P)).abs() < 0.005, "{dropped}");
    let u = values(&uniform(n, &Device::Cpu).unwrap());
    assert!(u.iter().all(|v| (0.0..1.0).contains(v)));
}

#[test]
fn the_gradient_is_the_mask() {
    let x = training_ones(1000);
    seed(2, 5);
    let y = dropout(x.as_tensor(), P).unwrap();
    let grads = y.sum_all().unwrap().backward().unwrap();
    let g = values(grads.get(x.as_tensor()).unwrap());
    // y = x · mask and x is all ones, so ∂Σy/∂x is y itself.
    assert_eq!(g, values(&y));
}

#[test]
fn evaluation_is_the_identity_and_a_bad_p_is_an_error() {
    let frozen = Tensor::ones(100, candle_core::DType::F32, &Device::Cpu).unwrap();
    assert_eq!(values(&dropout(&frozen, P).unwrap()), vec![1.0; 100]);
    let x = training_ones(10);
    let e = dropout(x.as_tensor(), 1.5).unwrap_err().to_string();
    assert!(e.contains("[0, 1)"), "{e}");
}
