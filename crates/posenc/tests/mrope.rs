//! `mrope` against transformers 5.24 (`scripts/make_mrope_fixtures.py`): Qwen2-VL's chunked
//! and Qwen3-VL's interleaved sections at explicit `(t, h, w)` rows, the queries they turn,
//! and Qwen2-VL's `get_rope_index` for text and images; text alone turns as `rope` does.

use candle_core::{Device, Tensor};
use posenc::mrope::{layout, Mrope, MropeConfig, Segment};
use posenc::{EncodingConfig, PositionalEncoding, Positions, RotateContext};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/mrope.json")).unwrap()
}

fn matrix(v: &Value) -> Vec<Vec<f32>> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v:.80}"))
}

fn largest_gap(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    posenc_testkit::max_gap(&a.concat(), &b.concat())
}

fn config(case: &Value) -> MropeConfig {
    serde_json::from_value(serde_json::json!({
        "rope_theta": case["rope_theta"],
        "mrope_section": case["mrope_section"],
        "mrope_interleaved": case["mrope_interleaved"],
    }))
    .unwrap()
}

#[test]
fn qwen2_and_qwen3_vl_tables_and_turned_queries_match_transformers() {
    let fixture = fixture();
    let dev = Device::Cpu;
    for case in fixture["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let head_dim = case["head_dim"].as_u64().unwrap() as usize;
        let rows: Vec<Vec<u32>> = serde_json::from_value(case["rows"].clone()).unwrap();
        let coords: Vec<u32> = rows.concat();
        let at = Positions::Coords {
            axes: 3,
            coords: &coords,
        };
        let mrope = Mrope::new(&config(case), head_dim, &dev).unwrap();
        let (cos, sin) = mrope.cos_sin(at, rows.len()).unwrap();
        let (cos, sin) = (cos.to_vec2::<f32>().unwrap(), sin.to_vec2::<f32>().unwrap());
        // The layout, exactly: transformers' own recomposition of angles taken in f64.
        for (got, want) in [(&cos, "cos_f64"), (&sin, "sin_f64")] {
            let gap = largest_gap(got, &matrix(&case[want]));
            assert!(gap < 1e-6, "{name} {want}: {gap}");
        }
        // transformers' tables, whose angles it takes in f32: off by f32's rounding of
        // angles up to 4 095 rad (about 2.4e-4 there), and by less where they are small.
        for (got, want) in [(&cos, "cos"), (&sin, "sin")] {
            let want = matrix(&case[want]);
            for (r, row) in rows.iter().enumerate() {
                let far = *row.iter().max().unwrap() as f32;
                let gap = largest_gap(&got[r..=r], &want[r..=r]);
                assert!(gap <= 1e-6 + 1.2e-7 * far, "{name} {row:?}: {gap}");
            }
        }
        // The queries turned: through the seam, as a model turns them.
        let q: Vec<Vec<Vec<f32>>> = serde_json::from_value(case["q"].clone()).unwrap();
        let q = Tensor::new(q, &dev).unwrap().unsqueeze(0).unwrap();
        let turned = mrope.rotate(&q, &RotateContext::query(at)).unwrap();
        let turned: Vec<Vec<f32>> = turned
            .squeeze(0)
            .unwrap()
            .to_vec3::<f32>()
            .unwrap()
            .concat();
        let want: Vec<Vec<f32>> =
            serde_json::from_value::<Vec<Vec<Vec<f32>>>>(case["q_turned"].clone())
                .unwrap()
                .concat();
        let gap = largest_gap(&turned, &want);
        assert!(gap < 2e-3, "{name} turned queries: {gap}");
        let near = 8; // rows whose coordinates are all below 8
        let gap = largest_gap(&turned[..near], &want[..near]);
        assert!(gap < 1e-5, "{name} turned queries near the start: {gap}");
    }
}

#[test]
fn text_and_images_are_placed_as_get_rope_index_places_them() {
    let fixture = fixture();
    let segments: Vec<Segment> = fixture["layout"]["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| match (s.get("text"), s.get("image")) {
            (Some(n), _) => Segment::Text(n.as_u64().unwrap() as usize),
            (_, Some(g)) => {
                let g: [usize; 3] = serde_json::from_value(g.clone()).unwrap();
                Segment::Image {
                    t: g[0],
                    h: g[1],
                    w: g[2],
                }
            }
            _ => panic!("a segment of neither kind: {s}"),
        })
        .collect();
    let want: Vec<Vec<u32>> = serde_json::from_value(fixture["layout"]["coords"].clone()).unwrap();
    assert_eq!(layout(&segments).unwrap(), want.concat());
    // Nothing to place is refused by name, as is a sequence past 2^24.
    let err = layout(&[Segment::Image { t: 1, h: 0, w: 3 }])
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one frame, row and column"), "{err}");
    let err = layout(&[Segment::Text(1 << 25)]).unwrap_err().to_string();
    assert!(err.contains("below"), "{err}");
}

#[test]
fn text_alone_turns_as_rope_and_bad_settings_are_named() {
    let dev = Device::Cpu;
    let head_dim = 16;
    let mrope: EncodingConfig =
        r#"{"kind": "mrope", "rope_theta": 10000, "mrope_section": [2, 3, 3]}"#
            .parse()
            .unwrap();
    let rope: EncodingConfig = r#"{"kind": "rope", "base": 10000}"#.parse().unwrap();
    let [mrope, rope] = [mrope, rope].map(|c| c.build_untrained(head_dim, 1, &dev).unwrap());
    let q = Tensor::randn(0f32, 1.0, (1, 1, 5, head_dim), &dev).unwrap();
    // Text at p on every axis, given as coordinates or as positions, is RoPE at p.
    let coords: Vec<u32> = (7..12).flat_map(|p| [p; 3]).collect();
    let grid = Positions::Coords {
        axes: 3,
        coords: &coords,
    };
    let by_rope = rope.rotate(&q, &RotateContext::query(7)).unwrap();
    for at in [grid, Positions::From(7)] {
        let by_mrope = mrope.rotate(&q, &RotateContext::query(at)).unwrap();
        let gap = (&by_mrope - &by_rope)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap();
        assert!(gap.to_scalar::<f32>().unwrap() < 1e-6, "{at:?}");
    }
    // An image's rows and columns turn their own pairs: (t, h, w) = (7, 8, 9) is not 7's.
    let patch: Vec<u32> = [7, 8, 9].repeat(5);
    let at = Positions::Coords {
        axes: 3,
        coords: &patch,
    };
    let turned = mrope.rotate(&q, &RotateContext::query(at)).unwrap();
    let gap = (&turned - &by_rope)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap();
    assert!(gap.to_scalar::<f32>().unwrap() > 1e-3);
    // Sections that miss half the head width, and coordinates on two axes.
    let bad: EncodingConfig = r#"{"kind": "mrope", "mrope_section": [2, 3, 2]}"#.parse().unwrap();
    let err = bad
        .build_untrained(head_dim, 1, &dev)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("adding up to half the head width (8)"),
        "{err}"
    );
    let two: Vec<u32> = [1, 2].repeat(5);
    let at = Positions::Coords {
        axes: 2,
        coords: &two,
    };
    let err = mrope
        .rotate(&q, &RotateContext::query(at))
        .unwrap_err()
        .to_string();
    assert!(err.contains("reads 3 per token"), "{err}");
}
