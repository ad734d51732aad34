//! `liere` against LieRE's own code (`scripts/make_liere_fixtures.py`): from the weights its
//! encoder drew, the queries its `apply_transforms` turns, at the trained grid, past it, in
//! three dimensions and with features left over, and the same formula in float64; and the
//! gradients of a weighted sum of them with respect to the weights and the queries, through
//! the matrix exponential.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{
    Direction, EncodingConfig, Form, PositionalEncoding, Positions, RotateContext, Target,
};
use serde_json::Value;

use posenc_testkit::{json_values as flat, max_gap, values};

fn built(
    config: &str,
    head_dim: usize,
    heads: usize,
) -> (std::sync::Arc<dyn PositionalEncoding>, VarMap) {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let target = Target::new(head_dim * heads, heads, Direction::Bidirectional).unwrap();
    let config: EncodingConfig = config.parse().unwrap();
    (config.build(&target, vb).unwrap(), varmap)
}

fn generators(varmap: &VarMap) -> Var {
    varmap
        .data()
        .lock()
        .unwrap()
        .get("generators")
        .unwrap()
        .clone()
}

/// The size of `v`'s largest entry, for a tolerance relative to it.
fn largest(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| m.max(x.abs()))
}

#[test]
fn turned_queries_and_their_gradients_match_liere() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/liere.json")).unwrap();
    let dev = Device::Cpu;
    let cases = fixture["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let n = |k: &str| case[k].as_u64().unwrap() as usize;
        let (heads, head_dim) = (n("heads"), n("head_dim"));
        let config = serde_json::json!({
            "kind": "liere", "grid": case["trained"], "generator_dim": case["generator_dim"],
        });
        let (enc, varmap) = built(&config.to_string(), head_dim, heads);
        let var = generators(&varmap);
        var.set(
            &Tensor::new(flat(&case["generators"]), &dev)
                .unwrap()
                .reshape(var.shape())
                .unwrap(),
        )
        .unwrap();
        let rows: Vec<Vec<u32>> = serde_json::from_value(case["coords"].clone()).unwrap();
        let axes = rows[0].len();
        let coords: Vec<u32> = rows.concat();
        let at = Positions::Coords {
            axes,
            coords: &coords,
        };
        let q = Var::from_tensor(
            &Tensor::new(flat(&case["q"]), &dev)
                .unwrap()
                .reshape((1, heads, rows.len(), head_dim))
                .unwrap(),
        )
        .unwrap();
        let turned = enc
            .rotate(q.as_tensor(), &RotateContext::query(at))
            .unwrap();
        let label = format!("grid {} of {}", case["grid"], case["trained"]);
        // LieRE's formula in float64 (torch.linalg.matrix_exp), to f32's rounding of the
        // result.
        let got = values(&turned);
        let gap = max_gap(&got, &flat(&case["q_turned_f64"]));
        assert!(gap < 2e-6, "{label}: turned queries against float64 {gap}");
        // LieRE's own output rounds each generator to f32 before exponentiating it: an
        // error of f32's epsilon times the generator's norm, on queries of this size.
        let tol = f32::EPSILON
            * case["generator_norm"].as_f64().unwrap() as f32
            * largest(&flat(&case["q"]));
        let gap = max_gap(&got, &flat(&case["q_turned"]));
        assert!(
            gap < tol.max(1e-6),
            "{label}: turned queries {gap} (tolerance {tol})"
        );
        let w = Tensor::new(flat(&case["weights"]), &dev)
            .unwrap()
            .reshape(turned.shape())
            .unwrap();
        let grads = (turned * w).unwrap().sum_all().unwrap().backward().unwrap();
        let want = flat(&case["grad_q"]);
        let gap = max_gap(&values(grads.get(q.as_tensor()).unwrap()), &want);
        let tol = tol / largest(&flat(&case["q"])) * largest(&flat(&case["weights"]));
        assert!(
            gap < tol.max(1e-6),
            "{label}: the queries' gradient {gap} ({tol})"
        );
        // The weights' gradient, to the same rounding of the generators in LieRE's, relative
        // to its largest entry.
        let want = flat(&case["grad_generators"]);
        let got = values(grads.get(var.as_tensor()).expect("the generators learn"));
        let gap = max_gap(&got, &want);
        let tol = f32::EPSILON * case["generator_norm"].as_f64().unwrap() as f32 * largest(&want);
        assert!(gap < tol, "{label}: the generators' gradient {gap} ({tol})");
    }
}

