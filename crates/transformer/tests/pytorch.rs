//! Exact against PyTorch: `nn.Transformer` and `nn.MultiheadAttention` state dicts, saved
//! with PyTorch's own names by `scripts/make_transformer_fixtures.py`, reproduce PyTorch's
//! outputs to 1e-5.

use posenc_testkit::max_abs_diff;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Activation, VarBuilder, VarMap};
use posenc::none::NoEncoding;
use posenc::PositionalEncoding;
use posenc_transformer::attention::{AttentionInput, MultiHeadAttention, Source};
use posenc_transformer::checkpoint::load_into;
use posenc_transformer::stack::{Memory, StackInput};
use posenc_transformer::{BlockConfig, Config, Mask, Stack};

const TOL: f32 = 1e-5;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn io(name: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(&format!("{name}.io.safetensors")), &Device::Cpu)
        .unwrap()
}

fn none() -> Arc<dyn PositionalEncoding> {
    Arc::new(NoEncoding::new(16, &Device::Cpu))
}

fn parity(name: &str, norm_first: bool, activation: Activation) -> (f32, f32) {
    let cfg = Config {
        d_model: 16,
        heads: 4,
        d_ff: 32,
        encoder_layers: 2,
        decoder_layers: 2,
        dropout: 0.0,
        activation,
        norm_first,
        encoding: posenc::EncodingConfig::from_kind("none").unwrap().into(),
        ..Config::default()
    };
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let stack = |block: BlockConfig, layers, name| Stack::new(&block, layers, none(), vb.pp(name));
    let encoder = stack(cfg.encoder_block(), cfg.encoder_layers, "encoder").unwrap();
    let decoder = stack(cfg.decoder_block(), cfg.decoder_layers, "decoder").unwrap();
    load_into(&varmap, &fixture(&format!("{name}.safetensors"))).unwrap();

    let f = io(name);
    let src_mask = Mask::from_keep(&f["src_keep"]).unwrap();
    let tgt_len = f["tgt"].dim(1).unwrap();
    let tgt_mask = Mask::causal(tgt_len, tgt_len, 0, &Device::Cpu)
        .unwrap()
        .and(&Mask::from_keep(&f["tgt_keep"]).unwrap())
        .unwrap();
    let (memory, _) = encoder
        .forward(StackInput::new(&f["src"], Some(&src_mask)))
        .unwrap();
    let memory_input = Memory {
        states: &memory,
        mask: Some(&src_mask),
    };
    let (out, _) = decoder
        .forward(StackInput {
            memory: Some(memory_input),
            ..StackInput::new(&f["tgt"], Some(&tgt_mask))
        })
        .unwrap();
    (
        max_abs_diff(&memory, &f["memory"]),
        max_abs_diff(&out, &f["out"]),
    )
}

#[test]
fn nn_transformer_post_norm_relu() {
    let (memory, out) = parity("nn_transformer_post_norm", false, Activation::Relu);
    println!("post-norm: max |Δ| encoder {memory:e}, decoder {out:e}");
    assert!(
        memory < TOL && out < TOL,
        "encoder {memory:e}, decoder {out:e}"
    );
}

#[test]
fn nn_transformer_pre_norm_gelu() {
    let (memory, out) = parity("nn_transformer_pre_norm", true, Activation::Gelu);
    println!("pre-norm: max |Δ| encoder {memory:e}, decoder {out:e}");
    assert!(
        memory < TOL && out < TOL,
        "encoder {memory:e}, decoder {out:e}"
    );
}

#[test]
fn nn_multihead_attention() {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let mha = MultiHeadAttention::new(&BlockConfig::new(16, 4, 64), None, vb).unwrap();
    load_into(&varmap, &fixture("nn_multihead_attention.safetensors")).unwrap();
    let f = io("nn_multihead_attention");
    let (t, s) = (f["query"].dim(1).unwrap(), f["key"].dim(1).unwrap());
    let attn = Mask::new(f["attn_keep"].reshape((1, 1, t, s)).unwrap()).unwrap();
    let mask = attn.and(&Mask::from_keep(&f["key_keep"]).unwrap()).unwrap();
    let attended = mha
        .forward(AttentionInput {
            source: Source::KeysValues(&f["key"], &f["value"]),
            mask: Some(&mask),
            ..AttentionInput::own(&f["query"]).with_weights()
        })
        .unwrap();
    let (out, weights) = (attended.output, attended.weights.unwrap());
    let (d_out, d_w) = (
        max_abs_diff(&out, &f["out"]),
        max_abs_diff(&weights, &f["weights"]),
    );
    println!("multihead attention: max |Δ| output {d_out:e}, weights {d_w:e}");
    assert!(
        d_out < TOL && d_w < TOL,
        "output {d_out:e}, weights {d_w:e}"
    );
}
