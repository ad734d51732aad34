//! `fox`'s decay: the blocked running sums against candle's `cumsum` (forward and
//! gradient), the bias against the sums written out one by one, the resting table against
//! ALiBi's form, and absurd settings refused by name.

use candle_core::{DType, Device, Tensor, Var};
use posenc::fox::FoxConfig;
use posenc::{Decay, EncodingConfig, Form};

#[test]
fn blocked_running_sums_equal_cumsum_with_their_gradient() {
    for n in [1, 63, 64, 65, 200, 4097] {
        let x =
            Var::from_tensor(&Tensor::randn(0f64, 1.0, (2, 3, n), &Device::Cpu).unwrap()).unwrap();
        let w = Tensor::randn(0f64, 1.0, (2, 3, n), &Device::Cpu).unwrap();
        let ours = Decay::running_sums(x.as_tensor()).unwrap();
        let theirs = x.as_tensor().cumsum(2).unwrap();
        let diff = |a: &Tensor, b: &Tensor| {
            (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap()
        };
        assert!(diff(&ours, &theirs) < 1e-10, "n = {n}");
        let g_ours = (ours * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let g_theirs = (theirs * &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let (a, b) = (g_ours.get(&x).unwrap(), g_theirs.get(&x).unwrap());
        assert!(diff(a, b) < 1e-10, "n = {n}: gradient");
    }
}

#[test]
fn the_bias_sums_the_gates_between_query_and_key() {
    let (b, h, n) = (2, 3, 7);
    let gate = || {
        Tensor::rand(-2f64, 0.0, (b, h, n), &Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    };
    let (before, after) = (gate(), gate());
    let g = before.to_vec3::<f32>().unwrap();
    let r = after.to_vec3::<f32>().unwrap();
    let decay = Decay {
        before,
        after: Some(after),
    };
    let bias = decay.bias().unwrap().to_vec3_all();
    for (bi, heads) in bias.iter().enumerate() {
        for (hi, rows) in heads.iter().enumerate() {
            for (i, row) in rows.iter().enumerate() {
                for (j, &value) in row.iter().enumerate() {
                    let expected: f32 = match j <= i {
                        true => (j + 1..=i).map(|l| g[bi][hi][l]).sum(),
                        false => (i + 1..=j).map(|l| r[bi][hi][l]).sum(),
                    };
                    assert!((value - expected).abs() < 1e-5, "({bi}, {hi}, {i}, {j})");
                }
            }
        }
    }
}

trait Vec4 {
    fn to_vec3_all(&self) -> Vec<Vec<Vec<Vec<f32>>>>;
}

impl Vec4 for Tensor {
    fn to_vec3_all(&self) -> Vec<Vec<Vec<Vec<f32>>>> {
        (0..self.dim(0).unwrap())
            .map(|i| self.get(i).unwrap().to_vec3::<f32>().unwrap())
            .collect()
    }
}

/// On a zero input every gate of head `h` is `σ(b)`: the bias is ALiBi's, with a slope of
/// `−ln σ(b)` per token.
#[test]
fn at_rest_the_gates_are_alibi() {
    let enc: EncodingConfig = r#"{"kind": "fox", "bias_init": 2.0}"#.parse().unwrap();
    let fox = enc.build_untrained(8, 2, &Device::Cpu).unwrap();
    let Form::Bias { bias, .. } = fox.table(5).unwrap().form else {
        panic!("fox's table is a bias")
    };
    let slope = -(1.0 / (1.0 + (-2f64).exp())).ln();
    for (h, rows) in bias.to_vec3::<f32>().unwrap().iter().enumerate() {
        for (i, row) in rows.iter().enumerate() {
            for (j, &value) in row.iter().enumerate() {
                let expected = -slope * (i as f64 - j as f64).abs();
                assert!((value as f64 - expected).abs() < 1e-5, "({h}, {i}, {j})");
            }
        }
    }
}

#[test]
fn absurd_gates_are_refused_by_name() {
    let fox = |bias_init: f64, scale: f64| {
        EncodingConfig::new(FoxConfig { bias_init, scale })
            .build_untrained(8, 2, &Device::Cpu)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    for (err, named) in [
        (fox(f64::NAN, 1.0), "bias_init"),
        (fox(f64::INFINITY, 1.0), "bias_init"),
        (fox(5.0, 0.0), "scale"),
        (fox(5.0, -1.5), "scale"),
        (fox(5.0, f64::NAN), "scale"),
    ] {
        assert!(err.contains("fox") && err.contains(named), "{err}");
    }
    let err = r#"{"kind": "fox", "gate": 1}"#.parse::<EncodingConfig>().unwrap_err();
    assert!(err.to_string().contains("gate"), "{err}");
}
