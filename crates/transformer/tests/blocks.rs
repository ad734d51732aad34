//! The later variants of the blocks ([`BlockOptions`]) against their definitions:
//! grouped-query attention is attention with each key/value head repeated for its group,
//! RMSNorm is `x / √(mean(x²) + ε) · γ`, the gated feed-forward is
//! `(SiLU(x W_g) ⊙ x W_1) W_2`; the parameter count is the variables created; a model with
//! every option trains; quantized projections stay close to dense ones.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor, D};
use candle_nn::{Activation, Module, VarBuilder, VarMap};
use common::{max_abs, max_abs_diff};
use posenc::none::NoEncoding;
use posenc::EncodingConfig;
use posenc_transformer::attention::{AttentionInput, MultiHeadAttention};
use posenc_transformer::feed_forward::FeedForward;
use posenc_transformer::linear::{Proj, DEQUANTIZE_FROM_ROWS};
use posenc_transformer::sublayer::Norm;
use posenc_transformer::{BlockConfig, BlockOptions, Config, LanguageModel, LmConfig, NormKind};

fn llama_options(kv_heads: usize) -> BlockOptions {
    BlockOptions {
        kv_heads: Some(kv_heads),
        bias: false,
        norm: NormKind::RmsNorm,
        gated: true,
        scale_embeddings: false,
    }
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    posenc_testkit::uniform(shape, seed, -0.5, 0.5)
}

fn block(blocks: BlockOptions) -> BlockConfig {
    blocks_config(blocks).encoder_block()
}

fn blocks_config(blocks: BlockOptions) -> Config {
    Config {
        d_model: 16,
        heads: 4,
        d_ff: 24,
        dropout: 0.0,
        activation: Activation::Silu,
        blocks,
        ..Config::default()
    }
}

/// The grouped model loads `W^Q, W^K, W^V` apart (`q_proj`, `k_proj`, `v_proj`, as Hugging
/// Face holds them), the full one packed (`in_proj_weight`, as PyTorch): both loaders are
/// checked against each other too.
#[test]
fn grouped_query_attention_is_attention_with_repeated_key_value_heads() {
    let (d, heads, kv, head_dim) = (16, 4, 2, 4);
    let none = || -> Arc<dyn posenc::PositionalEncoding> {
        Arc::new(NoEncoding::new(head_dim, &Device::Cpu))
    };
    let q = randn(&[d, d], 1);
    let k = randn(&[kv * head_dim, d], 2);
    let v = randn(&[kv * head_dim, d], 3);
    let out = randn(&[d, d], 4);
    let grouped = {
        let vb = VarBuilder::from_tensors(
            HashMap::from([
                ("q_proj.weight".to_string(), q.clone()),
                ("k_proj.weight".to_string(), k.clone()),
                ("v_proj.weight".to_string(), v.clone()),
                ("out_proj.weight".to_string(), out.clone()),
            ]),
            DType::F32,
            &Device::Cpu,
        );
        MultiHeadAttention::new(&block(llama_options(kv)), Some(none()), vb).unwrap()
    };
    // Each key/value head repeated for the two query heads of its group: 0, 0, 1, 1.
    let repeat = |w: &Tensor| {
        let w = w.reshape((kv, 1, head_dim, d)).unwrap();
        let w = w.broadcast_as((kv, heads / kv, head_dim, d)).unwrap();
        w.contiguous()
            .unwrap()
            .reshape((heads * head_dim, d))
            .unwrap()
    };
    let full = {
        let packed = Tensor::cat(&[&q, &repeat(&k), &repeat(&v)], 0).unwrap();
        let vb = VarBuilder::from_tensors(
            HashMap::from([
                ("in_proj_weight".to_string(), packed),
                ("out_proj.weight".to_string(), out),
            ]),
            DType::F32,
            &Device::Cpu,
        );
        MultiHeadAttention::new(&block(llama_options(heads)), Some(none()), vb).unwrap()
    };
    let x = randn(&[2, 5, d], 5);
    let mask = posenc_transformer::Mask::causal(5, 5, 0, &Device::Cpu).unwrap();
    let input = || {
        AttentionInput::own(&x)
            .with_mask(Some(&mask))
            .with_weights()
    };
    let a = grouped.forward(input()).unwrap();
    let b = full.forward(input()).unwrap();
    let ((a, wa), (b, wb)) = (
        (a.output, a.weights.unwrap()),
        (b.output, b.weights.unwrap()),
    );
    assert_eq!(wa.dims(), &[2, heads, 5, 5]);
    assert!(max_abs_diff(&a, &b) < 1e-6, "{}", max_abs_diff(&a, &b));
    assert!(max_abs_diff(&wa, &wb) < 1e-6);
}

#[test]
fn kv_heads_must_divide_heads() {
    for bad in [0, 3] {
        let cfg = blocks_config(llama_options(bad));
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains("kv_heads") && e.contains(&bad.to_string()),
            "{e}"
        );
    }
}

#[test]
fn rms_norm_is_its_formula_in_both_paths() {
    let x = randn(&[3, 5, 16], 7);
    let w = (randn(&[16], 8) + 1.0).unwrap();
    let eps = 1e-5;
    let vb = VarBuilder::from_tensors(
        HashMap::from([("weight".to_string(), w.clone())]),
        DType::F32,
        &Device::Cpu,
    );
    let norm = Norm::with_kind(NormKind::RmsNorm, 16, eps, vb).unwrap();
    let mean_sq = x.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
    let expected = x
        .broadcast_div(&(mean_sq + eps).unwrap().sqrt().unwrap())
        .unwrap()
        .broadcast_mul(&w)
        .unwrap();
    // No gradient: candle's fused kernel.
    let fused = norm.forward(&x).unwrap();
    assert!(max_abs_diff(&fused, &expected) < 1e-5);
    // With a gradient: the differentiable composition.
    let var = candle_core::Var::from_tensor(&x).unwrap();
    let tracked = norm.forward(var.as_tensor()).unwrap();
    assert!(max_abs_diff(&tracked, &expected) < 1e-5);
    let grads = tracked.sum_all().unwrap().backward().unwrap();
    let g = grads.get(var.as_tensor()).expect("a gradient reaches x");
    assert_eq!(g.dims(), x.dims());
}

