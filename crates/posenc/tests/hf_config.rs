//! Eight real families' `config.json` (Llama 3.1, Qwen2.5, Qwen3, Gemma 2, Gemma 3, Phi-3.5
//! with LongRoPE, SmolLM3, gpt-oss), read by [`posenc::hf::HfPositions`]: each layer's kind
//! of attention, window and rotation as transformers' config classes derive them, and each
//! rotating layer's cos and sin equal to the family's own rotary class, from
//! `scripts/make_hf_config_fixtures.py`.

use std::collections::BTreeMap;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use posenc::hf::HfPositions;
use posenc::{Direction, EncodingConfig, Form, Target};
use serde_json::Value;

/// A layer's rope (its config) and window size, from the encoding `from_config` gave it.
fn parts(encoding: &Value) -> (Option<Value>, Option<u64>) {
    match encoding["kind"].as_str().unwrap() {
        "rope" => (Some(encoding.clone()), None),
        "none" => (None, None),
        "window" => (None, encoding["size"].as_u64()),
        "stack" => (encoding["of"].as_array().unwrap().iter().map(parts))
            .fold((None, None), |(r, w), (r2, w2)| (r.or(r2), w.or(w2))),
        // gpt-oss's sink and Llama 4's norm and temperature place no position.
        "sink" | "qk-norm" | "temperature" => (None, None),
        other => panic!("a layer got `{other}`: {encoding}"),
    }
}

/// The cos and sin rows `rows` of a table of `len` positions of `rope`, one head of `head_dim`.
fn rows_of(rope: &Value, head_dim: usize, len: usize, rows: &[usize]) -> [Vec<Vec<f32>>; 2] {
    let cfg: EncodingConfig = rope.to_string().parse().unwrap();
    let target = Target::new(head_dim, 1, Direction::Causal).unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let enc = cfg.build(&target, vb).unwrap();
    let Form::Rotary { cos, sin } = enc.table(len).unwrap().form else {
        panic!("rope shows a rotary table")
    };
    [cos, sin].map(|t| {
        let all = t.to_vec2::<f32>().unwrap();
        rows.iter().map(|&r| all[r].clone()).collect()
    })
}

#[test]
fn eight_families_configs_give_transformers_layers_and_tables() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/hf_configs.json")).unwrap();
    let families = fixture["families"].as_array().unwrap();
    assert_eq!(families.len(), 8);
    for family in families {
        let name = family["name"].as_str().unwrap();
        let got = HfPositions::from_config(&family["config"]).unwrap();
        let head_dim = family["head_dim"].as_u64().unwrap() as usize;
        assert_eq!(got.head_dim, head_dim, "{name}");
        let layers = family["layers"].as_array().unwrap();
        assert_eq!(got.layers.len(), layers.len(), "{name}");
        // Each kind of rotary layer's tables are checked once.
        let mut checked: BTreeMap<String, Value> = BTreeMap::new();
        for (layer, want) in got.layers.iter().zip(layers) {
            let i = want["layer"].as_u64().unwrap();
            let (rope, window) = parts(&layer.to_json());
            assert_eq!(
                window,
                want["window"].as_u64(),
                "{name}, layer {i}: {layer:?}"
            );
            assert_eq!(
                rope.is_some(),
                want["rotates"] == true,
                "{name}, layer {i}: {layer:?}"
            );
            let Some(rope) = rope else { continue };
            let kind = want["rotary"].as_str().unwrap().to_string();
            if let Some(seen) = checked.get(&kind) {
                assert_eq!(
                    seen, &rope,
                    "{name}: two `{kind}` layers rotate differently"
                );
                continue;
            }
            for table in family["tables"][&kind].as_array().unwrap() {
                let len = table["len"].as_u64().unwrap() as usize;
                let rows: Vec<usize> = serde_json::from_value(table["rows"].clone()).unwrap();
                let ours = rows_of(&rope, head_dim, len, &rows);
                for (o, key) in ours.iter().zip(["cos", "sin"]) {
                    let theirs: Vec<Vec<f64>> = serde_json::from_value(table[key].clone()).unwrap();
                    assert_eq!(o.len(), theirs.len());
                    for ((a, b), &row) in o.iter().zip(&theirs).zip(&rows) {
                        assert_eq!(a.len(), b.len(), "{name}: {key} width");
                        // transformers turns by angles held in f32 (`inv_freq.float() @
                        // position_ids.float()`), ours in f64: its error grows with the
                        // position, up to about ε·p. Rows 0, 1 and 7 check the frequencies
                        // to f32.
                        let tolerance = 2e-5 + 3e-7 * row as f64;
                        let worst = a.iter().zip(b).map(|(x, y)| (*x as f64 - y).abs());
                        let worst = worst.fold(0.0, f64::max);
                        assert!(
                            worst < tolerance,
                            "{name} `{kind}` {key} at {row} of {len}: {worst} from transformers"
                        );
                    }
                }
            }
            checked.insert(kind, rope);
        }
        assert!(!checked.is_empty(), "{name}: no layer rotates");
    }
}

