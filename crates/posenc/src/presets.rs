//! Presets: the positions of today's model families, by name, accepted wherever a kind is
//! (`--encoding llama4`, `encoding show --kind gpt-oss`).
//!
//! A preset is data, not code: the fields of a family's published `config.json` that place
//! positions, read by [`crate::hf::HfPositions`] as any config is, and cut to the shortest
//! pattern of layers that repeats. What each gives:
//!
//! | preset | from | each layer |
//! |---|---|---|
//! | `llama4` | Llama 4 Scout | three of RoPE (base 500 000, Llama 3 scaling ×16, neighbours paired) in chunks of 8 192, then a weightless RMS norm of queries and keys; the fourth without position over everything, with the attention temperature (0.1, every 8 192) |
//! | `gpt-oss` | gpt-oss-20b | YaRN ×32 on RoPE (base 150 000) and a learned sink on every layer; a window of 128 on every other layer, from the first |
//! | `gemma3` | Gemma 3 4B | five of RoPE (base 10 000) in a window of 1 024, then one of RoPE (base 1 000 000, positions ÷ 8) over everything |
//! | `rnope-swa` | Cohere's Command R7B (`Cohere2Config`'s defaults) | three of RoPE (base 10 000, neighbours paired) in a window of 4 096, then one without position over everything (Yang et al. 2025) |
//!
//! Windows and bases are the released models'; in a small model trained on short
//! sequences a window or a chunk wider than the context is full attention. A preset takes
//! no settings: to change one,
//! write out its config ([`crate::EncodingConfig::to_json`]) and change that.
//! `crates/posenc/tests/presets.rs` checks each against what transformers' config classes
//! and attention code make of the same fields.

use serde_json::Value;

use crate::hf::HfPositions;
use crate::{EncodingConfig, Error, Result};

/// A named family's positions.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// Its name, as a kind is written.
    pub name: &'static str,
    /// The model whose config it is.
    pub from: &'static str,
    /// The fields of that `config.json` that place positions, as JSON.
    pub config: &'static str,
}

/// Every preset, in the order of the book.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "llama4",
        from: "meta-llama/Llama-4-Scout-17B-16E",
        config: r#"{"model_type": "llama4_text", "hidden_size": 5120, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 48,
            "max_position_embeddings": 10485760, "rope_theta": 500000.0,
            "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "no_rope_layers": [], "use_qk_norm": true, "rms_norm_eps": 1e-05,
            "attn_temperature_tuning": true, "attn_scale": 0.1, "floor_scale": 8192,
            "attention_chunk_size": 8192}"#,
    },
    Preset {
        name: "gpt-oss",
        from: "openai/gpt-oss-20b",
        config: r#"{"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64,
            "head_dim": 64, "num_key_value_heads": 8, "num_hidden_layers": 24,
            "max_position_embeddings": 131072, "rope_theta": 150000,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                             "original_max_position_embeddings": 4096, "rope_type": "yarn",
                             "truncate": false},
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                "full_attention", "sliding_attention", "full_attention", "sliding_attention",
                "full_attention", "sliding_attention", "full_attention", "sliding_attention",
                "full_attention", "sliding_attention", "full_attention", "sliding_attention",
                "full_attention", "sliding_attention", "full_attention", "sliding_attention",
                "full_attention", "sliding_attention", "full_attention", "sliding_attention",
                "full_attention"]}"#,
    },
    Preset {
        name: "gemma3",
        from: "google/gemma-3-4b-it",
        config: r#"{"model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8,
            "head_dim": 256, "num_key_value_heads": 4, "num_hidden_layers": 34,
            "max_position_embeddings": 131072, "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024, "sliding_window_pattern": 6}"#,
    },
    Preset {
        name: "rnope-swa",
        from: "CohereForAI/c4ai-command-r7b-12-2024 (transformers' Cohere2Config defaults)",
        config: r#"{"model_type": "cohere2", "hidden_size": 8192, "num_attention_heads": 64,
            "num_hidden_layers": 40, "max_position_embeddings": 8192, "rope_theta": 10000.0,
            "rope_scaling": null, "sliding_window": 4096, "sliding_window_pattern": 4}"#,
    },
];

impl Preset {
    /// The preset named `name`, if there is one.
    pub fn named(name: &str) -> Option<&'static Preset> {
        PRESETS.iter().find(|p| p.name == name)
    }

    /// Its config, as JSON.
    pub fn config_json(&self) -> Value {
        serde_json::from_str(self.config).expect("a preset's config is JSON")
    }

    /// Each layer's encoding, read from the config as [`HfPositions`] reads any.
    ///
    /// # Errors
    /// None for the built-in presets; the reader's, for a config it refuses.
    pub fn positions(&self) -> Result<HfPositions> {
        HfPositions::from_config(&self.config_json())
            .map_err(|e| Error::Config(format!("preset `{}`: {e}", self.name)))
    }

    /// The encoding: the shortest pattern of layers that repeats over the model's, as a
    /// `layers` pattern, or the one encoding where every layer has the same.
    ///
    /// # Errors
    /// As [`Preset::positions`].
    pub fn encoding(&self) -> Result<EncodingConfig> {
        let layers = self.positions()?.layers;
        let n = layers.len();
        let period = (1..=n)
            .find(|&p| (0..n).all(|i| layers[i] == layers[i % p]))
            .unwrap_or(n);
        if period == 1 {
            return Ok(layers[0].clone());
        }
        let pattern: Vec<Value> = layers[..period]
            .iter()
            .map(EncodingConfig::to_json)
            .collect();
        serde_json::json!({"kind": "layers", "pattern": pattern})
            .to_string()
            .parse()
    }
}
