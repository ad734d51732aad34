//! `learned-2d` against timm's `resample_abs_pos_embed` (`scripts/make_learned_2d_fixtures.py`):
//! a table resampled to larger, smaller and uneven grids through the seam's `embed`, the
//! trained grid's own rows, gradients to the table, and bad input named.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::{Direction, EmbedContext, EncodingConfig, Positions, Target};
use serde_json::Value;

fn grid(h: u32, w: u32) -> Vec<u32> {
    (0..h)
        .flat_map(|y| (0..w).flat_map(move |x| [y, x]))
        .collect()
}

fn built(config: &str, d: usize) -> (std::sync::Arc<dyn posenc::PositionalEncoding>, VarMap) {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let target = Target::new(d, 1, Direction::Bidirectional).unwrap();
    let config: EncodingConfig = config.parse().unwrap();
    (config.build(&target, vb).unwrap(), varmap)
}

fn added(enc: &dyn posenc::PositionalEncoding, coords: &[u32], d: usize) -> Vec<Vec<f32>> {
    let at = Positions::Coords { axes: 2, coords };
    let zeros = Tensor::zeros((1, coords.len() / 2, d), DType::F32, &Device::Cpu).unwrap();
    let out = enc.embed(&zeros, &EmbedContext::at(at)).unwrap();
    out.squeeze(0).unwrap().to_vec2::<f32>().unwrap()
}

/// The table of a `learned-2d` over `grid` whose weight is `varmap`'s, resampled to `new`.
fn resampled(varmap: &VarMap, grid: [u32; 2], new: [u32; 2], d: usize) -> Vec<Vec<f32>> {
    let weight = varmap.data().lock().unwrap()["weight"].as_tensor().clone();
    let config = posenc::learned_2d::Learned2dConfig {
        grid: grid.map(|g| g as usize),
        resample: true,
    };
    let table = posenc::learned_2d::Learned2d::with_table(&config, weight, d).unwrap();
    let t = table.table_for(new[0] as usize, new[1] as usize).unwrap();
    t.to_vec2::<f32>().unwrap()
}

#[test]
fn resampled_tables_match_timm() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/learned_2d.json")).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 7);
    for case in cases {
        let [rows, cols]: [u32; 2] = serde_json::from_value(case["grid"].clone()).unwrap();
        let [h, w]: [u32; 2] = serde_json::from_value(case["new"].clone()).unwrap();
        let d = case["d_model"].as_u64().unwrap() as usize;
        let (enc, varmap) = built(
            &format!(r#"{{"kind": "learned-2d", "grid": [{rows}, {cols}]}}"#),
            d,
        );
        let table: Vec<Vec<f32>> = serde_json::from_value(case["table"].clone()).unwrap();
        let weight = Tensor::new(table.clone(), &Device::Cpu).unwrap();
        varmap.data().lock().unwrap()["weight"]
            .set(&weight)
            .unwrap();
        // The trained grid: the table itself.
        assert_eq!(added(enc.as_ref(), &grid(rows, cols), d), table);
        let want: Vec<Vec<f32>> = serde_json::from_value(case["resampled"].clone()).unwrap();
        // Past the trained grid, through the seam; any grid, through the table itself.
        let got = match h > rows || w > cols {
            true => added(enc.as_ref(), &grid(h, w), d),
            false => resampled(&varmap, [rows, cols], [h, w], d),
        };
        let gap = posenc_testkit::max_gap(&got.concat(), &want.concat());
        assert!(gap < 1e-5, "{rows}×{cols} → {h}×{w}: {gap}");
    }
}

#[test]
fn the_table_learns_and_bad_input_is_named() {
    let (enc, varmap) = built(r#"{"kind": "learned-2d", "grid": [2, 3]}"#, 4);
    // Gradients reach the table through the resampling.
    let coords = grid(4, 5);
    let at = Positions::Coords {
        axes: 2,
        coords: &coords,
    };
    let x = Tensor::zeros((1, 20, 4), DType::F32, &Device::Cpu).unwrap();
    let out = enc.embed(&x, &EmbedContext::at(at)).unwrap();
    let grads = out.sqr().unwrap().sum_all().unwrap().backward().unwrap();
    let weight = varmap.data().lock().unwrap()["weight"].clone();
    assert!(grads.get(weight.as_tensor()).is_some());
    // One position a token: raster order over the trained grid, to its end.
    let x6 = Tensor::zeros((1, 6, 4), DType::F32, &Device::Cpu).unwrap();
    let raster: Vec<u32> = vec![0, 0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 2];
    let by_coords = enc
        .embed(
            &x6,
            &EmbedContext::at(Positions::Coords {
                axes: 2,
                coords: &raster,
            }),
        )
        .unwrap();
    let by_position = enc.embed(&x6, &EmbedContext::at(0)).unwrap();
    let gap = (by_coords - by_position)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap();
    assert_eq!(gap.to_scalar::<f32>().unwrap(), 0.0);
    let x7 = Tensor::zeros((1, 7, 4), DType::F32, &Device::Cpu).unwrap();
    let err = enc
        .embed(&x7, &EmbedContext::at(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains('6'), "{err}");
    // Resampling off: within the grid, the rows as they are; past it, refused.
    let (strict, _) = built(
        r#"{"kind": "learned-2d", "grid": [2, 3], "resample": false}"#,
        4,
    );
    let corner: Vec<u32> = vec![1, 2];
    let x1 = Tensor::zeros((1, 1, 4), DType::F32, &Device::Cpu).unwrap();
    strict
        .embed(
            &x1,
            &EmbedContext::at(Positions::Coords {
                axes: 2,
                coords: &corner,
            }),
        )
        .unwrap();
    let past: Vec<u32> = vec![2, 0];
    let err = strict
        .embed(
            &x1,
            &EmbedContext::at(Positions::Coords {
                axes: 2,
                coords: &past,
            }),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("resampling off") && err.contains("3 × 1"),
        "{err}"
    );
    let config: EncodingConfig = r#"{"kind": "learned-2d", "grid": [0, 3]}"#.parse().unwrap();
    let err = config
        .build_untrained(4, 1, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(err.contains("a grid of 1 to 4096"), "{err}");
}
