//! `rope-mixed` against rope-vit's RoPE-Mixed (`scripts/make_rope2d_fixtures.py`): from the
//! angles rope-vit drew, the starting frequencies of its `init_random_2d_freqs`; from them,
//! the tables of its `compute_mixed_cis` and the queries they turn. Both weights learn.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use posenc::{Direction, EncodingConfig, PositionalEncoding, Positions, RotateContext, Target};
use serde_json::Value;

use posenc_testkit::{json_values as flat, max_gap as largest_gap, values};

/// `rope-mixed` for `heads` heads of `head_dim`, with its variables.
fn built(
    head_dim: usize,
    heads: usize,
    base: f64,
) -> (std::sync::Arc<dyn PositionalEncoding>, VarMap) {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let target = Target::new(head_dim * heads, heads, Direction::Bidirectional).unwrap();
    let config: EncodingConfig = format!(r#"{{"kind": "rope-mixed", "base": {base}}}"#)
        .parse()
        .unwrap();
    (config.build(&target, vb).unwrap(), varmap)
}

fn var(varmap: &VarMap, name: &str) -> Var {
    varmap.data().lock().unwrap().get(name).unwrap().clone()
}

#[test]
fn mixed_frequencies_tables_and_turned_queries_match_rope_vit() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/rope_2d.json")).unwrap();
    let dev = Device::Cpu;
    for case in fixture["mixed"].as_array().unwrap() {
        let head_dim = case["head_dim"].as_u64().unwrap() as usize;
        let heads = case["heads"].as_u64().unwrap() as usize;
        let (enc, varmap) = built(head_dim, heads, case["base"].as_f64().unwrap());
        let angles: Vec<f32> = flat(&case["angles"]);
        var(&varmap, "angles")
            .set(&Tensor::new(angles, &dev).unwrap())
            .unwrap();
        let rows: Vec<[u32; 2]> = serde_json::from_value(case["rows"].clone()).unwrap();
        let coords: Vec<u32> = rows.concat();
        let at = Positions::Coords {
            axes: 2,
            coords: &coords,
        };
        // The starting frequencies, from rope-vit's angles: its init_random_2d_freqs.
        let table = enc.table_at(at, rows.len()).unwrap();
        let posenc::Form::Rotary { cos, .. } = &table.form else {
            panic!("a rotation's table")
        };
        let want_cos = flat(&case["cos"]);
        let per_head = rows.len() * head_dim / 2;
        let gap = largest_gap(&values(cos), &want_cos[..per_head]);
        assert!(gap < 2e-6, "head 0's cos: {gap}");
        // Every head, through the seam.
        let q = Tensor::new(flat(&case["q"]), &dev)
            .unwrap()
            .reshape((1, heads, rows.len(), head_dim))
            .unwrap();
        let turned = enc.rotate(&q, &RotateContext::query(at)).unwrap();
        let gap = largest_gap(&values(&turned), &flat(&case["q_turned"]));
        assert!(gap < 1e-5, "turned queries: {gap}");
        // rope-vit's frequencies themselves, read back through the table of one patch at
        // (1, 0) (angle fy) and (0, 1) (angle fx), head 0.
        let freqs = flat(&case["freqs"]); // (2, heads, d/2)
        let half = head_dim / 2;
        for (axis, patch) in [(0usize, [0u32, 1]), (1, [1, 0])] {
            let at = Positions::Coords {
                axes: 2,
                coords: &patch,
            };
            let t = enc.table_at(at, 1).unwrap();
            let posenc::Form::Rotary { cos, sin } = &t.form else {
                panic!()
            };
            let got: Vec<f32> = values(sin)
                .iter()
                .zip(values(cos))
                .map(|(s, c)| s.atan2(c))
                .collect();
            let want: Vec<f32> = freqs[axis * heads * half..axis * heads * half + half]
                .iter()
                .map(|f| f.sin().atan2(f.cos()))
                .collect();
            let gap = largest_gap(&got, &want);
            assert!(gap < 1e-5, "the starting frequencies on axis {axis}: {gap}");
        }
    }
}

#[test]
fn both_weights_learn_and_bad_input_is_named() {
    let dev = Device::Cpu;
    let (enc, varmap) = built(8, 2, 10.0);
    let q = Tensor::randn(0f32, 1.0, (1, 2, 6, 8), &dev).unwrap();
    let coords: Vec<u32> = vec![0, 0, 0, 1, 1, 0, 1, 1, 2, 3, 4, 1];
    let at = Positions::Coords {
        axes: 2,
        coords: &coords,
    };
    let loss = enc
        .rotate(&q, &RotateContext::query(at))
        .unwrap()
        .sqr()
        .unwrap()
        .broadcast_mul(&Tensor::arange(0f32, 8.0, &dev).unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    let grads = loss.backward().unwrap();
    let offset = grads
        .get(var(&varmap, "freqs_offset").as_tensor())
        .expect("the offset learns");
    let moved = offset
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(moved > 0.0);
    let angles = grads
        .get(var(&varmap, "angles").as_tensor())
        .expect("the angles learn");
    let turned = angles.abs().unwrap().max_all().unwrap();
    assert!(turned.to_scalar::<f32>().unwrap() > 0.0);
    // Queries of another number of heads (its frequencies are per head); three axes.
    let three_heads = Tensor::randn(0f32, 1.0, (1, 3, 6, 8), &dev).unwrap();
    let err = enc
        .rotate(&three_heads, &RotateContext::query(at))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("2 heads of 8") && err.contains("got 3"),
        "{err}"
    );
    let bad: Vec<u32> = vec![0, 1, 2];
    let at = Positions::Coords {
        axes: 3,
        coords: &bad,
    };
    let err = enc
        .rotate(&q.narrow(2, 0, 1).unwrap(), &RotateContext::query(at))
        .unwrap_err()
        .to_string();
    assert!(err.contains("reads 2 per token"), "{err}");
}
