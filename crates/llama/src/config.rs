//! A Llama-architecture model's sizes, as Hugging Face's `config.json` names them, and the
//! blocks' configuration they make.

use crate::error::Result;
use candle_nn::Activation;
use posenc::rope::RopeConfig;
use posenc::rope_scaling::RopeScaling;
use posenc::EncodingConfig;
use posenc::PairLayout;
use posenc_error::ensure;
use posenc_transformer::{BlockOptions, LmConfig, NormKind};
use serde::{Deserialize, Serialize};

/// The fields of a Hugging Face `LlamaConfig` this project reads and writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE's wavelength base θ.
    pub rope_theta: f64,
    /// The context the model was trained for.
    pub max_position_embeddings: usize,
    /// Whether the output head is the token embedding.
    pub tie_word_embeddings: bool,
    /// The feed-forward activation; Llama's is `silu`.
    pub hidden_act: String,
    /// Beginning-of-sequence token.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token: generation stops there.
    #[serde(default)]
    pub eos_token_id: Option<u32>,
    /// Context extension of the rotary encoding, as transformers' `rope_scaling` (or
    /// `rope_parameters`, whose `rope_theta` is read as the base above).
    #[serde(
        default,
        alias = "rope_parameters",
        deserialize_with = "rope_parameters",
        skip_serializing_if = "Option::is_none"
    )]
    pub rope_scaling: Option<RopeScaling>,
}

/// Transformers' `rope_scaling` or `rope_parameters`: `null`, or the settings, with the
/// `rope_theta` that newer configs keep there left out (the config's own `rope_theta` is
/// the base), and `"default"` meaning no scaling.
fn rope_parameters<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<RopeScaling>, D::Error> {
    let mut value = serde_json::Value::deserialize(d)?;
    if let Some(fields) = value.as_object_mut() {
        fields.remove("rope_theta");
        if fields.get("rope_type").or(fields.get("type")) == Some(&"default".into()) {
            return Ok(None);
        }
    }
    Option::<RopeScaling>::deserialize(value).map_err(serde::de::Error::custom)
}

impl LlamaConfig {
    /// The width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// The same model as this project's blocks: a pre-norm stack of RMSNorm, grouped-query
    /// attention without biases and SwiGLU, unscaled embeddings, and the `rope` encoding with
    /// pairs laid out as `layout` (interleaved on llama.cpp's rows, halves on Hugging Face's).
    ///
    /// # Errors
    /// An activation other than `silu`, or sizes the blocks refuse, naming the field.
    pub fn lm_config(&self, layout: PairLayout) -> Result<LmConfig> {
        ensure!(
            self.hidden_act == "silu",
            "unsupported hidden_act `{}` (Llama's is `silu`)",
            self.hidden_act
        );
        let cfg = LmConfig {
            vocab_size: self.vocab_size,
            d_model: self.hidden_size,
            heads: self.num_attention_heads,
            d_ff: self.intermediate_size,
            layers: self.num_hidden_layers,
            dropout: 0.0,
            activation: Activation::Silu,
            layer_norm_eps: self.rms_norm_eps,
            encoding: EncodingConfig::new(RopeConfig {
                base: self.rope_theta,
                layout,
                rotary_fraction: 1.0,
                position_scale: 1.0,
                scaling: self.rope_scaling.clone(),
            }),
            context: self.max_position_embeddings,
            tie_embeddings: self.tie_word_embeddings,
            blocks: BlockOptions {
                kv_heads: Some(self.num_key_value_heads),
                bias: false,
                norm: NormKind::RmsNorm,
                gated: true,
                scale_embeddings: false,
            },
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The `config.json` Hugging Face's `LlamaForCausalLM.from_pretrained` reads.
    pub fn to_hf_json(&self) -> Result<serde_json::Value> {
        let mut json = serde_json::to_value(self)?;
        let extra = serde_json::json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "head_dim": self.head_dim(),
            "attention_bias": false,
            "mlp_bias": false,
            "torch_dtype": "float32",
        });
        if let (Some(json), serde_json::Value::Object(extra)) = (json.as_object_mut(), extra) {
            json.extend(extra);
        }
        Ok(json)
    }
}
