//! Saving and loading: round trip, and a checkpoint that does not fit names every problem.

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use common::*;
use posenc::EncodingConfig;
use posenc_transformer::checkpoint::{self, CONFIG_FILE, WEIGHTS_FILE};
use posenc_transformer::{Config, Mask};

fn outputs(model: &posenc_transformer::Transformer) -> Tensor {
    let src = ids(&[&[3, 4, 5]]);
    let tgt = ids(&[&[1, 6, 7]]);
    let mask = posenc_transformer::Transformer::target_mask(&tgt, PAD).unwrap();
    model
        .forward(
            &src,
            &tgt,
            Some(&Mask::padding(&src, PAD).unwrap()),
            Some(&mask),
        )
        .unwrap()
}

fn saved(kind: &str) -> (tempfile::TempDir, Config, Tensor) {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, varmap, model) = tiny(EncodingConfig::from_kind(kind).unwrap());
    checkpoint::save(dir.path(), &cfg, &varmap, Default::default()).unwrap();
    (dir, cfg, outputs(&model))
}

fn weights(dir: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(dir.join(WEIGHTS_FILE), &Device::Cpu).unwrap()
}

fn rewrite(dir: &Path, f: impl FnOnce(&mut HashMap<String, Tensor>)) {
    let mut w = weights(dir);
    f(&mut w);
    candle_core::safetensors::save(&w, dir.join(WEIGHTS_FILE)).unwrap();
}

fn load_error(dir: &Path) -> String {
    checkpoint::load(dir, &Device::Cpu).unwrap_err().to_string()
}

#[test]
fn round_trip_reproduces_outputs() {
    for kind in ["sinusoidal", "learned", "t5"] {
        let (dir, cfg, before) = saved(kind);
        let loaded = checkpoint::load(dir.path(), &Device::Cpu).unwrap();
        assert_eq!(loaded.config, cfg);
        assert_eq!(
            max_abs_diff(&before, &outputs(&loaded.model)),
            0.0,
            "{kind}"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            leftovers.len(),
            2,
            "temporary files left behind: {leftovers:?}"
        );
    }
}

#[test]
fn tied_embeddings_share_one_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, _, _) = tiny(EncodingConfig::from_kind("sinusoidal").unwrap());
    cfg.tie_embeddings = true;
    let varmap = candle_nn::VarMap::new();
    let model = posenc_transformer::Transformer::new(
        &cfg,
        candle_nn::VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    checkpoint::save(dir.path(), &cfg, &varmap, Default::default()).unwrap();
    let names: Vec<String> = weights(dir.path()).into_keys().collect();
    assert!(names.contains(&"src_embed.weight".to_string()));
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("tgt_embed") || n == "generator.weight"),
        "{names:?}"
    );
    let loaded = checkpoint::load(dir.path(), &Device::Cpu).unwrap();
    assert_eq!(max_abs_diff(&outputs(&model), &outputs(&loaded.model)), 0.0);
    cfg.tgt_vocab_size = 21;
    let e = posenc_transformer::Transformer::new(
        &cfg,
        candle_nn::VarBuilder::from_varmap(&candle_nn::VarMap::new(), DType::F32, &Device::Cpu),
    )
    .unwrap_err();
    assert!(e.to_string().contains("joint vocabulary"), "{e}");
}

#[test]
fn missing_extra_misshaped_and_mistyped_tensors_are_all_named() {
    let (dir, _, _) = saved("sinusoidal");
    rewrite(dir.path(), |w| {
        w.remove("decoder.layers.1.linear2.bias").unwrap();
        w.insert(
            "encoder.layers.9.spare".into(),
            Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
        );
        w.insert(
            "encoder.norm.weight".into(),
            Tensor::zeros(15, DType::F32, &Device::Cpu).unwrap(),
        );
        let t = w["generator.bias"].to_dtype(DType::F16).unwrap();
        w.insert("generator.bias".into(), t);
    });
    let e = load_error(dir.path());
    for needle in [
        "missing tensor `decoder.layers.1.linear2.bias`",
        "unexpected tensor `encoder.layers.9.spare`",
        "`encoder.norm.weight` has shape [15], the model needs [16]",
        "`generator.bias` is F16, the model needs F32",
        WEIGHTS_FILE,
    ] {
        assert!(e.contains(needle), "{needle:?} not in: {e}");
    }
}

#[test]
fn corrupt_or_absent_files_are_named() {
    let (dir, _, _) = saved("sinusoidal");
    std::fs::write(
        dir.path().join(WEIGHTS_FILE),
        b"\x10\x00\x00\x00\x00\x00\x00\x00not json",
    )
    .unwrap();
    let e = load_error(dir.path());
    assert!(
        e.contains(WEIGHTS_FILE) && e.contains("not a readable safetensors file"),
        "{e}"
    );

    std::fs::write(
        dir.path().join(CONFIG_FILE),
        "{\"d_model\": 16, \"hedas\": 4}",
    )
    .unwrap();
    let e = load_error(dir.path());
    assert!(e.contains(CONFIG_FILE) && e.contains("hedas"), "{e}");

    std::fs::remove_file(dir.path().join(CONFIG_FILE)).unwrap();
    let e = load_error(dir.path());
    assert!(e.contains(CONFIG_FILE), "{e}");
}

#[test]
fn a_failed_save_keeps_the_previous_checkpoint() {
    let (dir, _, before) = saved("sinusoidal");
    // Block the temporary file the next save writes to, so it fails mid-way.
    let tmp = dir
        .path()
        .join(format!(".{WEIGHTS_FILE}.tmp-{}", std::process::id()));
    std::fs::create_dir(&tmp).unwrap();
    let (cfg, varmap, other) = tiny(EncodingConfig::from_kind("sinusoidal").unwrap());
    assert!(max_abs_diff(&before, &outputs(&other)) > 0.0);
    assert!(checkpoint::save(dir.path(), &cfg, &varmap, Default::default()).is_err());
    // The checkpoint already there is untouched and loads.
    let loaded = checkpoint::load(dir.path(), &Device::Cpu).unwrap();
    assert_eq!(max_abs_diff(&before, &outputs(&loaded.model)), 0.0);
}
