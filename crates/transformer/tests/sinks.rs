//! Attention with a learned sink per head (`sink`) against x-transformers'
//! `Attention(head_learned_sink = True)`: the output, the weights on the real keys, and the
//! gradients in the input, the sink logits and `W^Q` (fixtures by
//! `scripts/make_sink_fixtures.py`).

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{Direction, EncodingConfig, Target};
use posenc_transformer::attention::{AttentionInput, MultiHeadAttention};
use posenc_transformer::{BlockConfig, Mask};

use crate::common::max_abs_diff;

const TOL: f32 = 1e-5;

fn fixtures() -> HashMap<String, Tensor> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sinks.safetensors");
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

/// The case's attention with its weights in a `VarMap`, and its mask.
fn case(f: &HashMap<String, Tensor>, name: &str) -> (MultiHeadAttention, VarMap, Mask) {
    let x = &f[&format!("{name}.x")];
    let (_, n, d_model) = x.dims3().unwrap();
    let heads = f[&format!("{name}.encoding.logits")].dim(0).unwrap();
    let causal = name == "causal";
    let direction = match causal {
        true => Direction::Causal,
        false => Direction::Bidirectional,
    };
    // The weights as the fixture names them, so the projections load apart (`q_proj`, …).
    let varmap = VarMap::new();
    for key in ["q_proj", "k_proj", "v_proj", "out_proj"].map(|p| format!("{p}.weight")) {
        let t = &f[&format!("{name}.{key}")];
        varmap
            .get(
                t.shape(),
                &key,
                candle_nn::init::ZERO,
                DType::F32,
                &Device::Cpu,
            )
            .unwrap();
    }
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let target = Target::new(d_model, heads, direction).unwrap();
    let sink = EncodingConfig::from_kind("sink")
        .unwrap()
        .build(&target, vb.pp("encoding"))
        .unwrap();
    let cfg = BlockConfig {
        bias: false,
        ..BlockConfig::new(d_model, heads, 4 * d_model)
    };
    let mha = MultiHeadAttention::new(&cfg, Some(sink), vb).unwrap();
    for (key, var) in varmap.data().lock().unwrap().iter() {
        var.set(&f[&format!("{name}.{key}")]).unwrap();
    }
    let mask = match causal {
        true => Mask::causal(n, n, 0, &Device::Cpu).unwrap(),
        false => Mask::from_keep(&f[&format!("{name}.keep")]).unwrap(),
    };
    (mha, varmap, mask)
}

fn var(varmap: &VarMap, name: &str) -> Var {
    varmap.data().lock().unwrap()[name].clone()
}

#[test]
fn attention_with_sinks_matches_x_transformers() {
    let f = fixtures();
    for name in ["causal", "padded"] {
        let (mha, varmap, mask) = case(&f, name);
        let x = Var::from_tensor(&f[&format!("{name}.x")]).unwrap();
        let attended = mha
            .forward(
                AttentionInput::own(x.as_tensor())
                    .with_mask(Some(&mask))
                    .with_weights(),
            )
            .unwrap();
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
        e.sink_logits().unwrap().unwrap().to_vec1::<f32>().unwrap()
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
    assert!(none.sink_logits().unwrap().is_none());
}
