//! Every fused kernel in `ops` runs on the CPU in f32 only; elsewhere (a GPU, another
//! dtype) the one place that picks it takes candle's differentiable composition instead
//! (docs/gpu/README.md: "Where each op runs"). These tests run the same weights three ways and ask for
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

use crate::common;

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

/// The variables of `varmap`, by name.
fn vars(varmap: &VarMap) -> Vec<(String, Var)> {
    let data = varmap.data().lock().unwrap();
    data.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
}

/// Gives the variables of `target` the values of `source`'s of the same name, as their
/// own dtype and device: the same weights as variables of their own, so that gradients
/// reach them.
fn copy_weights(source: &VarMap, target: &VarMap) {
    let source = source.data().lock().unwrap();
    for (name, var) in target.data().lock().unwrap().iter() {
        let t = source[name].as_tensor();
        var.set(
            &t.to_dtype(var.dtype())
                .unwrap()
                .to_device(var.device())
                .unwrap(),
        )
        .unwrap();
    }
}

/// `loss` and the gradient of each of `vars` by name (every one must have one).
fn loss_and_grads(loss: Tensor, vars: &[(String, Var)]) -> (Tensor, HashMap<String, Tensor>) {
    let grads = loss.backward().unwrap();
    let named = vars
        .iter()
        .map(|(n, v)| {
            let g = grads.get(v);
            (
                n.clone(),
                g.unwrap_or_else(|| panic!("∂/∂{n}: no gradient")).clone(),
            )
        })
        .collect();
    (loss, named)
}

/// Asserts the loss and every gradient of `got` are those of `want` (the kernels' f32).
fn assert_same_grads(
    what: &str,
    got: &(Tensor, HashMap<String, Tensor>),
    want: &(Tensor, HashMap<String, Tensor>),
) {
    let loss = max_abs_diff(&got.0, &want.0);
    assert!(loss < 1e-5, "{what}: the loss differs by {loss}");
    for (name, g) in &want.1 {
        let diff = max_abs_diff(&got.1[name], g);
        assert!(diff < 1e-4, "{what}: ∂/∂{name} differs by {diff}");
    }
}

/// A gradient flows through the composition as through the fused backward: the same loss
/// and the same gradient of every weight, f64 on the CPU (and f32 on a GPU) against the
/// kernels' f32.
#[test]
fn gradients_are_the_same_off_the_kernels() {
    let (cfg, varmap, model) = tiny(EncodingConfig::from_kind("rope").unwrap());
    let run = |model: &Transformer, vars: &[(String, Var)], device: &Device| {
        let src = ids(&[&[3, 4, 5, 6], &[7, 8, PAD, PAD]], device);
        let tgt = ids(&[&[1, 3, 4], &[1, 7, PAD]], device);
        let src_mask = Mask::padding(&src, PAD).unwrap();
        let tgt_mask = Transformer::target_mask(&tgt, PAD).unwrap();
        let out = model
            .forward(&src, &tgt, Some(&src_mask), Some(&tgt_mask))
            .unwrap();
        loss_and_grads(out.sqr().unwrap().mean_all().unwrap(), vars)
    };
    let want = run(&model, &vars(&varmap), &Device::Cpu);
    for (dtype, device) in elsewhere() {
        let other_map = VarMap::new();
        let other =
            Transformer::new(&cfg, VarBuilder::from_varmap(&other_map, dtype, &device)).unwrap();
        copy_weights(&varmap, &other_map);
        let got = run(&other, &vars(&other_map), &device);
        assert_same_grads(&format!("{dtype:?} on {device:?}"), &got, &want);
    }
}

/// The same for the language model with every encoding, the learned ones' weights
/// included: a score bias (ALiBi, T5, Kerple, FIRE), the rotation, CoPE's gates. A GPU
/// runs this composition when it trains; a weight it leaves without its gradient would
/// train there as if it were not in the model.
#[test]
fn language_model_gradients_are_the_same_off_the_kernels() {
    for encoding in all_encodings() {
        let kind = encoding.kind().to_string();
        let cfg = tiny_lm_config(encoding, 16);
        let varmap = lm_weights(&cfg);
        let run = |model: &LanguageModel, vars: &[(String, Var)], device: &Device| {
            let x = ids(
                &[&[3, 7, 1, 4, 9, 2, 8, 5], &[6, 11, 12, 13, 3, 2, 1, 0]],
                device,
            );
            // The same draws in every run (Abacus draws its offset while training).
            posenc_transformer::dropout::seed(0, 0);
            let logits = model.logits(&x).unwrap();
            loss_and_grads(logits.sqr().unwrap().mean_all().unwrap(), vars)
        };
        // Over the same variables: the kernels' f32, with gradients.
        let model = LanguageModel::new(
            &cfg,
            VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
        )
        .unwrap();
        let want = run(&model, &vars(&varmap), &Device::Cpu);
        for (dtype, device) in elsewhere() {
            let other_map = VarMap::new();
            let other =
                LanguageModel::new(&cfg, VarBuilder::from_varmap(&other_map, dtype, &device))
                    .unwrap();
            copy_weights(&varmap, &other_map);
            let got = run(&other, &vars(&other_map), &device);
            assert_same_grads(&format!("{kind}: {dtype:?} on {device:?}"), &got, &want);
        }
    }
}
