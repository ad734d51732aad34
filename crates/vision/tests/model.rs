//! The ViT: where its patches sit for each kind, what positions change, and the inputs it
//! refuses.

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use posenc::mrope::{layout, Segment};
use posenc::EncodingConfig;
use posenc_vision::model::{Vit, VitConfig};
use posenc_vision::scenes::PATCH_VALUES;

fn vit(kind: &str, seed: u64) -> (VarMap, Vit) {
    let cfg = VitConfig {
        d_model: 32,
        heads: 2,
        d_ff: 64,
        layers: 2,
        encoding: EncodingConfig::from_kind(kind).unwrap(),
        grid: [4, 4],
        ..VitConfig::default()
    };
    let varmap = VarMap::new();
    let vb = posenc_train::init::seeded(&varmap, seed, &Device::Cpu);
    let model = Vit::new(&cfg, vb).unwrap();
    (varmap, model)
}

fn inputs(n: usize, seed: u64) -> (Tensor, Tensor) {
    let values: Vec<f32> = (0..n * PATCH_VALUES)
        .map(|i| (((i as u64 * 2654435761 + seed) % 1000) as f32) / 1000.0)
        .collect();
    (
        Tensor::from_vec(values, (1, n, PATCH_VALUES), &Device::Cpu).unwrap(),
        Tensor::new(&[[2u32, 7, 12]], &Device::Cpu).unwrap(),
    )
}

/// Patches reordered as `order` says, and the logits' largest difference from `x`'s.
fn permuted_gap(model: &Vit, x: &Tensor, q: &Tensor, order: &[u32], grid: [usize; 2]) -> f32 {
    let idx = Tensor::new(order, &Device::Cpu).unwrap();
    let shuffled = x.index_select(&idx, 1).unwrap();
    let a = model.forward(x, q, grid).unwrap();
    let b = model.forward(&shuffled, q, grid).unwrap();
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn the_patches_sit_where_each_kind_reads_them() {
    // Three coordinates: an image alone by Qwen2-VL's rule (time 0, then row, column).
    let (_, mrope) = vit("mrope", 0);
    let want = layout(&[Segment::Image { t: 1, h: 3, w: 5 }]).unwrap();
    let got = mrope.positions([3, 5]);
    match got.get() {
        posenc::Positions::Coords { axes: 3, coords } => assert_eq!(coords, want.as_slice()),
        other => panic!("{other:?}"),
    }
    // Two: (row, column), row after row.
    let (_, axial) = vit("rope-2d", 0);
    match axial.positions([2, 3]).get() {
        posenc::Positions::Coords { axes: 2, coords } => {
            assert_eq!(coords, &[0, 0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 2])
        }
        other => panic!("{other:?}"),
    }
    // One position a token: raster order.
    let (_, rope) = vit("rope", 0);
    assert!(matches!(
        rope.positions([2, 3]).get(),
        posenc::Positions::From(0)
    ));
}

/// Without positions, mean pooling makes the model blind to where patches are: shuffling
/// them changes nothing. Every encoding here changes the answer's logits.
#[test]
fn only_positions_tell_a_shuffled_image_from_its_own() {
    let (x, q) = inputs(16, 1);
    let order: Vec<u32> = (0..16u32).rev().collect();
    let (_, none) = vit("none", 1);
    assert!(permuted_gap(&none, &x, &q, &order, [4, 4]) < 1e-5);
    for kind in [
        "sinusoidal-2d",
        "learned-2d",
        "rope-2d",
        "rope-mixed",
        "mrope",
        "rope",
    ] {
        let (_, model) = vit(kind, 1);
        let gap = permuted_gap(&model, &x, &q, &order, [4, 4]);
        assert!(gap > 1e-4, "{kind}: {gap}");
    }
}

#[test]
fn weights_start_as_their_modules_ask_from_the_seed() {
    let values = |varmap: &VarMap, name: &str| {
        let data = varmap.data().lock().unwrap();
        data[name]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let (a, _) = vit("rope-mixed", 5);
    let (b, _) = vit("rope-mixed", 5);
    let (c, _) = vit("rope-mixed", 6);
    for name in [
        "encoding.angles",
        "patch.weight",
        "stack.layers.0.self_attn.in_proj_weight",
    ] {
        if !a.data().lock().unwrap().contains_key(name) {
            continue;
        }
        assert_eq!(values(&a, name), values(&b, name), "{name}");
        assert_ne!(values(&a, name), values(&c, name), "{name}");
    }
    // RoPE-Mixed's own start (rope-vit's): angles in [0, 2π), the offset zero.
    let angles = values(&a, "encoding.angles");
    assert!(angles
        .iter()
        .all(|&v| (0.0..std::f32::consts::TAU).contains(&v)));
    assert!(angles.iter().any(|&v| v > 1.0), "{angles:?}");
    assert!(values(&a, "encoding.freqs_offset")
        .iter()
        .all(|&v| v == 0.0));
    // A learned table's (timm's): a normal of standard deviation 0.02.
    let (l, _) = vit("learned-2d", 5);
    let table = values(&l, "encoding.weight");
    let sd = (table.iter().map(|v| v * v).sum::<f32>() / table.len() as f32).sqrt();
    assert!((sd - 0.02).abs() < 0.003, "{sd}");
    // A linear layer's (candle's, PyTorch's): Kaiming, biases within ±1/√fan_in.
    let bias = values(&a, "patch.bias");
    let bound = 1.0 / (PATCH_VALUES as f32).sqrt();
    assert!(bias.iter().all(|v| v.abs() <= bound) && bias.iter().any(|&v| v != 0.0));
}

#[test]
fn bad_inputs_are_refused_by_name() {
    let (_, model) = vit("rope-2d", 0);
    let (x, q) = inputs(16, 0);
    let e = model.forward(&x, &q, [4, 5]).unwrap_err().to_string();
    assert!(
        e.contains("grid of 4 × 5") && e.contains("(batch, 20, 48)"),
        "{e}"
    );
    let q3 = Tensor::new(&[[1u32, 2]], &Device::Cpu).unwrap();
    let e = model.forward(&x, &q3, [4, 4]).unwrap_err().to_string();
    assert!(e.contains("questions of shape [1, 2]"), "{e}");
    // A learned table that may not resample refuses a grid past its own.
    let cfg = VitConfig {
        encoding: "learned-2d:resample=false"
            .parse::<posenc_train::labelled::Labelled>()
            .unwrap()
            .encoding
            .with_setting("grid", serde_json::json!([4, 4]))
            .unwrap(),
        grid: [4, 4],
        ..VitConfig::default()
    };
    let varmap = VarMap::new();
    let fixed = Vit::new(&cfg, posenc_train::init::seeded(&varmap, 0, &Device::Cpu)).unwrap();
    let (x6, _) = inputs(36, 0);
    let e = fixed.forward(&x6, &q, [6, 6]).unwrap_err().to_string();
    assert!(e.contains("learned-2d"), "{e}");
    // An encoding of another number of axes than an image's.
    let e = VitConfig {
        grid: [2, 2],
        ..VitConfig::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("2 × 2"), "{e}");
}
