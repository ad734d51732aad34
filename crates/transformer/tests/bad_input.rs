//! Bad input gets an error naming its cause, never a panic.

use crate::common;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use common::*;
use posenc::EncodingConfig;
use posenc_transformer::{Config, Mask, Transformer};

fn build(cfg: &Config) -> String {
    let varmap = VarMap::new();
    Transformer::new(
        cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap_err()
    .to_string()
}

#[test]
fn inconsistent_configs_are_named() {
    let base = tiny(EncodingConfig::from_kind("none").unwrap()).0;
    let e = build(&Config {
        heads: 5,
        ..base.clone()
    });
    assert!(e.contains("d_model = 16") && e.contains("heads = 5"), "{e}");
    let e = build(&Config {
        heads: 0,
        ..base.clone()
    });
    assert!(e.contains("heads"), "{e}");
    let e = build(&Config {
        dropout: 1.5,
        ..base.clone()
    });
    assert!(e.contains("dropout"), "{e}");
    let e = build(&Config {
        d_model: 18,
        heads: 2,
        encoding: EncodingConfig::from_kind("rope").unwrap().into(),
        ..base.clone()
    });
    assert!(e.contains("head_dim") && e.contains('9'), "{e}");
    let e = build(&Config {
        d_model: 15,
        heads: 1,
        encoding: EncodingConfig::from_kind("sinusoidal").unwrap().into(),
        ..base
    });
    assert!(e.contains("even") && e.contains("15"), "{e}");
}

#[test]
fn wrong_ranks_shapes_and_tokens_are_named() {
    let (cfg, varmap, _) = tiny(EncodingConfig::from_kind("sinusoidal").unwrap());
    let model = frozen(&cfg, &varmap);
    let dev = Device::Cpu;
    let e = model
        .encode(&Tensor::new(&[3u32, 4], &dev).unwrap(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("(batch, seq)") && e.contains("[2]"), "{e}");
    let e = model
        .encode(&ids(&[&[3, 25, 4]]), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("token id 25") && e.contains("20 tokens"), "{e}");
    let memory = model.encode(&ids(&[&[3, 4]]), None).unwrap();
    let wrong_memory = Tensor::zeros((1, 2, 8), DType::F32, &dev).unwrap();
    let e = model
        .decode(&ids(&[&[1]]), &wrong_memory, None, None, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("memory") && e.contains("[1, 2, 8]"), "{e}");
    let bad_mask = Mask::causal(3, 3, 0, &dev).unwrap();
    let e = model
        .decode(&ids(&[&[1, 2]]), &memory, None, Some(&bad_mask), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("mask of shape [1, 1, 3, 3]"), "{e}");
    let e = Mask::padding(&Tensor::new(&[1u32, 2], &dev).unwrap(), 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("(batch, len)"), "{e}");
}

#[test]
fn learned_positions_past_the_table_are_named() {
    let (cfg, varmap, _) = tiny(EncodingConfig::new(posenc::learned::LearnedConfig {
        max_positions: 4,
    }));
    let model = frozen(&cfg, &varmap);
    let e = model
        .encode(&ids(&[&[3, 4, 5, 6, 7]]), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_positions = 4"), "{e}");
}