#[test]
fn bad_configs_are_named() {
    let base =
        serde_json::json!({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8});
    let with = |key: &str, value: Value| {
        let mut c = base.clone();
        c[key] = value;
        HfPositions::from_config(&c).unwrap_err().to_string()
    };
    for (key, value, needle) in [
        (
            "layer_types",
            serde_json::json!(["full_attention"]),
            "names 1 layers",
        ),
        (
            "layer_types",
            serde_json::json!(["chunked", "full_attention"]),
            "chunked",
        ),
        (
            "layer_types",
            serde_json::json!(["sliding_attention", "full_attention"]),
            "sliding_window",
        ),
        (
            "no_rope_layers",
            serde_json::json!([1, 0, 1]),
            "names 3 layers",
        ),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "warp"}),
            "warp",
        ),
        (
            "rope_parameters",
            serde_json::json!({"rope_type": "yarn", "factor": 2, "mrope_section": [1, 0, 1]}),
            "multimodal RoPE with `yarn` scaling",
        ),
        (
            "num_attention_heads",
            serde_json::json!("two"),
            "num_attention_heads",
        ),
    ] {
        let message = with(key, value);
        assert!(message.contains(needle), "{key}: {message}");
    }
    let message = HfPositions::from_config(&serde_json::json!({"num_attention_heads": 2}))
        .unwrap_err()
        .to_string();
    assert!(message.contains("num_hidden_layers"), "{message}");
}

/// Multimodal configs give `mrope` layers: Qwen2-VL-7B's chunked sections (its legacy
/// `rope_scaling` of type `mrope`), Qwen3-VL-8B's interleaved ones (in its `text_config`),
/// each built at the config's head width; that `mrope` turns text as `rope` does is
/// `mrope.rs`'s test.
#[test]
fn multimodal_configs_give_mrope_layers() {
    let qwen2_vl = serde_json::json!({
        "model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "num_hidden_layers": 28, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "sliding_window": 32768, "use_sliding_window": false});
    let qwen3_vl = serde_json::json!({"model_type": "qwen3_vl", "text_config": {
        "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
        "num_key_value_heads": 8, "num_hidden_layers": 36, "max_position_embeddings": 262144,
        "rope_theta": 5000000, "rope_scaling": {"mrope_interleaved": true,
        "mrope_section": [24, 20, 20], "rope_type": "default"}}});
    for (config, layers, theta, section, interleaved) in [
        (qwen2_vl, 28, 1e6, [16, 24, 24], false),
        (qwen3_vl, 36, 5e6, [24, 20, 20], true),
    ] {
        let positions = HfPositions::from_config(&config).unwrap();
        assert_eq!(positions.layers.len(), layers);
        for layer in &positions.layers {
            let json = serde_json::to_value(layer).unwrap();
            assert_eq!(json["kind"], "mrope", "{json}");
            assert_eq!(json["rope_theta"].as_f64(), Some(theta), "{json}");
            assert_eq!(json["mrope_section"], serde_json::json!(section), "{json}");
            assert_eq!(json["mrope_interleaved"], interleaved, "{json}");
            let dev = candle_core::Device::Cpu;
            layer.build_untrained(positions.head_dim, 1, &dev).unwrap();
        }
    }
}
