//! Each preset, expanded layer by layer, against what transformers' own config classes and
//! attention code do with the same fields (`scripts/make_preset_fixtures.py`): the window
//! or chunk, whether the layer rotates, how it pairs dimensions, its frequencies and
//! attention factor, Llama 4's norm and temperature, gpt-oss's sinks. Then the chunked
//! window against transformers' chunked causal mask.

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use posenc::presets::{Preset, PRESETS};
use posenc::{Direction, EncodingConfig, Form, Target};
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/presets.json");
    let text = std::fs::read_to_string(path).expect("run scripts/make_preset_fixtures.py");
    serde_json::from_str(&text).unwrap()
}

/// The entries of a layer's encoding, by kind.
fn entries(layer: &Value) -> Vec<Value> {
    match layer["kind"].as_str().unwrap() {
        "stack" => layer["of"].as_array().unwrap().clone(),
        _ => vec![layer.clone()],
    }
}

fn entry<'a>(of: &'a [Value], kind: &str) -> Option<&'a Value> {
    of.iter().find(|e| e["kind"] == kind)
}

/// Row 1 of a rope's table, one head of `head_dim`: the angles (the inverse frequencies)
/// and the length of each (cos, sin) pair (the attention factor).
fn frequencies(rope: &Value, head_dim: usize) -> (Vec<f64>, Vec<f64>) {
    let cfg: EncodingConfig = rope.to_string().parse().unwrap();
    let target = Target::new(head_dim, 1, Direction::Causal).unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let enc = cfg.build(&target, vb).unwrap();
    let Form::Rotary { cos, sin } = enc.table(2).unwrap().form else {
        panic!("rope shows a rotary table")
    };
    let (cos, sin) = (cos.to_vec2::<f32>().unwrap(), sin.to_vec2::<f32>().unwrap());
    let pairs = cos[1]
        .iter()
        .zip(&sin[1])
        .map(|(&c, &s)| (c as f64, s as f64));
    pairs.map(|(c, s)| (s.atan2(c), s.hypot(c))).unzip()
}

#[test]
fn every_preset_is_its_familys_layers_in_transformers() {
    let fixture = fixture();
    let families = fixture["presets"].as_array().unwrap();
    assert_eq!(families.len(), PRESETS.len(), "one fixture per preset");
    for family in families {
        let name = family["preset"].as_str().unwrap();
        let preset = Preset::named(name).unwrap();
        assert_eq!(
            preset.config_json(),
            family["config"],
            "{name}: the script's fields"
        );
        let encoding = EncodingConfig::from_kind(name).unwrap().to_json();
        let pattern = match encoding["kind"].as_str().unwrap() {
            "layers" => encoding["pattern"].as_array().unwrap().clone(),
            _ => vec![encoding.clone()],
        };
        let head_dim = family["head_dim"].as_u64().unwrap() as usize;
        for (i, want) in family["layers"].as_array().unwrap().iter().enumerate() {
            let of = entries(&pattern[i % pattern.len()]);
            let at = format!("{name} layer {i}");
            // A sliding window, or Llama 4's chunks: a window of the chunk's size, chunked.
            let window = entry(&of, "window");
            let size = |chunked: bool| {
                window
                    .filter(|w| w["chunked"] == chunked)
                    .map_or(Value::Null, |w| w["size"].clone())
            };
            assert_eq!(size(false), want["window"], "{at}: the sliding window");
            assert_eq!(size(true), want["chunk"], "{at}: the chunk");
            let rope = entry(&of, "rope");
            assert_eq!(rope.is_some(), want["rotates"].as_bool().unwrap(), "{at}");
            if let Some(rope) = rope {
                assert_eq!(rope["layout"], want["layout"], "{at}");
                let table = &family["rotaries"][want["rotary"].as_str().unwrap()];
                let (angles, lengths) = frequencies(rope, head_dim);
                let inv_freq = table["inv_freq"].as_array().unwrap();
                assert_eq!(angles.len(), inv_freq.len(), "{at}");
                for (j, (a, f)) in angles.iter().zip(inv_freq).enumerate() {
                    let f = f.as_f64().unwrap();
                    assert!(
                        (a - f).abs() <= 2e-6 * f.max(1e-3),
                        "{at}: θ_{j} {a} against {f}"
                    );
                }
                let factor = table["attention_factor"].as_f64().unwrap();
                assert!(
                    lengths.iter().all(|l| (l - factor).abs() < 1e-5),
                    "{at}: {lengths:?} against {factor}"
                );
            }
            let norm = entry(&of, "qk-norm").map(|n| n["eps"].clone());
            assert_eq!(norm.unwrap_or(Value::Null), want["qk_norm"]["eps"], "{at}");
            let temperature = entry(&of, "temperature");
            assert_eq!(
                temperature.is_some(),
                !want["temperature"].is_null(),
                "{at}"
            );
            if let Some(t) = temperature {
                assert_eq!(t["scale"], want["temperature"]["scale"], "{at}");
                assert_eq!(t["floor"], want["temperature"]["floor"], "{at}");
            }
            assert_eq!(
                entry(&of, "sink").is_some(),
                want["sink"].as_bool().unwrap(),
                "{at}"
            );
        }
    }
}

#[test]
fn a_preset_takes_no_settings_and_builds_as_any_kind() {
    let err =
        r#"{"kind": "llama4", "base": 10}"#.parse::<EncodingConfig>().unwrap_err().to_string();
    assert!(
        err.contains("`llama4` is a preset") && err.contains("`base`"),
        "{err}"
    );
    let unknown = EncodingConfig::from_kind("llama5").unwrap_err().to_string();
    assert!(unknown.contains("presets: llama4, gpt-oss"), "{unknown}");
    for name in EncodingConfig::presets() {
        let cfg = EncodingConfig::from_kind(name).unwrap();
        let target = Target::new(64, 4, Direction::Causal)
            .unwrap()
            .with_layers(8);
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        cfg.build(&target, vb)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// A chunked window, under the causal mask, lets each query see the keys transformers'
/// `chunked_causal_mask_function` does: those of its own chunk up to it.
#[test]
fn a_chunked_window_sees_what_transformers_chunked_mask_does() {
    let fixture = fixture();
    let mask = &fixture["chunked_mask"];
    let (chunk, n) = (
        mask["chunk"].as_u64().unwrap(),
        mask["len"].as_u64().unwrap(),
    );
    let settings = format!(r#"{{"kind": "window", "size": {chunk}, "chunked": true}}"#);
    let cfg: EncodingConfig = settings.parse().unwrap();
    let target = Target::new(8, 1, Direction::Causal).unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let enc = cfg.build(&target, vb).unwrap();
    let cx = posenc::BiasContext::square(n as usize, 0);
    let bias = enc.bias(&cx).unwrap().expect("a window's bias");
    let bias = bias.squeeze(0).unwrap().to_vec2::<f32>().unwrap();
    for (q, row) in mask["keep"].as_array().unwrap().iter().enumerate() {
        for (k, want) in row.as_array().unwrap().iter().enumerate() {
            let seen = k <= q && bias[q][k] == 0.0;
            assert_eq!(seen, want.as_bool().unwrap(), "query {q}, key {k}");
        }
    }
}
