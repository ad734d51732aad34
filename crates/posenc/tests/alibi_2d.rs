//! `alibi-2d` against CROMA's `get_2dalibi` (torchgeo 0.8.1, `scripts/make_alibi_2d_fixtures.py`)
//! through the seam's `bias`, for four grids and head counts; one position a token is
//! ALiBi's symmetric form; bad input is named.

use candle_core::Device;
use posenc::{BiasContext, Direction, EncodingConfig, Positions};
use serde_json::Value;

#[test]
fn distance_biases_match_croma() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/alibi_2d.json")).unwrap();
    let config: EncodingConfig = "alibi-2d".parse().unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let heads = case["heads"].as_u64().unwrap() as usize;
        let rows: Vec<[u32; 2]> = serde_json::from_value(case["rows"].clone()).unwrap();
        let want: Vec<Vec<Vec<f32>>> = serde_json::from_value(case["bias"].clone()).unwrap();
        let coords: Vec<u32> = rows.concat();
        let at = Positions::Coords {
            axes: 2,
            coords: &coords,
        };
        let enc = config
            .build_untrained(4 * heads, heads, &Device::Cpu)
            .unwrap();
        let n = rows.len();
        let got = enc.bias(&BiasContext::new(n, n, at, at)).unwrap().unwrap();
        let got = got.to_vec3::<f32>().unwrap();
        let gap = posenc_testkit::max_gap(&got.concat().concat(), &want.concat().concat());
        assert!(gap < 1e-5, "{heads} heads, {n} patches: {gap}");
    }
}

#[test]
fn a_sequence_is_alibis_symmetric_form_and_bad_input_is_named() {
    let dev = Device::Cpu;
    let two: EncodingConfig = "alibi-2d".parse().unwrap();
    let one: EncodingConfig = r#"{"kind": "alibi", "form": "symmetric"}"#.parse().unwrap();
    let target = posenc::Target::new(16, 4, Direction::Bidirectional).unwrap();
    let [two, one] = [two, one].map(|c| {
        let vb = candle_nn::VarBuilder::zeros(candle_core::DType::F32, &dev);
        c.build(&target, vb).unwrap()
    });
    let at = Positions::From(3);
    let a = two.bias(&BiasContext::new(5, 5, at, at)).unwrap().unwrap();
    let b = one.bias(&BiasContext::new(5, 5, at, at)).unwrap().unwrap();
    let gap = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    assert!(gap.to_scalar::<f32>().unwrap() < 1e-6);
    let three: Vec<u32> = vec![0, 1, 2];
    let at = Positions::Coords {
        axes: 3,
        coords: &three,
    };
    let err = two
        .bias(&BiasContext::new(1, 1, at, at))
        .unwrap_err()
        .to_string();
    assert!(err.contains("reads 2 per token"), "{err}");
}
