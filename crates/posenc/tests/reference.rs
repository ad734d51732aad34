//! Encodings against independent reference implementations.
//!
//! The fixtures come from `scripts/make_fixtures.py` (PyTorch, Hugging Face transformers,
//! the Annotated Transformer), never from posenc itself.

use posenc_testkit::max_abs_diff;
use std::collections::HashMap;

use candle_core::{Device, Tensor, Var};
use posenc::alibi::{alibi_slopes, Alibi, AlibiForm};
use posenc::rope::Rope;
use posenc::sinusoidal::Sinusoidal;
use posenc::t5::relative_position_bucket;
use posenc::PairLayout;
use posenc::RotateContext;
use posenc::{inverse_frequencies, EncodingConfig, Form, PositionalEncoding};

const TOL: f32 = 1e-6;

fn fixtures() -> HashMap<String, Tensor> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/encodings.safetensors"
    );
    candle_core::safetensors::load(path, &Device::Cpu)
        .expect("fixtures: run scripts/make_fixtures.py")
}

fn assert_close(name: &str, ours: &Tensor, reference: &Tensor, tol: f32) {
    let diff = max_abs_diff(ours, reference);
    assert!(
        diff <= tol,
        "{name}: max |ours − reference| = {diff:e} > {tol:e}"
    );
}

fn additive(enc: &dyn PositionalEncoding, len: usize) -> Tensor {
    match enc.table(len).unwrap().form {
        Form::Additive { values, .. } => values,
        other => panic!("expected an additive table, got {other:?}"),
    }
}

#[test]
fn worked_example_from_the_documents() {
    // d_model = 4, pos = 1: [sin 1, cos 1, sin(1/100), cos(1/100)] ≈ [0.841, 0.540, 0.010, 1.000].
    let enc = Sinusoidal::new(4, 10_000.0, PairLayout::Interleaved, &Device::Cpu).unwrap();
    let row = enc
        .rows(1.into(), 1)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    for (got, want) in row.iter().zip([0.841f32, 0.540, 0.010, 1.000]) {
        assert!((got - want).abs() < 5e-4, "{row:?}");
    }
}

#[test]
fn sinusoidal_matches_the_annotated_transformer() {
    let f = fixtures();
    let enc = EncodingConfig::from_kind("sinusoidal")
        .unwrap()
        .build_untrained(32, 4, &Device::Cpu)
        .unwrap();
    assert_close(
        "sinusoidal",
        &additive(&*enc, 50),
        &f["sinusoidal.d32.len50"],
        TOL,
    );
}

#[test]
fn sinusoidal_concat_matches_marian() {
    let f = fixtures();
    let enc = EncodingConfig::from_kind("sinusoidal-concat")
        .unwrap()
        .build_untrained(32, 4, &Device::Cpu)
        .unwrap();
    assert_close(
        "sinusoidal-concat",
        &additive(&*enc, 50),
        &f["marian.d32.len50"],
        TOL,
    );
}

#[test]
fn rope_frequencies_match_llama() {
    let f = fixtures();
    let ours = Tensor::new(
        inverse_frequencies(16, 10_000.0)
            .iter()
            .map(|&x| x as f32)
            .collect::<Vec<_>>(),
        &Device::Cpu,
    )
    .unwrap();
    assert_close("inv_freq", &ours, &f["llama.inv_freq"], 1e-7);
}

#[test]
fn rope_table_matches_gptj_sinusoidal_positions() {
    let f = fixtures();
    let rope = Rope::new(16, 10_000.0, PairLayout::Interleaved, 1.0, &Device::Cpu).unwrap();
    let (cos, sin) = rope.cos_sin(0.into(), 20).unwrap();
    let ours = Tensor::cat(&[sin, cos], 1).unwrap();
    // GPT-J computes its angles in f32, so it carries ~1 ulp of the angle (≤ 19 rad here).
    assert_close(
        "gptj sincos",
        &ours,
        &f["gptj.create_sinusoidal_positions.len20"],
        4e-6,
    );
}

/// Rotates `x` at `offset` both with the fused kernel (plain tensor) and with the
/// differentiable path (a `Var`), and checks both against the reference.
fn check_rotation(name: &str, rope: &Rope, x: &Tensor, offset: usize, reference: &Tensor) {
    let fused = rope.rotate(x, &RotateContext::query(offset)).unwrap();
    assert_close(&format!("{name} (fused)"), &fused, reference, TOL);
    let var = Var::from_tensor(x).unwrap();
    assert!(var.as_tensor().track_op());
    let slow = rope
        .rotate(var.as_tensor(), &RotateContext::query(offset))
        .unwrap();
    assert_close(&format!("{name} (differentiable)"), &slow, reference, TOL);
}

