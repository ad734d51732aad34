//! Scalable-Softmax against its formula in f64 (no reference implementation ships), and
//! `stack` against its entries applied one by one.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::{BiasContext, EmbedContext, RotateContext, ScoreContext};
use posenc::{Direction, EncodingConfig, PositionalEncoding, Positions, Target};
use posenc_testkit::max_abs_diff;

fn build(json: &str, heads: usize, context: usize) -> std::sync::Arc<dyn PositionalEncoding> {
    let target = Target::new(8 * heads, heads, Direction::Causal)
        .unwrap()
        .with_context(context);
    build_for(json, &target)
}

/// `json`'s encoding for `target`, with fresh weights.
fn build_for(json: &str, target: &Target) -> std::sync::Arc<dyn PositionalEncoding> {
    let cfg: EncodingConfig = json.parse().unwrap();
    let varmap = VarMap::new();
    cfg.build(
        target,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap()
}

/// Causal logits `(1, heads, len, len)` of small distinct values, later keys masked with the
/// most negative f32 as attention masks them.
fn causal_logits(heads: usize, len: usize) -> (Vec<f64>, Tensor) {
    let mut values = Vec::new();
    for h in 0..heads {
        for i in 0..len {
            for j in 0..len {
                values.push(match j <= i {
                    true => ((h * 31 + i * 7 + j * 3) % 11) as f64 / 5.0 - 1.0,
                    false => f64::from(f32::MIN),
                });
            }
        }
    }
    let t = Tensor::from_vec(
        values.iter().map(|&v| v as f32).collect::<Vec<f32>>(),
        (1, heads, len, len),
        &Device::Cpu,
    )
    .unwrap();
    (values, t)
}

fn softmax(row: &[f64]) -> Vec<f64> {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

#[test]
fn ssmax_scales_each_querys_logits_by_s_ln_n() {
    let (heads, len, s) = (2, 6, 0.43);
    let enc = build(&format!(r#"{{"kind": "ssmax", "s": {s}}}"#), heads, 64);
    assert!(enc.capabilities().reads_scores);
    let (z, logits) = causal_logits(heads, len);
    let q = Tensor::zeros((1, heads, len, 8), DType::F32, &Device::Cpu).unwrap();
    let bias = enc
        .score_bias(&ScoreContext {
            q: &q,
            logits: &logits,
        })
        .unwrap()
        .unwrap();
    let scaled: Vec<f32> = (&logits + &bias)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    for h in 0..heads {
        for i in 0..len {
            let n = (i + 1) as f64;
            let row = |v: &[f64]| v[(h * len + i) * len..(h * len + i) * len + i + 1].to_vec();
            // SSMax of the seen keys, in f64: e^(s ln n · z_j) / Σ_k e^(s ln n · z_k).
            let want = softmax(&row(&z).iter().map(|z| s * n.ln() * z).collect::<Vec<_>>());
            let ours: Vec<f64> = row(&scaled.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
            let got = softmax(&ours);
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-6,
                    "head {h} query {i}: {got:?} against {want:?}"
                );
            }
            // Masked keys stay masked.
            for j in i + 1..len {
                assert_eq!(scaled[(h * len + i) * len + j], f32::MIN);
            }
        }
    }
    // Unset, s starts at 1 / ln L: at n = L the logits are unchanged.
    let enc = build(r#"{"kind": "ssmax"}"#, 1, 6);
    let (_, logits) = causal_logits(1, 6);
    let bias = enc
        .score_bias(&ScoreContext {
            q: &q.narrow(1, 0, 1).unwrap(),
            logits: &logits,
        })
        .unwrap()
        .unwrap();
    let last: Vec<f32> = bias
        .squeeze(0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .get(5)
        .unwrap()
        .to_vec1()
        .unwrap();
    assert!(last.iter().all(|v| v.abs() < 1e-6), "{last:?}");
}

#[test]
fn a_stack_applies_each_entry_in_turn() {
    let (heads, len) = (2, 5);
    let stack = build(
        r#"{"kind": "stack", "of": ["sinusoidal", "rope", "alibi", "alibi"]}"#,
        heads,
        64,
    );
    let x = Tensor::randn(0f32, 1.0, (1, len, 8 * heads), &Device::Cpu).unwrap();
    let added = stack
        .embed(&x, &EmbedContext::at(Positions::From(3)))
        .unwrap();
    let sinusoidal = build(r#"{"kind": "sinusoidal"}"#, heads, 64);
    let want = sinusoidal
        .embed(&x, &EmbedContext::at(Positions::From(3)))
        .unwrap();
    let diff = |a: &Tensor, b: &Tensor| max_abs_diff(a, b);
    assert!(diff(&added, &want) < 1e-6);
    let qk = Tensor::randn(0f32, 1.0, (1, heads, len, 8), &Device::Cpu).unwrap();
    let rope = build(r#"{"kind": "rope"}"#, heads, 64);
    assert!(
        diff(
            &stack
                .rotate(&qk, &RotateContext::query(Positions::From(2)))
                .unwrap(),
            &rope
                .rotate(&qk, &RotateContext::query(Positions::From(2)))
                .unwrap()
        ) < 1e-6
    );
    let alibi = build(r#"{"kind": "alibi"}"#, heads, 64);
    let one = alibi
        .bias(&BiasContext::new(
            len,
            len,
            Positions::From(0),
            Positions::From(0),
        ))
        .unwrap()
        .unwrap();
    let both = stack
        .bias(&BiasContext::new(
            len,
            len,
            Positions::From(0),
            Positions::From(0),
        ))
        .unwrap()
        .unwrap();
    assert!(
        diff(&both, &(&one * 2.0).unwrap()) < 1e-5,
        "two ALiBis add up"
    );
    assert!(!stack.capabilities().reads_scores);
    // RoPE with SSMax: the rotation of the one, the score bias of the other.
    let with_ssmax = build(
        r#"{"kind": "stack", "of": ["rope", {"kind": "ssmax", "s": 0.5}]}"#,
        heads,
        64,
    );
    let ssmax = build(r#"{"kind": "ssmax", "s": 0.5}"#, heads, 64);
    assert!(with_ssmax.capabilities().reads_scores);
    let (_, logits) = causal_logits(heads, len);
    let a = with_ssmax
        .score_bias(&ScoreContext {
            q: &qk,
            logits: &logits,
        })
        .unwrap()
        .unwrap();
    let b = ssmax
        .score_bias(&ScoreContext {
            q: &qk,
            logits: &logits,
        })
        .unwrap()
        .unwrap();
    assert!(diff(&a, &b) < 1e-6);
}

#[test]
fn a_stack_of_what_cannot_stack_is_refused_by_name() {
    for (json, says) in [
        (r#"{"kind": "stack", "of": []}"#, "at least one"),
        (
            r#"{"kind": "stack", "of": ["rope", {"kind": "stack"}]}"#,
            "another `stack`",
        ),
        (r#"{"kind": "stack", "of": ["layers"]}"#, "per-layer"),
        (r#"{"kind": "ssmax", "s": 1e400}"#, "out of range"),
    ] {
        let cfg: Result<EncodingConfig, _> = json.parse();
        let message = match cfg {
            Err(e) => e.to_string(),
            Ok(cfg) => cfg
                .build_untrained(16, 2, &Device::Cpu)
                .unwrap_err()
                .to_string(),
        };
        assert!(message.contains(says), "{json}: {message}");
    }
}

#[test]
fn a_window_masks_the_keys_past_it() {
    let bias = |direction: Direction, size: usize, q: usize, k: usize| {
        let target = Target::new(16, 2, direction).unwrap();
        let enc = build_for(&format!(r#"{{"kind": "window", "size": {size}}}"#), &target);
        let b = enc
            .bias(&BiasContext::new(
                1,
                k + 1,
                Positions::From(q),
                Positions::From(0),
            ))
            .unwrap()
            .unwrap();
        assert_eq!(b.dims(), [2, 1, k + 1]);
        b.get(1).unwrap().get(0).unwrap().to_vec1::<f32>().unwrap()
    };
    // A causal query at 5 with a window of 3 sees 3, 4 and 5.
    let row = bias(Direction::Causal, 3, 5, 5);
    let masked: Vec<bool> = row.iter().map(|&v| v == posenc::window::OUTSIDE).collect();
    assert_eq!(masked, [true, true, true, false, false, false]);
    assert!(row.iter().all(|v| v.is_finite()));
    // Bidirectional: less than 3 away on either side.
    let row = bias(Direction::Bidirectional, 3, 2, 6);
    let masked: Vec<bool> = row.iter().map(|&v| v == posenc::window::OUTSIDE).collect();
    assert_eq!(masked, [false, false, false, false, false, true, true]);
    let zero: EncodingConfig = r#"{"kind": "window", "size": 0}"#.parse().unwrap();
    let message = zero
        .build_untrained(16, 2, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(message.contains("at least 1"), "{message}");
}
