//! `sinusoidal-2d` against MAE's `get_2d_sincos_pos_embed` as transformers' ViTMAE has it
//! (`scripts/make_sinusoidal_2d_fixtures.py`), at three widths and grids, through the seam's
//! `embed`; bad input is named.

use candle_core::{Device, Tensor};
use posenc::{EmbedContext, EncodingConfig, Positions};
use serde_json::Value;

#[test]
fn mae_tables_match_transformers() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/sinusoidal_2d.json")).unwrap();
    let dev = Device::Cpu;
    let config: EncodingConfig = "sinusoidal-2d".parse().unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let d = case["d_model"].as_u64().unwrap() as usize;
        let rows: Vec<[u32; 2]> = serde_json::from_value(case["rows"].clone()).unwrap();
        let want: Vec<Vec<f32>> = serde_json::from_value(case["table"].clone()).unwrap();
        let coords: Vec<u32> = rows.concat();
        let at = Positions::Coords {
            axes: 2,
            coords: &coords,
        };
        let enc = config.build_untrained(d, 1, &dev).unwrap();
        // What the seam adds to zero embeddings is the table.
        let zeros = Tensor::zeros((1, rows.len(), d), candle_core::DType::F32, &dev).unwrap();
        let got = enc.embed(&zeros, &EmbedContext::at(at)).unwrap();
        let got = got.squeeze(0).unwrap().to_vec2::<f32>().unwrap();
        let gap = posenc_testkit::max_gap(&got.concat(), &want.concat());
        assert!(gap < 1e-6, "d {d}: {gap}");
    }
}

#[test]
fn bad_input_is_named() {
    let dev = Device::Cpu;
    let config: EncodingConfig = "sinusoidal-2d".parse().unwrap();
    let enc = config.build_untrained(8, 1, &dev).unwrap();
    let x = Tensor::randn(0f32, 1.0, (1, 3, 8), &dev).unwrap();
    let err = config.build_untrained(6, 1, &dev).unwrap_err().to_string();
    assert!(err.contains("multiple of 4"), "{err}");
    let three: Vec<u32> = vec![0, 1, 2];
    let at = Positions::Coords {
        axes: 3,
        coords: &three,
    };
    let err = enc
        .embed(&x.narrow(1, 0, 1).unwrap(), &EmbedContext::at(at))
        .unwrap_err()
        .to_string();
    assert!(err.contains("reads 2 per token"), "{err}");
}
