//! Every fused kernel in `ops` runs on the CPU in f32 only; elsewhere (a GPU, another
//! dtype) the one place that picks it takes candle's differentiable composition instead
//! (README: "Where each op runs"). These tests run the same weights three ways and ask for
//! the same outputs:
//! - f32 on the CPU: the fused kernels;
//! - f64 on the CPU: every dispatcher's other branch, the code a GPU runs, checked on any
//!   machine;
//! - f32 on each GPU that [`posenc_testkit::devices`] finds (with `--features cuda` on a
//!   machine that has one).
//!
//! Both models and both directions of attention: LayerNorm and RMSNorm, GELU and a gated
//! feed-forward, masks with padding and a fully padded query row, the training forward
//! (a gradient tracked), inference (frozen weights), and generation through the cache.

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::Activation;
use candle_nn::{VarBuilder, VarMap};
use common::*;
use posenc::EncodingConfig;
use posenc_transformer::{
    BlockOptions, Config, LanguageModel, LmConfig, Mask, NormKind, StackCache, Transformer,
};

/// The variables of `varmap` as `dtype` on `device`: the same weights, elsewhere.
fn weights(varmap: &VarMap, dtype: DType, device: &Device) -> VarBuilder<'static> {
    let tensors: HashMap<String, Tensor> = varmap
        .data()
        .lock()
        .unwrap()
        .iter()
        .map(|(name, var)| {
            let t = var.as_tensor().to_dtype(dtype).unwrap();
            (name.clone(), t.to_device(device).unwrap())
        })
        .collect();
    VarBuilder::from_tensors(tensors, dtype, device)
}

/// Where the same weights run: f64 on the CPU, then f32 on every GPU present.
fn elsewhere() -> Vec<(DType, Device)> {
    let gpus = posenc_testkit::devices().into_iter().skip(1);
    std::iter::once((DType::F64, Device::Cpu))
        .chain(gpus.map(|d| (DType::F32, d)))
        .collect()
}

fn ids(rows: &[&[u32]], device: &Device) -> Tensor {
    let width = rows[0].len();
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), width), device).unwrap()
}

/// The translation model (LayerNorm, post-norm, ReLU and GELU feed-forwards, padding
/// masks with a source row that is all padding), trained forward and frozen.
#[test]
fn the_translation_model_runs_the_same_off_its_kernels() {
    for (kind, activation) in [
        ("sinusoidal", Activation::Relu),
        ("t5", Activation::Gelu),
        ("alibi", Activation::Gelu),
    ] {
        let cfg = Config {
            activation,
            ..tiny_config(EncodingConfig::from_kind(kind).unwrap())
        };
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let trained = Transformer::new(&cfg, vb).unwrap();
        let run = |model: &Transformer, device: &Device| {
            let src = ids(&[&[3, 4, 5, 6], &[PAD, PAD, PAD, PAD]], device);
            let tgt = ids(&[&[1, 3, 4, 5, 6], &[1, 7, 8, PAD, PAD]], device);
            let src_mask = Mask::padding(&src, PAD).unwrap();
            let tgt_mask = Transformer::target_mask(&tgt, PAD).unwrap();
            model
                .logits(&src, &tgt, Some(&src_mask), Some(&tgt_mask))
                .unwrap()
        };
        let kernels = run(&trained, &Device::Cpu);
        let frozen = Transformer::frozen(&cfg, &varmap, &Device::Cpu).unwrap();
        assert!(max_abs_diff(&run(&frozen, &Device::Cpu), &kernels) < 1e-5);
        for (dtype, device) in elsewhere() {
            let other = Transformer::new(&cfg, weights(&varmap, dtype, &device)).unwrap();
            let out = run(&other, &device);
            assert_eq!(out.dtype(), dtype);
            let diff = max_abs_diff(&out, &kernels);
            assert!(
                diff < 1e-4,
                "{kind}, {activation:?}: {dtype:?} on {device:?} differs by {diff}"
            );
            assert!(out
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec3::<f32>()
                .unwrap()
                .iter()
                .flatten()
                .flatten()
                .all(|v| v.is_finite()));
        }
    }
}