#[test]
fn rope_half_split_matches_llama() {
    let f = fixtures();
    let rope = Rope::new(16, 10_000.0, PairLayout::Halves, 1.0, &Device::Cpu).unwrap();
    check_rotation("llama q", &rope, &f["rope.q"], 5, &f["llama.q_rot.offset5"]);
    check_rotation("llama k", &rope, &f["rope.k"], 5, &f["llama.k_rot.offset5"]);
}

#[test]
fn rope_interleaved_matches_gptj() {
    let f = fixtures();
    let rope = Rope::new(16, 10_000.0, PairLayout::Interleaved, 1.0, &Device::Cpu).unwrap();
    check_rotation("gptj q", &rope, &f["rope.q"], 5, &f["gptj.q_rot.offset5"]);
    check_rotation("gptj k", &rope, &f["rope.k"], 5, &f["gptj.k_rot.offset5"]);
}

#[test]
fn partial_rope_matches_gpt_neox() {
    let f = fixtures();
    let rope = Rope::new(16, 10_000.0, PairLayout::Halves, 0.5, &Device::Cpu).unwrap();
    assert_eq!(rope.rotary_dim(), 8);
    check_rotation("neox q", &rope, &f["rope.q"], 0, &f["neox.q_rot.partial50"]);
    check_rotation("neox k", &rope, &f["rope.k"], 0, &f["neox.k_rot.partial50"]);
}

#[test]
fn position_scale_matches_transformers_linear_scaling() {
    // Positions ÷ 2 is transformers' "linear" rope type (position interpolation), factor 2.
    let f = fixtures();
    let rope = Rope::new(16, 10_000.0, PairLayout::Halves, 1.0, &Device::Cpu)
        .unwrap()
        .with_position_scale(2.0)
        .unwrap();
    check_rotation(
        "linear q",
        &rope,
        &f["rope.q"],
        5,
        &f["llama.linear2.q_rot.offset5"],
    );
    check_rotation(
        "linear k",
        &rope,
        &f["rope.k"],
        5,
        &f["llama.linear2.k_rot.offset5"],
    );
}