/// Rotations keep lengths; at the origin a token is not turned; equal content scores 1
/// with itself in the table; and the table's score of two patches is the turned vectors'.
#[test]
fn rotations_are_orthogonal_and_the_table_is_their_overlap() {
    let dev = Device::Cpu;
    let (enc, _) = built(
        r#"{"kind": "liere", "grid": [4, 4], "generator_dim": 4}"#,
        8,
        2,
    );
    let coords: Vec<u32> = vec![0, 0, 0, 3, 2, 1, 5, 5];
    let at = Positions::Coords {
        axes: 2,
        coords: &coords,
    };
    let q = Tensor::randn(0f32, 1.0, (3, 2, 4, 8), &dev).unwrap();
    let turned = enc.rotate(&q, &RotateContext::key(at)).unwrap();
    let norms = |t: &Tensor| values(&t.sqr().unwrap().sum(3).unwrap());
    let gap = max_gap(&norms(&turned), &norms(&q));
    assert!(gap < 1e-4, "lengths kept: {gap}");
    let origin = max_gap(
        &values(&turned.narrow(2, 0, 1).unwrap()),
        &values(&q.narrow(2, 0, 1).unwrap()),
    );
    assert!(origin < 1e-6, "the patch at (0, 0) is not turned: {origin}");
    let Form::Bias { bias, .. } = enc.table_at(at, 4).unwrap().form else {
        panic!("liere's table is the score of its rotations")
    };
    let bias: Vec<Vec<Vec<f32>>> = bias.to_vec3().unwrap();
    // The score of e_j at patch i with e_j at patch k, summed over j, is the table's cell.
    let basis = Tensor::eye(8, DType::F32, &dev)
        .unwrap()
        .reshape((8, 1, 1, 8))
        .unwrap()
        .broadcast_as((8, 2, 4, 8))
        .unwrap()
        .contiguous()
        .unwrap();
    let e = enc.rotate(&basis, &RotateContext::key(at)).unwrap();
    let overlap: Vec<Vec<Vec<f32>>> = e
        .matmul(&e.transpose(2, 3).unwrap())
        .unwrap()
        .sum(0)
        .unwrap()
        .affine(1.0 / 8.0, 0.0)
        .unwrap()
        .to_vec3()
        .unwrap();
    for h in 0..2 {
        for i in 0..4 {
            assert!((bias[h][i][i] - 1.0).abs() < 1e-5, "head {h}, patch {i}");
            for k in 0..4 {
                assert!(
                    (bias[h][i][k] - overlap[h][i][k]).abs() < 1e-5,
                    "{h} {i} {k}"
                );
            }
        }
    }
}

#[test]
fn bad_settings_and_inputs_are_named() {
    let target = Target::new(16, 2, Direction::Bidirectional).unwrap();
    for (config, needle) in [
        (r#"{"kind": "liere", "grid": [4]}"#, "2 or 3 axes"),
        (r#"{"kind": "liere", "grid": [4, 0]}"#, "2 or 3 axes"),
        (r#"{"kind": "liere", "grid": [2, 2, 2, 2]}"#, "2 or 3 axes"),
        (r#"{"kind": "liere", "generator_dim": 9}"#, "generator_dim"),
        (r#"{"kind": "liere", "generator_dim": 1}"#, "generator_dim"),
    ] {
        let e = config
            .parse::<EncodingConfig>()
            .unwrap()
            .build_untrained(target.d_model, target.heads, &Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(e.contains("liere") && e.contains(needle), "{config}: {e}");
    }
    let e = r#"{"kind": "liere", "generatordim": 4}"#
        .parse::<EncodingConfig>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("generatordim"), "{e}");
    let (enc, _) = built(r#"{"kind": "liere", "grid": [4, 4]}"#, 8, 2);
    let q = Tensor::zeros((1, 2, 2, 8), DType::F32, &Device::Cpu).unwrap();
    let three: Vec<u32> = vec![0, 1, 2, 0, 1, 2];
    let at = Positions::Coords {
        axes: 3,
        coords: &three,
    };
    let e = enc
        .rotate(&q, &RotateContext::query(at))
        .unwrap_err()
        .to_string();
    assert!(e.contains("reads 2 per token"), "{e}");
    let wide = Tensor::zeros((1, 3, 2, 8), DType::F32, &Device::Cpu).unwrap();
    let e = enc
        .rotate(&wide, &RotateContext::query(0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 heads of 8") && e.contains("got 3"), "{e}");
    // Rotations past the memory they may take are refused before they are made.
    let e = enc
        .table(1 << 21)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("liere's rotations"), "{e}");
}
