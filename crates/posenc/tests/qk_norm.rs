//! `qk-norm` and `temperature` against what transformers' own attention layers hand their
//! attention (fixtures by `scripts/make_qk_norm_fixtures.py`, transformers 4.57.1):
//! Llama 4's layers read from its config by `posenc::hf::HfPositions` (rotation then a
//! weightless norm; the temperature where it does not rotate), and Qwen 3's learned norm
//! before its rotation, written as a stack.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use posenc::hf::HfPositions;
use posenc::{Direction, EncodingConfig, PositionalEncoding, RotateContext, Target};
use serde_json::Value;

/// Relative to the largest entry: f32 against f32, through a rotation and a norm.
const TOL: f32 = 2e-6;

fn fixtures() -> (HashMap<String, Tensor>, Value) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let tensors = candle_core::safetensors::load(format!("{dir}qk_norm.safetensors"), &Device::Cpu)
        .expect("fixtures: run scripts/make_qk_norm_fixtures.py");
    let meta = std::fs::read_to_string(format!("{dir}qk_norm.json")).unwrap();
    (tensors, serde_json::from_str(&meta).unwrap())
}

fn worst(a: &Tensor, b: &Tensor) -> f32 {
    let scale = b
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    diff.to_scalar::<f32>().unwrap() / scale.max(1e-30)
}

/// Queries and keys of every recorded run of `family`'s layer `layer`, turned by `enc`,
/// against what transformers' attention received; the largest relative error.
fn check(
    tensors: &HashMap<String, Tensor>,
    meta: &Value,
    family: &str,
    enc: &dyn PositionalEncoding,
    layer: u64,
) -> f32 {
    let mut largest = 0f32;
    let runs = meta["fixtures"].as_array().unwrap().iter();
    for run in runs.filter(|r| r["family"] == family && r["layer"] == layer) {
        let key = run["key"].as_str().unwrap();
        let offset = run["offset"].as_u64().unwrap() as usize;
        let got_q = enc.rotate(&tensors[&format!("{key}.q")], &RotateContext::query(offset));
        let got_k = enc.rotate(&tensors[&format!("{key}.k")], &RotateContext::key(offset));
        let e_q = worst(&got_q.unwrap(), &tensors[&format!("{key}.q_seen")]);
        let e_k = worst(&got_k.unwrap(), &tensors[&format!("{key}.k_seen")]);
        largest = largest.max(e_q).max(e_k);
    }
    largest
}

fn target(config: &Value) -> Target {
    let heads = config["num_attention_heads"].as_u64().unwrap() as usize;
    let d = heads * config["head_dim"].as_u64().unwrap() as usize;
    Target::new(d, heads, Direction::Causal).unwrap()
}

#[test]
fn llama4_layers_read_from_its_config_turn_as_transformers_attention() {
    let (tensors, meta) = fixtures();
    let config = &meta["configs"]["llama4"];
    let positions = HfPositions::from_config(config).unwrap();
    let kinds: Vec<Value> = positions.layers.iter().map(|l| l.to_json()).collect();
    // The rotating layers put the norm after the rotation (and their chunks); the fourth,
    // transformers' own no_rope_layers says, does not rotate and takes the temperature.
    let rotates = meta["rotates"]["llama4"].as_array().unwrap();
    for (layer, r) in kinds.iter().zip(rotates) {
        match r.as_u64().unwrap() {
            1 => {
                let of = layer["of"].as_array().unwrap();
                assert_eq!(of[0]["kind"], "rope", "{layer}");
                assert_eq!(of[of.len() - 1]["kind"], "qk-norm", "{layer}");
            }
            _ => assert_eq!(layer["kind"], "temperature", "{layer}"),
        }
    }
    let target = target(config);
    for layer in [0u64, 3] {
        let enc = positions.layers[layer as usize]
            .build_untrained(target.d_model, target.heads, &Device::Cpu)
            .unwrap();
        let err = check(&tensors, &meta, "llama4", &*enc, layer);
        assert!(err < TOL, "layer {layer}: {err} from transformers");
    }
    // The temperature moves in these runs: at offset 100 the factor is 1 + 0.1 ln 26.
    let nope = &tensors["llama4.3.100.q_seen"];
    let bare = &tensors["llama4.3.100.q"];
    assert!(
        worst(bare, nope) > 0.2,
        "the fixture's temperature does not move"
    );
}

#[test]
fn qwen3_learned_norm_before_rotation_is_transformers() {
    let (tensors, meta) = fixtures();
    let config = &meta["configs"]["qwen3"];
    // Qwen 3's q_norm and k_norm as the stack's entry `at`.
    let build = |json: &str, at: usize| {
        let weights: HashMap<String, Tensor> = [
            (format!("{at}.0.query"), tensors["qwen3.0.q_norm"].clone()),
            (format!("{at}.0.key"), tensors["qwen3.0.k_norm"].clone()),
        ]
        .into();
        let vb = VarBuilder::from_tensors(weights, DType::F32, &Device::Cpu);
        let cfg: EncodingConfig = json.parse().unwrap();
        cfg.build(&target(config), vb).unwrap()
    };
    let norm = r#"{"kind": "qk-norm", "learned": true, "eps": 0.25}"#;
    let rope = r#"{"kind": "rope", "base": 1000000.0}"#;
    let enc = build(
        &format!(r#"{{"kind": "stack", "of": [{norm}, {rope}]}}"#),
        0,
    );
    let err = check(&tensors, &meta, "qwen3", &*enc, 0);
    assert!(err < TOL, "{err} from transformers");
    // The order is the model's: the norm after the rotation is another function.
    let enc = build(
        &format!(r#"{{"kind": "stack", "of": [{rope}, {norm}]}}"#),
        1,
    );
    assert!(check(&tensors, &meta, "qwen3", &*enc, 0) > 1e-3);
}

#[test]
fn the_norms_are_their_formulas() {
    let x = Tensor::new(&[[3f32, 4.0], [0.0, 0.0]], &Device::Cpu).unwrap();
    let x = x.reshape((1, 1, 2, 2)).unwrap();
    let norm = |json: &str| {
        let cfg: EncodingConfig = json.parse().unwrap();
        let enc = cfg.build_untrained(2, 1, &Device::Cpu).unwrap();
        let y = enc.rotate(&x, &RotateContext::query(0)).unwrap();
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    // ‖(3, 4)‖ = 5, its root mean square √12.5; a zero vector stays zero.
    let l2 = norm(r#"{"kind": "qk-norm", "norm": "l2", "eps": 0}"#);
    assert!(
        (l2[0] - 0.6).abs() < 1e-7 && (l2[1] - 0.8).abs() < 1e-7,
        "{l2:?}"
    );
    let rms = norm(r#"{"kind": "qk-norm", "eps": 0.5}"#);
    let r = (12.5f32 + 0.5).sqrt();
    assert!((rms[0] - 3.0 / r).abs() < 1e-6, "{rms:?}");
    assert_eq!(&rms[2..], &[0.0, 0.0]);
}

#[test]
fn bad_settings_are_refused_by_name() {
    for (json, needle) in [
        (r#"{"kind": "temperature", "floor": 0}"#, "floor"),
        (r#"{"kind": "temperature", "scale": -1}"#, "scale"),
        (r#"{"kind": "qk-norm", "eps": -1}"#, "ε"),
        (r#"{"kind": "qk-norm", "norm": "l1"}"#, "l1"),
    ] {
        let err = json
            .parse::<EncodingConfig>()
            .and_then(|c| c.build_untrained(8, 2, &Device::Cpu))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{json}: {err}");
    }
}
