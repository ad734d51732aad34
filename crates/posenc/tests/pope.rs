//! `pope` against x-transformers' `PolarEmbedding` and `apply_polar_pos_emb` (fixtures by
//! `scripts/make_pope_fixtures.py`): queries and keys twice as wide, at positions from 0
//! and from 7, and the gradients in the queries, the keys and the keys' learned phases
//! (two of them outside `[−2π, 0]`, clamped, so their gradient is zero).

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::RotateContext;
use posenc::{Direction, EncodingConfig, PositionalEncoding, Positions, Target};
use posenc_testkit::max_abs_diff;

const TOL: f32 = 1e-5;

fn fixtures() -> HashMap<String, Tensor> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pope.safetensors");
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

#[test]
fn pope_matches_x_transformers_forward_and_gradients() {
    let f = fixtures();
    let (_, heads, _, d) = f["q"].dims4().unwrap();
    for (case, offset) in [("from0", 0), ("from7", 7)] {
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let target = Target::new(heads * d, heads, Direction::Causal).unwrap();
        let pope = EncodingConfig::from_kind("pope")
            .unwrap()
            .build(&target, vb)
            .unwrap();
        let phase = varmap.data().lock().unwrap()["phase"].clone();
        phase.set(&f["phase"]).unwrap();
        let (q, k) = (
            Var::from_tensor(&f["q"]).unwrap(),
            Var::from_tensor(&f["k"]).unwrap(),
        );
        let at = Positions::From(offset);
        let rq = pope
            .rotate(q.as_tensor(), &RotateContext::query(at))
            .unwrap();
        let rk = pope.rotate(k.as_tensor(), &RotateContext::key(at)).unwrap();
        assert_eq!(rq.dims(), &[2, heads, 5, 2 * d]);
        let loss = ((&rq * &f["wq"]).unwrap().sum_all().unwrap()
            + (&rk * &f["wk"]).unwrap().sum_all().unwrap())
        .unwrap();
        let grads = loss.backward().unwrap();
        let grad = |t: &Tensor| grads.get(t).unwrap().clone();
        let diffs = [
            ("q̃", max_abs_diff(&rq, &f[&format!("{case}.q")])),
            ("k̃", max_abs_diff(&rk, &f[&format!("{case}.k")])),
            (
                "∂q",
                max_abs_diff(&grad(q.as_tensor()), &f[&format!("{case}.grad_q")]),
            ),
            (
                "∂k",
                max_abs_diff(&grad(k.as_tensor()), &f[&format!("{case}.grad_k")]),
            ),
            (
                "∂δ",
                max_abs_diff(&grad(phase.as_tensor()), &f[&format!("{case}.grad_phase")]),
            ),
        ];
        println!("{case}: {diffs:?}");
        for (what, d) in diffs {
            assert!(d < TOL, "{case}: {what} off by {d:e}");
        }
        // A clamped phase takes no gradient.
        let gp = grad(phase.as_tensor()).to_vec2::<f32>().unwrap();
        assert_eq!((gp[0][1], gp[2][5]), (0.0, 0.0));
    }
}

#[test]
fn pope_refuses_what_it_cannot_turn() {
    let target = Target::new(16, 2, Direction::Causal).unwrap();
    let build = |json: &str| {
        json.parse::<EncodingConfig>()
            .and_then(|c| c.build(&target, VarBuilder::zeros(DType::F32, &Device::Cpu)))
    };
    let e = build(r#"{"kind": "pope", "base": 0.5}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("pope") && e.contains("base"), "{e}");
    let pope = build(r#""pope""#.trim_matches('"')).unwrap();
    // Keys of fewer heads than its phases (grouped-query attention) are refused by name.
    let k = Tensor::zeros((1, 1, 3, 8), DType::F32, &Device::Cpu).unwrap();
    let e = pope
        .rotate(&k, &RotateContext::key(0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("key head"), "{e}");
    let odd = Target::new(6, 2, Direction::Causal).unwrap();
    let e = EncodingConfig::from_kind("pope")
        .unwrap()
        .build(&odd, VarBuilder::zeros(DType::F32, &Device::Cpu))
        .unwrap_err()
        .to_string();
    assert!(e.contains("pope"), "{e}");
    let _: &dyn PositionalEncoding = &*pope;
}
