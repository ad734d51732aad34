//! Attention with a learned sink per head (`sink`) against x-transformers'
//! `Attention(head_learned_sink = True)`: the output, the weights on the real keys, and the
//! gradients in the input, the sink logits and `W^Q` (fixtures by
//! `scripts/make_sink_fixtures.py`).

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{Direction, EncodingConfig, Target};

use crate::common::{attend_whole, fixture_attention, fixtures, max_abs_diff, var};

const TOL: f32 = 1e-5;

#[test]
fn attention_with_sinks_matches_x_transformers() {
    let f = fixtures("sinks");
    for name in ["causal", "padded"] {
        let heads = f[&format!("{name}.encoding.logits")].dim(0).unwrap();
        let (mha, varmap, mask) = fixture_attention(&f, name, "sink", heads);
        let x = Var::from_tensor(&f[&format!("{name}.x")]).unwrap();
        let attended = attend_whole(&mha, x.as_tensor(), &mask);
        // Padded queries are left out: x-transformers gives them outputs of its own.
        let real = f[&format!("{name}.keep")].to_dtype(DType::F32).unwrap();
        let rows = real.unsqueeze(2).unwrap();
        let out = attended.output.broadcast_mul(&rows).unwrap();
        let weights = attended.weights.unwrap();
        let weights = weights.broadcast_mul(&rows.unsqueeze(1).unwrap()).unwrap();
        let expected_w = f[&format!("{name}.weights")]
            .broadcast_mul(&rows.unsqueeze(1).unwrap())
            .unwrap();
        let d_out = max_abs_diff(&out, &f[&format!("{name}.out")]);
        let d_w = max_abs_diff(&weights, &expected_w);
        // With a sink the weights on the real keys add up to less than 1.
        let most = weights.sum(3).unwrap().max_all().unwrap();
        assert!(most.to_scalar::<f32>().unwrap() < 1.0 - 1e-3, "{name}");

        let loss = (out * &f[&format!("{name}.w")]).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        let grad = |t: &Tensor| grads.get(t).unwrap().clone();
        let d_x = max_abs_diff(&grad(x.as_tensor()), &f[&format!("{name}.grad_x")]);
        let sink = var(&varmap, "encoding.logits");
        let d_sink = max_abs_diff(&grad(sink.as_tensor()), &f[&format!("{name}.grad_sink")]);
        let wq = var(&varmap, "q_proj.weight");
        let d_wq = max_abs_diff(&grad(wq.as_tensor()), &f[&format!("{name}.grad_q_proj")]);
        println!(
            "{name}: max |Δ| output {d_out:e}, weights {d_w:e}, ∂x {d_x:e}, ∂sink {d_sink:e}, ∂W^Q {d_wq:e}"
        );
        for (what, d) in [("output", d_out), ("weights", d_w), ("∂x", d_x)] {
            assert!(d < TOL, "{name}: {what} off by {d:e}");
        }
        for (what, d) in [("∂sink", d_sink), ("∂W^Q", d_wq)] {
            assert!(d < TOL, "{name}: {what} off by {d:e}");
        }
    }
}

/// Two sinks in one stack weigh as one whose logit is the log of their exponentials' sum.
#[test]
fn a_stack_of_sinks_is_one_sink() {
    let target = Target::new(8, 2, Direction::Causal).unwrap();
    let build = |json: &str| {
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let e = json
            .parse::<EncodingConfig>()
            .unwrap()
            .build(&target, vb)
            .unwrap();
        e.capabilities()
            .sink()
            .unwrap()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let two = build(
        r#"{"kind": "stack", "of": [{"kind": "sink", "init": 1.0}, "rope", {"kind": "sink", "init": -0.5}]}"#,
    );
    let expected = (1f64.exp() + (-0.5f64).exp()).ln() as f32;
    assert_eq!(two.len(), 2);
    for s in two {
        assert!((s - expected).abs() < 1e-6, "{s} against {expected}");
    }
    let none = EncodingConfig::from_kind("rope")
        .unwrap()
        .build_untrained(8, 2, &Device::Cpu)
        .unwrap();
    assert!(none.capabilities().sink().unwrap().is_none());
}
