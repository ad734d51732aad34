//! `rope-2d` against rope-vit's RoPE-Axial (`scripts/make_rope2d_fixtures.py`): the table of
//! a grid of patches and the queries it turns, at two head widths and two bases; a score
//! reads the offset on each axis; bad input is named. (That a sequence is one row is
//! `coordinates.rs`'s test, for every kind of a grid.)

use candle_core::{Device, Tensor};
use posenc::rope_2d::Rope2d;
use posenc::{EncodingConfig, PositionalEncoding, Positions, RotateContext};
use serde_json::Value;

fn largest_gap(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    posenc_testkit::max_gap(&a.concat(), &b.concat())
}

#[test]
fn axial_tables_and_turned_queries_match_rope_vit() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/rope_2d.json")).unwrap();
    let dev = Device::Cpu;
    let cases = fixture["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for case in cases {
        let head_dim = case["head_dim"].as_u64().unwrap() as usize;
        let base = case["base"].as_f64().unwrap();
        let rows: Vec<[u32; 2]> = serde_json::from_value(case["rows"].clone()).unwrap();
        let coords: Vec<u32> = rows.concat();
        let at = Positions::Coords {
            axes: 2,
            coords: &coords,
        };
        let rope = Rope2d::new(base, head_dim, &dev).unwrap();
        let (cos, sin) = rope.cos_sin(at, rows.len()).unwrap();
        // rope-vit takes its angles in f32; the grids' are below 10 rad.
        for (got, want) in [(cos, "cos"), (sin, "sin")] {
            let want: Vec<Vec<f32>> = serde_json::from_value(case[want].clone()).unwrap();
            let gap = largest_gap(&got.to_vec2::<f32>().unwrap(), &want);
            assert!(gap < 2e-6, "{head_dim} {base} {want:?}: {gap}");
        }
        let q: Vec<Vec<Vec<f32>>> = serde_json::from_value(case["q"].clone()).unwrap();
        let q = Tensor::new(q, &dev).unwrap().unsqueeze(0).unwrap();
        let turned = rope.rotate(&q, &RotateContext::query(at)).unwrap();
        let turned = turned
            .squeeze(0)
            .unwrap()
            .to_vec3::<f32>()
            .unwrap()
            .concat();
        let want: Vec<Vec<Vec<f32>>> = serde_json::from_value(case["q_turned"].clone()).unwrap();
        let gap = largest_gap(&turned, &want.concat());
        assert!(gap < 1e-5, "{head_dim} {base} turned: {gap}");
    }
}

#[test]
fn a_score_reads_the_offset_on_each_axis_and_bad_input_is_named() {
    let dev = Device::Cpu;
    let config: EncodingConfig = "rope-2d".parse().unwrap();
    let enc = config.build_untrained(16, 1, &dev).unwrap();
    let q = Tensor::randn(0f32, 1.0, (1, 1, 1, 16), &dev).unwrap();
    let k = Tensor::randn(0f32, 1.0, (1, 1, 1, 16), &dev).unwrap();
    let score = |qp: [u32; 2], kp: [u32; 2]| -> f32 {
        let turn = |x: &Tensor, p: [u32; 2], key: bool| {
            let at = Positions::Coords {
                axes: 2,
                coords: &p,
            };
            let cx = match key {
                true => RotateContext::key(at),
                false => RotateContext::query(at),
            };
            enc.rotate(x, &cx).unwrap()
        };
        let (q, k) = (turn(&q, qp, false), turn(&k, kp, true));
        (q * k)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    // The same offset anywhere on the grid: the same score.
    let (a, b) = (score([1, 2], [3, 5]), score([6, 10], [8, 13]));
    assert!((a - b).abs() < 1e-4, "{a} {b}");
    // A row's offset is not a column's.
    let (row, col) = (score([0, 0], [2, 0]), score([0, 0], [0, 2]));
    assert!((row - col).abs() > 1e-3, "{row} {col}");
    // A head width that is not a multiple of 4; coordinates on three axes.
    let err = config.build_untrained(6, 1, &dev).unwrap_err().to_string();
    assert!(err.contains("multiple of 4"), "{err}");
    let three: Vec<u32> = vec![0, 1, 2];
    let at = Positions::Coords {
        axes: 3,
        coords: &three,
    };
    let err = enc
        .rotate(&q, &RotateContext::query(at))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("3-D coordinates") && err.contains("reads 2 per token"),
        "{err}"
    );
}