/// The language model (RMSNorm, pre-norm, gated feed-forward, grouped-query attention,
/// RoPE or a score bias): its scores over a prompt, and then generation through the cache
/// (the tiled kernel on the CPU, the composition elsewhere).
#[test]
fn the_language_model_runs_the_same_off_its_kernels() {
    for kind in ["rope", "alibi", "cope"] {
        let cfg = LmConfig {
            activation: Activation::Silu,
            blocks: BlockOptions {
                kv_heads: Some(2),
                bias: false,
                norm: NormKind::RmsNorm,
                gated: true,
                scale_embeddings: false,
            },
            ..tiny_lm_config(EncodingConfig::from_kind(kind).unwrap(), 32)
        };
        let varmap = lm_weights(&cfg);
        let prompt = [3u32, 7, 1, 4, 9, 2, 8, 5, 6, 11, 12, 13];
        let run = |model: &LanguageModel, device: &Device| {
            let x = Tensor::new(&prompt[..], device)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let scores = model.logits(&x).unwrap();
            let mut cache = StackCache::default();
            let first = model.step(&x.narrow(1, 0, 8).unwrap(), &mut cache).unwrap();
            let mut steps = vec![first];
            for i in 8..prompt.len() {
                steps.push(model.step(&x.narrow(1, i, 1).unwrap(), &mut cache).unwrap());
            }
            (scores, Tensor::stack(&steps, 0).unwrap())
        };
        let frozen = LanguageModel::frozen(&cfg, &varmap, &Device::Cpu).unwrap();
        let (scores, steps) = run(&frozen, &Device::Cpu);
        for (dtype, device) in elsewhere() {
            let other = LanguageModel::new(&cfg, weights(&varmap, dtype, &device)).unwrap();
            let (s, t) = run(&other, &device);
            let (ds, dt) = (max_abs_diff(&s, &scores), max_abs_diff(&t, &steps));
            assert!(
                ds < 1e-4 && dt < 1e-4,
                "{kind}: {dtype:?} on {device:?} differs by {ds} (scores), {dt} (cached steps)"
            );
        }
    }
}

/// A gradient flows through the composition as through the fused backward: the same loss
/// and the same gradient of every weight, f64 on the CPU (and f32 on a GPU) against the
/// kernels' f32.
#[test]
fn gradients_are_the_same_off_the_kernels() {
    let (cfg, varmap, model) = tiny(EncodingConfig::from_kind("rope").unwrap());
    let grads_of = |model: &Transformer, vars: &[(String, Var)], device: &Device| {
        let src = ids(&[&[3, 4, 5, 6], &[7, 8, PAD, PAD]], device);
        let tgt = ids(&[&[1, 3, 4], &[1, 7, PAD]], device);
        let src_mask = Mask::padding(&src, PAD).unwrap();
        let tgt_mask = Transformer::target_mask(&tgt, PAD).unwrap();
        let loss = model
            .forward(&src, &tgt, Some(&src_mask), Some(&tgt_mask))
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap();
        let grads = loss.backward().unwrap();
        let named: HashMap<String, Tensor> = vars
            .iter()
            .map(|(n, v)| {
                (
                    n.clone(),
                    grads.get(v).expect("every weight has a gradient").clone(),
                )
            })
            .collect();
        (loss, named)
    };
    let vars = |m: &VarMap| -> Vec<(String, Var)> {
        m.data()
            .lock()
            .unwrap()
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    };
    let (loss, grads) = grads_of(&model, &vars(&varmap), &Device::Cpu);
    for (dtype, device) in elsewhere() {
        // The same weights as variables of their own, so that gradients reach them.
        let other_map = VarMap::new();
        let other =
            Transformer::new(&cfg, VarBuilder::from_varmap(&other_map, dtype, &device)).unwrap();
        for (name, var) in other_map.data().lock().unwrap().iter() {
            let source = varmap.data().lock().unwrap()[name].as_tensor().clone();
            var.set(&source.to_dtype(dtype).unwrap().to_device(&device).unwrap())
                .unwrap();
        }
        let (l, g) = grads_of(&other, &vars(&other_map), &device);
        assert!(
            max_abs_diff(&l, &loss) < 1e-5,
            "{dtype:?} on {device:?}: loss"
        );
        for (name, want) in &grads {
            let diff = max_abs_diff(&g[name], want);
            assert!(
                diff < 1e-4,
                "{dtype:?} on {device:?}: ∂/∂{name} differs by {diff}"
            );
        }
    }
}