#[test]
fn gated_feed_forward_is_swiglu() {
    let (d, ff) = (16, 24);
    let (gate, up, down) = (
        randn(&[ff, d], 11),
        randn(&[ff, d], 12),
        randn(&[d, ff], 13),
    );
    let vb = VarBuilder::from_tensors(
        HashMap::from([
            ("gate.weight".to_string(), gate.clone()),
            ("linear1.weight".to_string(), up.clone()),
            ("linear2.weight".to_string(), down.clone()),
        ]),
        DType::F32,
        &Device::Cpu,
    );
    let ffn = FeedForward::new(&block(llama_options(4)), vb).unwrap();
    let x = randn(&[2, 3, d], 14);
    let xg = x.broadcast_matmul(&gate.t().unwrap()).unwrap();
    let silu = (&xg * candle_nn::ops::sigmoid(&xg).unwrap()).unwrap();
    let expected = (silu * x.broadcast_matmul(&up.t().unwrap()).unwrap())
        .unwrap()
        .broadcast_matmul(&down.t().unwrap())
        .unwrap();
    let got = ffn.forward(&x).unwrap();
    assert!(max_abs_diff(&got, &expected) < 1e-5);
}

/// A two-layer rotary language model with `blocks`, its variables created in a `VarMap`.
fn small_lm(
    vocab_size: usize,
    blocks: BlockOptions,
    tie: bool,
) -> (LmConfig, VarMap, LanguageModel) {
    let cfg = LmConfig {
        vocab_size,
        d_model: 16,
        heads: 4,
        d_ff: 24,
        layers: 2,
        activation: Activation::Silu,
        encoding: EncodingConfig::from_kind("rope").unwrap(),
        tie_embeddings: tie,
        blocks,
        ..LmConfig::default()
    };
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let model = LanguageModel::new(&cfg, vb).unwrap();
    (cfg, varmap, model)
}

fn count(varmap: &VarMap) -> u128 {
    let data = varmap.data().lock().unwrap();
    data.values()
        .map(|v| v.as_tensor().elem_count() as u128)
        .sum()
}

#[test]
fn parameter_count_is_the_variables_created() {
    for (blocks, tie) in [
        (BlockOptions::default(), true),
        (llama_options(2), true),
        (llama_options(1), false),
    ] {
        let (cfg, varmap, _) = small_lm(30, blocks.clone(), tie);
        assert_eq!(
            cfg.parameter_count(),
            count(&varmap),
            "{blocks:?}, tied {tie}"
        );
        if !blocks.bias {
            let data = varmap.data().lock().unwrap();
            let biases: Vec<&String> = data.keys().filter(|k| k.contains("bias")).collect();
            assert!(biases.is_empty(), "{biases:?}");
        }
    }
}

#[test]
fn a_model_with_every_option_trains() {
    let (_, varmap, model) = small_lm(12, llama_options(2), false);
    // Learn to repeat a fixed cycle: the loss must fall well below its start.
    let seq: Vec<u32> = (0..17).map(|i| (i * 5 % 12) as u32).collect();
    let x = Tensor::new(&seq[..16], &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let y = Tensor::new(&seq[1..], &Device::Cpu).unwrap();
    let mut opt = candle_nn::AdamW::new_lr(varmap.all_vars(), 1e-2).unwrap();
    let loss = |model: &LanguageModel| {
        let logits = model.logits(&x).unwrap().squeeze(0).unwrap();
        candle_nn::loss::cross_entropy(&logits, &y).unwrap()
    };
    let first = loss(&model).to_scalar::<f32>().unwrap();
    for _ in 0..60 {
        use candle_nn::Optimizer;
        opt.backward_step(&loss(&model)).unwrap();
    }
    let last = loss(&model).to_scalar::<f32>().unwrap();
    assert!(last < first * 0.2, "loss {first} → {last}");
}

#[test]
fn quantized_projections_stay_close_to_dense_ones() {
    let w = randn(&[64, 96], 21);
    let dense = Proj::new(w.clone(), Some(randn(&[64], 22)));
    let mut quantized = dense.clone();
    quantized
        .quantize(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap())
        .unwrap();
    assert!(quantized.weight().is_none(), "the dense weight is dropped");
    // Both paths: candle's quantized kernel for a few rows, dequantized GEMM for many.
    for rows in [1, 3, DEQUANTIZE_FROM_ROWS + 1] {
        let x = randn(&[rows, 96], 23 + rows as u64);
        let (a, b) = (dense.forward(&x).unwrap(), quantized.forward(&x).unwrap());
        let scale = max_abs(&a);
        let diff = max_abs_diff(&a, &b);
        assert!(diff < 0.02 * scale, "{rows} rows: {diff} of {scale}");
    }
    let e = quantized
        .clone()
        .quantize(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("already quantized"), "{e}");
    let mut other = dense.clone();
    let wrong = QTensor::quantize(&randn(&[32, 96], 30), GgmlDType::Q8_0).unwrap();
    let e = other.quantize(wrong).unwrap_err().to_string();
    assert!(e.contains("[32, 96]") && e.contains("[64, 96]"), "{e}");
}