#[test]
fn naive_encodings_match_their_formulas() {
    // The formulas in f64 (scripts/make_fixtures.py): fraction at lengths 1, 2 and 10
    // (one position has no fraction: 0), index and binary past 2^d_model, and one sine at
    // two frequencies.
    let f = fixtures();
    let build = |json: &str, d_model: usize| {
        serde_json::from_str::<EncodingConfig>(json)
            .unwrap()
            .build_untrained(d_model, 4, &Device::Cpu)
            .unwrap()
    };
    for len in [1, 2, 10] {
        let enc = build(r#"{"kind": "fraction"}"#, 8);
        let name = format!("fraction.d8.len{len}");
        assert_close(&name, &additive(&*enc, len), &f[&name], TOL);
    }
    for kind in ["index", "binary"] {
        let enc = build(&format!(r#"{{"kind": "{kind}"}}"#), 8);
        let name = format!("{kind}.d8.len300");
        assert_close(&name, &additive(&*enc, 300), &f[&name], 0.0);
    }
    for (w, name) in [
        (1.0, "sine-single.w1.0.d4.len50"),
        (0.05, "sine-single.w0.05.d4.len50"),
    ] {
        let enc = build(
            &format!(r#"{{"kind": "sine-single", "frequency": {w}}}"#),
            4,
        );
        assert_close(name, &additive(&*enc, 50), &f[name], TOL);
    }
}

#[test]
fn alibi_matches_bloom() {
    let f = fixtures();
    for heads in [8usize, 6, 12] {
        // BLOOM's tensor is slope_h · j, shape (heads, 1, len): the causal bias up to a
        // per-row constant, which softmax ignores. So bias(i, j) = bloom(j) − bloom(i), j ≤ i.
        let bloom = f[&format!("bloom.alibi.heads{heads}.len24")]
            .squeeze(1)
            .unwrap();
        let bloom: Vec<Vec<f32>> = bloom.to_vec2().unwrap();
        let ours = Alibi::new(heads, AlibiForm::Causal, &Device::Cpu).unwrap();
        let bias: Vec<Vec<Vec<f32>>> = ours
            .bias(24, 24, 0.into(), 0.into())
            .unwrap()
            .to_vec3()
            .unwrap();
        let slopes = alibi_slopes(heads);
        for h in 0..heads {
            assert!(
                (slopes[h] as f32 - bloom[h][1]).abs() < 1e-7,
                "slope of head {h} of {heads}"
            );
            for i in 0..24 {
                for j in 0..=i {
                    let want = bloom[h][j] - bloom[h][i];
                    let got = bias[h][i][j];
                    assert!(
                        (got - want).abs() <= TOL,
                        "heads={heads} h={h} i={i} j={j}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn t5_buckets_match_transformers() {
    let f = fixtures();
    let rel: Vec<i64> = f["t5.relative"].to_vec1().unwrap();
    for (key, bidirectional, buckets, max_distance) in [
        ("t5.buckets.bidirectional.32.128", true, 32, 128),
        ("t5.buckets.unidirectional.32.128", false, 32, 128),
        ("t5.buckets.bidirectional.64.256", true, 64, 256),
    ] {
        let want: Vec<i64> = f[key].to_vec1().unwrap();
        for (&r, &w) in rel.iter().zip(&want) {
            let got = relative_position_bucket(r, bidirectional, buckets, max_distance);
            assert_eq!(got as i64, w, "{key}: relative position {r}");
        }
    }
}

#[test]
fn kerple_matches_the_papers_formulas_with_their_gradients() {
    use posenc::kerple::{Kerple, KerpleVariant};
    use posenc::Direction;
    let f = fixtures();
    for (direction, dname) in [
        (Direction::Bidirectional, "bidirectional"),
        (Direction::Causal, "causal"),
    ] {
        for (variant, vname) in [(KerpleVariant::Log, "log"), (KerpleVariant::Power, "power")] {
            let r1 = Var::from_tensor(&f["kerple.r1_raw"]).unwrap();
            let r2 = Var::from_tensor(&f["kerple.r2_raw"]).unwrap();
            let weights = std::collections::HashMap::from([
                ("r1_raw".to_string(), r1.as_tensor().clone()),
                ("r2_raw".to_string(), r2.as_tensor().clone()),
            ]);
            let vb =
                candle_nn::VarBuilder::from_tensors(weights, candle_core::DType::F32, &Device::Cpu);
            let kerple = Kerple::new(3, variant, direction, vb).unwrap();
            let name = format!("kerple.{vname}.{dname}");
            // Queries at 5..7 against keys at 0..7, as a cache's next chunk sees them.
            let bias = kerple.bias(3, 8, 5.into(), 0.into()).unwrap();
            // Values reach ~15 (7^1.2 · 1.46): the tolerance is f32's, relative to them.
            let reference = &f[&format!("{name}.bias")];
            let scale = reference.abs().unwrap().max_all().unwrap();
            let scale = scale.to_scalar::<f32>().unwrap().max(1.0);
            assert_close(&name, &bias, reference, TOL * scale);
            let loss = (&bias * &f["kerple.w"]).unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap();
            for (var, which) in [(&r1, "r1_raw"), (&r2, "r2_raw")] {
                let grad = grads.get(var.as_tensor()).expect("a gradient");
                assert_close(
                    &format!("{name} d/d{which}"),
                    grad,
                    &f[&format!("{name}.grad_{which}")],
                    1e-5,
                );
            }
        }
    }
}

#[test]
fn fire_matches_the_papers_formula_with_its_gradients() {
    use posenc::fire::{Fire, FireConfig};
    use posenc::Direction;
    let f = fixtures();
    let names = [
        "mlp.0.weight",
        "mlp.0.bias",
        "mlp.2.weight",
        "mlp.2.bias",
        "c",
        "L_multiplier",
    ];
    let cfg = FireConfig {
        mlp_width: 4,
        c: 0.3,
        threshold: 5.5,
    };
    for (direction, dname) in [
        (Direction::Bidirectional, "bidirectional"),
        (Direction::Causal, "causal"),
    ] {
        let vars: Vec<Var> = names
            .iter()
            .map(|n| Var::from_tensor(&f[&format!("fire.{n}")]).unwrap())
            .collect();
        let weights = names
            .iter()
            .zip(&vars)
            .map(|(n, v)| (n.to_string(), v.as_tensor().clone()))
            .collect::<HashMap<_, _>>();
        let vb =
            candle_nn::VarBuilder::from_tensors(weights, candle_core::DType::F32, &Device::Cpu);
        let fire = Fire::new(&cfg, 3, direction, vb).unwrap();
        // Queries at 2..9 against keys at 0..9: L = 4.95 lies between them.
        let bias = fire.bias(8, 10, 2.into(), 0.into()).unwrap();
        let name = format!("fire.{dname}");
        assert_close(&name, &bias, &f[&format!("{name}.bias")], 1e-5);
        let loss = (&bias * &f["fire.w"]).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        for (var, which) in vars.iter().zip(names) {
            let grad = grads.get(var.as_tensor()).expect("a gradient");
            let reference = &f[&format!("{name}.grad.{which}")];
            let scale = reference.abs().unwrap().max_all().unwrap();
            let scale = scale.to_scalar::<f32>().unwrap().max(1.0);
            assert_close(&format!("{name} d/d{which}"), grad, reference, 1e-5 * scale);
        }
    }
}

#[test]
fn cope_matches_x_transformers_with_its_gradients() {
    use posenc::cope::Cope;
    use posenc::Direction;
    let f = fixtures();
    for (direction, dname) in [
        (Direction::Causal, "causal"),
        (Direction::Bidirectional, "bidirectional"),
    ] {
        let emb = Var::from_tensor(&f["cope.emb"]).unwrap();
        let q = Var::from_tensor(&f["cope.q"]).unwrap();
        let mut logits = f["cope.logits"].clone();
        if direction == Direction::Causal {
            // Later keys masked at f32's most negative value, as attention masks them.
            let later = Tensor::triu2(6, candle_core::DType::U8, &Device::Cpu)
                .unwrap()
                .sub(&Tensor::eye(6, candle_core::DType::U8, &Device::Cpu).unwrap())
                .unwrap()
                .broadcast_as(logits.shape())
                .unwrap();
            let min = Tensor::full(f32::MIN, logits.shape(), &Device::Cpu).unwrap();
            logits = later.where_cond(&min, &logits).unwrap();
        }
        let logits = Var::from_tensor(&logits).unwrap();
        let weights = HashMap::from([("pos_emb".to_string(), emb.as_tensor().clone())]);
        let vb =
            candle_nn::VarBuilder::from_tensors(weights, candle_core::DType::F32, &Device::Cpu);
        let cope = Cope::new(5, 4, direction, vb).unwrap();
        let bias = cope.bias(q.as_tensor(), logits.as_tensor()).unwrap();
        let name = format!("cope.{dname}");
        assert_close(&name, &bias, &f[&format!("{name}.bias")], 1e-5);
        let loss = (&bias * &f["cope.w"]).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        for (var, which) in [(&q, "q"), (&logits, "logits"), (&emb, "emb")] {
            let grad = grads.get(var.as_tensor()).expect("a gradient");
            let reference = &f[&format!("{name}.grad_{which}")];
            assert_close(&format!("{name} d/d{which}"), grad, reference, 1e-5);
        }
    }
}

#[test]
fn xpos_scores_match_x_transformers() {
    use posenc::xpos::Xpos;
    let f = fixtures();
    for (start, scale_base) in [(0usize, 512.0), (1000, 64.0)] {
        let xpos = Xpos::new(
            16,
            10_000.0,
            scale_base,
            PairLayout::Interleaved,
            &Device::Cpu,
        )
        .unwrap();
        let name = format!("xpos.scores.start{start}.base{scale_base}");
        let q = xpos
            .rotate(&f["rope.q"], &RotateContext::query(start))
            .unwrap();
        let k = xpos
            .rotate(&f["rope.k"], &RotateContext::key(start))
            .unwrap();
        let scores = q.matmul(&k.t().unwrap()).unwrap();
        // Scores reach ~16, summed over 16 products: f32's tolerance at that size.
        assert_close(&name, &scores, &f[&name], 2e-5);
        // Through the differentiable path as well.
        let var = Var::from_tensor(&f["rope.q"]).unwrap();
        let slow = xpos
            .rotate(var.as_tensor(), &RotateContext::query(start))
            .unwrap();
        assert_close(&format!("{name} (differentiable)"), &slow, &q, 1e-6);
    }
    // The range ends where a key's scale ζ₀^(−m/γ) would pass 1e30, and is refused by name.
    let xpos = Xpos::new(16, 10_000.0, 64.0, PairLayout::Interleaved, &Device::Cpu).unwrap();
    let past = xpos.capabilities().max_positions.unwrap();
    assert_eq!(
        past,
        (64.0 * 1e30f64.ln() / (1.4f64 / 0.4).ln()).floor() as usize
    );
    let e = xpos
        .rotate(&f["rope.q"], &RotateContext::query(past - 5))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("max_positions = {past}")), "{e}");
}
