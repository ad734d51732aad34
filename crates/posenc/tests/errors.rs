//! Bad input gets an error that names its cause, never a panic.

use candle_core::{DType, Device, Tensor};
use posenc::{EmbedContext, RotateContext};
use posenc::{EncodingConfig, Error};

fn build_err(cfg: &str, d_model: usize, heads: usize) -> Error {
    let cfg: EncodingConfig = cfg.parse().unwrap();
    cfg.build_untrained(d_model, heads, &Device::Cpu)
        .unwrap_err()
}

fn message(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[test]
fn odd_d_model_is_named() {
    for kind in ["sinusoidal", "sinusoidal-concat"] {
        let m = message(build_err(kind, 7, 1));
        assert!(
            m.contains("even") && m.contains('7') && m.contains("d_model") && m.contains(kind),
            "{m}"
        );
    }
    let m = message(build_err("rope", 12, 4)); // head_dim 3
    assert!(
        m.contains("even") && m.contains("head_dim") && m.contains('3'),
        "{m}"
    );
    let m = message(build_err(
        r#"{"kind": "rope", "rotary_fraction": 0.25}"#,
        12,
        2,
    )); // 6·0.25 → 1
    assert!(
        m.contains("rotary_fraction") || m.contains("rotated part"),
        "{m}"
    );
}

#[test]
fn zero_heads_is_named() {
    for kind in EncodingConfig::kinds() {
        let m = message(build_err(kind, 8, 0));
        assert!(m.contains("heads") && m.contains('0'), "{kind}: {m}");
    }
}

#[test]
fn heads_must_divide_d_model_for_rope() {
    let m = message(build_err("rope", 10, 4));
    assert!(
        m.contains("10") && m.contains("divisible") && m.contains('4'),
        "{m}"
    );
}

#[test]
fn learned_position_past_max_is_named() {
    let enc = EncodingConfig::new(posenc::learned::LearnedConfig { max_positions: 8 })
        .build_untrained(4, 1, &Device::Cpu)
        .unwrap();
    let x = Tensor::zeros((1, 3, 4), DType::F32, &Device::Cpu).unwrap();
    assert!(enc.embed(&x, &EmbedContext::at(5)).is_ok()); // positions 5, 6, 7
    let e = enc.embed(&x, &EmbedContext::at(6)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PositionOutOfRange {
                kind: "learned",
                position: 8,
                max_positions: 8
            }
        ),
        "{e:?}"
    );
    assert!(message(&e).contains("max_positions = 8"), "{e}");
    assert!(enc.table(9).is_err());
}

#[test]
fn unknown_kind_and_fields_are_named() {
    let m = message("warp-drive".parse::<EncodingConfig>().unwrap_err());
    assert!(m.contains("warp-drive") && m.contains("sinusoidal"), "{m}");
    assert!(!m.contains("did you mean"), "{m}");
    // A typo is answered with the kind it is nearest to.
    for (typo, meant) in [
        ("ropee", "rope"),
        ("Alibi", "alibi"),
        ("sinusodial", "sinusoidal"),
    ] {
        let m = message(typo.parse::<EncodingConfig>().unwrap_err());
        assert!(
            m.contains(&format!("did you mean `{meant}`?")),
            "{typo}: {m}"
        );
    }
    let m = message(r#"{"kind": "rope", "bse": 10}"#.parse::<EncodingConfig>().unwrap_err());
    assert!(m.contains("bse"), "{m}");
    let m = message(r#"{"kind": "rope""#.parse::<EncodingConfig>().unwrap_err());
    assert!(m.contains("invalid encoding config"), "{m}");
    let m = message(r#"{"base": 3}"#.parse::<EncodingConfig>().unwrap_err());
    assert!(m.contains("kind"), "{m}");
}

#[test]
fn bad_values_are_named() {
    let m = message(build_err(r#"{"kind": "sinusoidal", "base": 0.5}"#, 8, 1));
    assert!(m.contains("base") && m.contains("0.5"), "{m}");
    let m = message(build_err(
        r#"{"kind": "learned", "max_positions": 0}"#,
        8,
        1,
    ));
    assert!(m.contains("max_positions"), "{m}");
    let m = message(build_err(r#"{"kind": "t5", "num_buckets": 2}"#, 8, 1));
    assert!(m.contains("num_buckets"), "{m}");
    let m = message(build_err(
        r#"{"kind": "sine-single", "frequency": -1}"#,
        8,
        1,
    ));
    assert!(m.contains("frequency"), "{m}");
}

#[test]
fn wrong_shapes_are_named() {
    let dev = Device::Cpu;
    let sin = EncodingConfig::from_kind("sinusoidal")
        .unwrap()
        .build_untrained(8, 2, &dev)
        .unwrap();
    let e = sin
        .embed(
            &Tensor::zeros((1, 3, 6), DType::F32, &dev).unwrap(),
            &EmbedContext::at(0),
        )
        .unwrap_err();
    assert!(
        message(&e).contains("(batch, seq, 8)") && message(&e).contains("[1, 3, 6]"),
        "{e}"
    );
    let e = sin
        .embed(
            &Tensor::zeros((3, 8), DType::F32, &dev).unwrap(),
            &EmbedContext::at(0),
        )
        .unwrap_err();
    assert!(message(&e).contains("[3, 8]"), "{e}");
    let rope = EncodingConfig::from_kind("rope")
        .unwrap()
        .build_untrained(8, 2, &dev)
        .unwrap();
    let e = rope
        .rotate(
            &Tensor::zeros((1, 2, 3, 8), DType::F32, &dev).unwrap(),
            &RotateContext::query(0),
        )
        .unwrap_err();
    assert!(message(&e).contains("(batch, heads, seq, 4)"), "{e}");
}

#[test]
fn a_bad_layer_pattern_is_named() {
    let parse_err = |cfg: &str| cfg.parse::<EncodingConfig>().unwrap_err().to_string();
    let m = parse_err(r#"{"kind": "layers", "pattern": ["rope", "warp-drive"]}"#);
    assert!(m.contains("warp-drive") && m.contains("layers"), "{m}");
    let m = message(build_err(r#"{"kind": "layers", "pattern": []}"#, 8, 2));
    assert!(m.contains("layers") && m.contains("at least one"), "{m}");
    let nested = r#"{"kind": "layers", "pattern": [{"kind": "layers"}]}"#;
    let m = message(build_err(nested, 8, 2));
    assert!(m.contains("not another `layers`"), "{m}");
    // Entries are checked when built: an odd rotary head is named through the pattern.
    let m = message(build_err(
        r#"{"kind": "layers", "pattern": ["none", "rope"]}"#,
        12,
        4,
    ));
    assert!(m.contains("head_dim") && m.contains('3'), "{m}");
}
