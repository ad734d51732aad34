//! RoPE scaling against Hugging Face transformers: the cos and sin tables (attention factor
//! included) of every `rope_type`, from `scripts/make_rope_scaling_fixtures.py`, which runs
//! transformers' own `ROPE_INIT_FUNCTIONS` and `LlamaRotaryEmbedding`. And the settings a
//! type needs, refused by name when missing or out of their domain.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::RotateContext;
use posenc::{Direction, EncodingConfig, Form, Positions, Target};
use serde_json::Value;

/// Every case: transformers 4's types (`make_rope_scaling_fixtures.py`), then the
/// proportional ones of transformers 5 (`make_proportional_rope_fixtures.py`).
fn fixture() -> Vec<Value> {
    [
        include_str!("fixtures/rope_scaling.json"),
        include_str!("fixtures/rope_proportional.json"),
    ]
    .iter()
    .flat_map(|text| {
        let json: Value = serde_json::from_str(text).unwrap();
        json["cases"].as_array().unwrap().clone()
    })
    .collect()
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    serde_json::from_value(v.clone()).expect("a matrix of numbers")
}

/// The encoding of `cfg` for one head of `head_dim`, in a model trained on `context`.
fn build(
    cfg: &EncodingConfig,
    head_dim: usize,
    context: Option<usize>,
) -> posenc::Result<std::sync::Arc<dyn posenc::PositionalEncoding>> {
    let target = Target::new(head_dim, 1, Direction::Causal)?;
    let target = match context {
        Some(c) => target.with_context(c),
        None => target,
    };
    let varmap = VarMap::new();
    cfg.build(
        &target,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
}

#[test]
fn every_rope_type_gives_transformers_tables() {
    let cases = fixture();
    assert!(cases.len() >= 16);
    assert!(cases.iter().any(|c| c["name"] == "proportional-scaled"));
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let cfg: EncodingConfig = case["encoding"].to_string().parse().unwrap();
        let head_dim = case["head_dim"].as_u64().unwrap() as usize;
        let len = case["len"].as_u64().unwrap() as usize;
        let enc = build(&cfg, head_dim, None).unwrap();
        let Form::Rotary { cos, sin } = enc.table(len).unwrap().form else {
            panic!("{name}: rope shows a rotary table")
        };
        let ours = [cos.to_vec2::<f32>().unwrap(), sin.to_vec2::<f32>().unwrap()];
        let theirs = [matrix(&case["cos"]), matrix(&case["sin"])];
        let mut worst = 0f64;
        for (o, t) in ours.iter().zip(&theirs) {
            assert_eq!((o.len(), o[0].len()), (t.len(), t[0].len()), "{name}");
            for (a, b) in o.iter().flatten().zip(t.iter().flatten()) {
                worst = worst.max((*a as f64 - b).abs());
            }
        }
        assert!(
            worst < 1e-5,
            "{name}: tables differ from transformers by {worst}"
        );
        // Position 0: cos is the attention factor itself.
        let factor = case["attention_factor"].as_f64().unwrap();
        let at0 = ours[0][0][0] as f64;
        assert!(
            (at0 - factor).abs() < 1e-6,
            "{name}: attention factor {at0} against {factor}"
        );
    }
}

/// Dynamic NTK takes its frequencies from the length a sequence reaches: a chunk of
/// positions read after a cache (48 .. 64) is rotated as the last rows of the whole
/// sequence's table, not as a sequence of its own length.
#[test]
fn dynamic_scaling_rotates_a_chunk_as_the_rows_of_its_whole_sequence() {
    let case = fixture()
        .into_iter()
        .find(|c| c["name"] == "dynamic-past")
        .unwrap();
    let cfg: EncodingConfig = case["encoding"].to_string().parse().unwrap();
    let enc = build(&cfg, 32, None).unwrap();
    // Pairs (i, i + 16) set to (1, 0): rotated, they read (cos, sin).
    let ones = Tensor::ones((1, 1, 16, 16), DType::F32, &Device::Cpu).unwrap();
    let x = Tensor::cat(&[&ones, &ones.zeros_like().unwrap()], 3).unwrap();
    let rotated = enc
        .rotate(&x, &RotateContext::query(Positions::From(48)))
        .unwrap()
        .squeeze(0)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let rows: Vec<Vec<f32>> = rotated.to_vec2().unwrap();
    let (cos, sin) = (matrix(&case["cos"]), matrix(&case["sin"]));
    let mut worst = 0f64;
    for (r, row) in rows.iter().enumerate() {
        for i in 0..16 {
            worst = worst.max((row[i] as f64 - cos[48 + r][i]).abs());
            worst = worst.max((row[16 + i] as f64 - sin[48 + r][i]).abs());
        }
    }
    assert!(
        worst < 1e-5,
        "the chunk differs from the whole sequence's rows by {worst}"
    );
}

