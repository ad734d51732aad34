//! Helpers shared by the Transformer tests.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use posenc::EncodingConfig;
#[allow(unused_imports)]
pub use posenc_testkit::{max_abs, max_abs_diff};
use posenc_transformer::{Config, LanguageModel, LmConfig, Transformer};

pub const PAD: u32 = 0;

/// The configuration of [`tiny`]: width 16, 4 heads, 2 + 2 layers, vocabularies of 20,
/// dropout 0.
pub fn tiny_config(encoding: EncodingConfig) -> Config {
    Config {
        src_vocab_size: 20,
        tgt_vocab_size: 20,
        d_model: 16,
        heads: 4,
        d_ff: 32,
        encoder_layers: 2,
        decoder_layers: 2,
        dropout: 0.0,
        encoding: encoding.into(),
        ..Config::default()
    }
}

/// A tiny model with the given encoding, dropout 0.
pub fn tiny(encoding: EncodingConfig) -> (Config, VarMap, Transformer) {
    let cfg = tiny_config(encoding);
    let varmap = VarMap::new();
    let model = Transformer::new(
        &cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    (cfg, varmap, model)
}

/// The same model with plain (non-variable) weights: inference takes the fused kernels.
pub fn frozen(cfg: &Config, varmap: &VarMap) -> Transformer {
    Transformer::frozen(cfg, varmap, &Device::Cpu).unwrap()
}

pub fn ids(rows: &[&[u32]]) -> Tensor {
    let len = rows[0].len();
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), len), &Device::Cpu).unwrap()
}

/// Every kind whose model is deterministic given its weights and positions.
pub fn all_encodings() -> Vec<EncodingConfig> {
    EncodingConfig::kinds()
        .iter()
        .map(|k| EncodingConfig::from_kind(k).unwrap())
        .collect()
}

/// A tiny decoder-only model (vocabulary 30, width 16, 4 heads, 2 layers) trained for
/// `context` positions, with frozen weights (inference takes the fused kernels, as
/// generation does), and the variables it was created with.
pub fn tiny_lm(encoding: EncodingConfig, context: usize) -> (LanguageModel, VarMap) {
    let cfg = tiny_lm_config(encoding, context);
    let varmap = lm_weights(&cfg);
    let frozen = LanguageModel::frozen(&cfg, &varmap, &Device::Cpu).unwrap();
    (frozen, varmap)
}

/// The configuration of [`tiny_lm`].
pub fn tiny_lm_config(encoding: EncodingConfig, context: usize) -> LmConfig {
    LmConfig {
        vocab_size: 30,
        d_model: 16,
        heads: 4,
        d_ff: 32,
        layers: 2,
        encoding,
        context,
        ..LmConfig::default()
    }
}

/// Fresh weights of a language model of `cfg`, f32 on the CPU.
pub fn lm_weights(cfg: &LmConfig) -> VarMap {
    let varmap = VarMap::new();
    LanguageModel::new(
        cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    // Encoding weights that start at zero (CoPE's embeddings) would hide what they do:
    // give them values, as training would.
    for (name, var) in varmap.data().lock().unwrap().iter() {
        let zero = var.as_tensor().abs().unwrap().max_all().unwrap();
        if name.starts_with("encoding.") && zero.to_scalar::<f32>().unwrap() == 0.0 {
            let values = Tensor::randn(0f32, 0.5, var.shape(), &Device::Cpu).unwrap();
            var.set(&values).unwrap();
        }
    }
    varmap
}

/// Attention with the encoding `kind` as a fixture names it: case `name`'s projections
/// (`{name}.q_proj.weight`, …, loaded apart, no biases) and the encoding's weights
/// (`{name}.encoding.*`), all in a `VarMap`, over `heads` heads; the mask causal for the
/// case `"causal"`, else `{name}.keep`'s padding.
pub fn fixture_attention(
    f: &std::collections::HashMap<String, Tensor>,
    name: &str,
    kind: &str,
    heads: usize,
) -> (
    posenc_transformer::attention::MultiHeadAttention,
    VarMap,
    posenc_transformer::Mask,
) {
    use posenc::{Direction, Target};
    use posenc_transformer::{attention::MultiHeadAttention, BlockConfig, Mask};
    let x = &f[&format!("{name}.x")];
    let (_, n, d_model) = x.dims3().unwrap();
    let causal = name == "causal";
    let direction = match causal {
        true => Direction::Causal,
        false => Direction::Bidirectional,
    };
    // The weights as the fixture names them, so the projections load apart (`q_proj`, …).
    let varmap = VarMap::new();
    for key in ["q_proj", "k_proj", "v_proj", "out_proj"].map(|p| format!("{p}.weight")) {
        let t = &f[&format!("{name}.{key}")];
        varmap
            .get(
                t.shape(),
                &key,
                candle_nn::init::ZERO,
                DType::F32,
                &Device::Cpu,
            )
            .unwrap();
    }
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let target = Target::new(d_model, heads, direction).unwrap();
    let encoding = EncodingConfig::from_kind(kind)
        .unwrap()
        .build(&target, vb.pp("encoding"))
        .unwrap();
    let cfg = BlockConfig {
        bias: false,
        ..BlockConfig::new(d_model, heads, 4 * d_model)
    };
    let mha = MultiHeadAttention::new(&cfg, Some(encoding), vb).unwrap();
    for (key, var) in varmap.data().lock().unwrap().iter() {
        var.set(&f[&format!("{name}.{key}")]).unwrap();
    }
    let mask = match causal {
        true => Mask::causal(n, n, 0, &Device::Cpu).unwrap(),
        false => Mask::from_keep(&f[&format!("{name}.keep")]).unwrap(),
    };
    (mha, varmap, mask)
}

/// The variable `name` of `varmap`.
pub fn var(varmap: &VarMap, name: &str) -> candle_core::Var {
    varmap.data().lock().unwrap()[name].clone()
}

/// The tensors of `tests/fixtures/{name}.safetensors`, made by the script its test names.
pub fn fixtures(name: &str) -> std::collections::HashMap<String, Tensor> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/{name}.safetensors"));
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

/// Self-attention of `x` under `mask`, all positions at once, with its weights.
pub fn attend_whole(
    mha: &posenc_transformer::attention::MultiHeadAttention,
    x: &Tensor,
    mask: &posenc_transformer::Mask,
) -> posenc_transformer::attention::Attended {
    use posenc_transformer::attention::AttentionInput;
    mha.forward(AttentionInput::own(x).with_mask(Some(mask)).with_weights())
        .unwrap()
}