#[test]
fn missing_and_absurd_settings_are_named() {
    for (json, named) in [
        (r#"{"rope_type": "linear"}"#, "needs a factor"),
        (r#"{"rope_type": "linear", "factor": -2}"#, "factor in (0, "),
        // The value as written, not its 309 digits.
        (
            r#"{"rope_type": "yarn", "factor": 1e308}"#,
            "in (0, 1048576], got 1e308",
        ),
        (
            r#"{"rope_type": "yarn", "factor": 4, "beta_fast": 0}"#,
            "beta_fast > 0",
        ),
        (r#"{"rope_type": "llama3", "factor": 8}"#, "low_freq_factor"),
        (
            r#"{"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1}"#,
            "high_freq_factor ≥ low_freq_factor",
        ),
        (r#"{"rope_type": "longrope", "factor": 4}"#, "short_factor"),
        (
            r#"{"rope_type": "longrope", "factor": 4, "short_factor": [1], "long_factor": [1]}"#,
            "one per rotated pair",
        ),
        (
            r#"{"rope_type": "proportional", "partial_rotary_factor": 1.5}"#,
            "partial_rotary_factor in [0, 1], got 1.5",
        ),
        (
            r#"{"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 0}"#,
            "factor in (0, ",
        ),
    ] {
        let cfg: EncodingConfig = format!(r#"{{"kind": "rope", "scaling": {json}}}"#)
            .parse()
            .unwrap();
        let e = build(&cfg, 8, Some(16)).unwrap_err().to_string();
        assert!(e.contains(named), "{json}: {e}");
    }
    // Without the model's context, a scaling must name its own.
    let cfg: EncodingConfig = r#"{"kind": "rope", "scaling": {"rope_type": "yarn", "factor": 2}}"#
        .parse()
        .unwrap();
    let e = build(&cfg, 8, None).unwrap_err().to_string();
    assert!(e.contains("original_max_position_embeddings"), "{e}");
    // Keys are spelt as transformers spells them; another is an error.
    let e = r#"{"kind": "rope", "scaling": {"rope_type": "yarn", "scale": 2}}"#
        .parse::<EncodingConfig>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("scale"), "{e}");
    let e = r#"{"kind": "rope", "scaling": {"rope_type": "ntk"}}"#
        .parse::<EncodingConfig>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("ntk"), "{e}");
}

/// `p-rope` is `rope` with transformers' proportional scaling: its tables are the
/// fixture's, and only the fastest ⌊p · d/2⌋ pairs turn (the rest: cos 1, sin 0 at every
/// position). An absurd p is refused by name.
#[test]
fn p_rope_is_the_proportional_tables() {
    for case in fixture()
        .iter()
        .filter(|c| c["encoding"]["scaling"]["rope_type"] == "proportional")
    {
        let scaling = &case["encoding"]["scaling"];
        if scaling.get("factor").is_some() {
            continue;
        }
        let p = scaling["partial_rotary_factor"].as_f64().unwrap();
        let cfg: EncodingConfig = serde_json::json!({"kind": "p-rope", "p": p})
            .to_string()
            .parse()
            .unwrap();
        let enc = build(&cfg, case["head_dim"].as_u64().unwrap() as usize, None).unwrap();
        assert_eq!(enc.kind(), "p-rope");
        let len = case["len"].as_u64().unwrap() as usize;
        let Form::Rotary { cos, sin } = enc.table(len).unwrap().form else {
            panic!("p-rope shows a rotary table")
        };
        let (cos, sin) = (cos.to_vec2::<f32>().unwrap(), sin.to_vec2::<f32>().unwrap());
        for (ours, theirs) in [(&cos, &case["cos"]), (&sin, &case["sin"])] {
            for (a, b) in ours.iter().flatten().zip(matrix(theirs).iter().flatten()) {
                assert!((*a as f64 - b).abs() < 1e-5, "p = {p}: {a} against {b}");
            }
        }
        let head_dim = case["head_dim"].as_u64().unwrap() as f64;
        let turning = (p * head_dim / 2.0).floor() as usize;
        for (c, s) in cos.iter().zip(&sin) {
            assert!(c[turning..].iter().all(|&v| v == 1.0), "p = {p}");
            assert!(s[turning..].iter().all(|&v| v == 0.0), "p = {p}");
        }
    }
    for bad in ["1.5", "-0.1"] {
        let cfg: EncodingConfig = format!(r#"{{"kind": "p-rope", "p": {bad}}}"#)
            .parse()
            .unwrap();
        let err = build(&cfg, 32, None).unwrap_err().to_string();
        assert!(
            err.contains("p-rope") && err.contains("0 ≤ p ≤ 1"),
            "{bad}: {err}"
        );
    }
}

/// `hope` against its formula in f64 (`scripts/make_hope_fixtures.py`): the cos and sin of
/// the pairs that turn a full circle within `L` and 0 for the rest, and one head rotated
/// with them; a model's trained context stands for `L` where the settings give none.
#[test]
fn hope_gives_the_formulas_tables_and_rotations() {
    let json: Value = serde_json::from_str(include_str!("fixtures/hope.json")).unwrap();
    let cases = json["cases"].as_array().unwrap();
    assert!(cases.iter().any(|c| c["turning_pairs"] == 0));
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let head_dim = case["head_dim"].as_u64().unwrap() as usize;
        let len = case["len"].as_u64().unwrap() as usize;
        let explicit: EncodingConfig = case["encoding"].to_string().parse().unwrap();
        let mut from_model = case["encoding"].clone();
        let context = from_model["context"].as_u64().unwrap() as usize;
        from_model.as_object_mut().unwrap().remove("context");
        let from_model: EncodingConfig = from_model.to_string().parse().unwrap();
        for (how, enc) in [
            (
                "context set",
                build(&explicit, head_dim, Some(context + 1000)).unwrap(),
            ),
            (
                "the model's context",
                build(&from_model, head_dim, Some(context)).unwrap(),
            ),
        ] {
            let Form::Rotary { cos, sin } = enc.table(len).unwrap().form else {
                panic!("{name}: hope shows a rotary table")
            };
            let close = |ours: &Tensor, theirs: &Value, what: &str| {
                let ours: Vec<f32> = ours.flatten_all().unwrap().to_vec1().unwrap();
                let theirs: Vec<f64> = matrix(theirs).into_iter().flatten().collect();
                assert_eq!(ours.len(), theirs.len(), "{name}, {how}: {what}");
                let worst = ours
                    .iter()
                    .zip(&theirs)
                    .map(|(a, b)| (f64::from(*a) - b).abs())
                    .fold(0.0, f64::max);
                assert!(worst < 2e-6, "{name}, {how}: {what} off by {worst:e}");
            };
            close(&cos, &case["cos"], "cos");
            close(&sin, &case["sin"], "sin");
            let x: Vec<f32> = matrix(&case["x"])
                .into_iter()
                .flatten()
                .map(|v| v as f32)
                .collect();
            let x = Tensor::from_vec(x, (1, 1, len, head_dim), &Device::Cpu).unwrap();
            let rotated = enc.rotate(&x, &RotateContext::query(0)).unwrap();
            close(&rotated, &case["rotated"], "rotated");
        }
    }
}
