//! Writing a GGUF model as a Hugging Face directory: `model.safetensors` (dequantized to
//! f32, `W^Q` and `W^K` rows put back in Hugging Face's order), `config.json`,
//! `tokenizer.json` and `tokenizer_config.json` (with the chat template). transformers'
//! `LlamaForCausalLM.from_pretrained(DIR)` loads it, and so does [`crate::Llama::from_dir`].

use std::collections::HashMap;
use std::path::Path;

use crate::error::Result;
use candle_core::Device;
use posenc_error::{bail, Context};
use posenc_io::write_atomic;
use posenc_transformer::checkpoint::serialize;

use crate::gguf::GgufFile;
use crate::model::unpermute;
use crate::names::{Part, Weight};

/// Converts the GGUF `model` into the directory `out`. Everything is read and checked
/// before the first file is written, each file is written atomically, and an existing
/// model in `out` is refused rather than overwritten.
///
/// # Errors
/// What [`GgufFile`] refuses; `out` already holding a `model.safetensors`; a file that
/// cannot be written, naming it.
pub fn convert(model: &Path, out: &Path) -> Result<()> {
    let target = out.join("model.safetensors");
    if target.exists() {
        bail!(
            "{} already exists: give a new directory, the model there is left as it is",
            target.display()
        );
    }
    let device = Device::Cpu;
    let file = GgufFile::open(model)?;
    let config = file.config()?;
    config.lm_config(posenc::PairLayout::Halves)?;
    let tokenizer = crate::tokenizer::tokenizer_json(&file)?;
    let mut tensors = HashMap::new();
    for w in Weight::all(&config) {
        let dense = file
            .tensor(&w.gguf(), &w.shape(&config), &device)?
            .dequantize(&device)?;
        let dense = match w {
            Weight::Layer(_, Part::Q) => unpermute(&dense, config.num_attention_heads)?,
            Weight::Layer(_, Part::K) => unpermute(&dense, config.num_key_value_heads)?,
            _ => dense,
        };
        tensors.insert(w.hf(), dense.contiguous()?);
    }
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let weights = serialize(&tensors, metadata, &target)?;
    let token = |key: &str| -> Option<String> {
        let id = file.usize(key).ok()?;
        let tokens = file.strings("tokenizer.ggml.tokens").ok()?;
        tokens.get(id).map(|t| t.to_string())
    };
    let mut tokenizer_config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": token("tokenizer.ggml.eos_token_id"),
        "model_max_length": config.max_position_embeddings,
    });
    if file.has_key("tokenizer.chat_template") {
        tokenizer_config["chat_template"] = file.string("tokenizer.chat_template")?.into();
    }
    let json = |v: &serde_json::Value| serde_json::to_vec_pretty(v).map_err(crate::Error::from);
    let files = [
        ("config.json", json(&config.to_hf_json()?)?),
        ("tokenizer.json", json(&tokenizer)?),
        ("tokenizer_config.json", json(&tokenizer_config)?),
    ];
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, bytes) in &files {
        write_atomic(&out.join(name), bytes)?;
    }
    // The weights last: a directory with `model.safetensors` is a complete one.
    write_atomic(&target, &weights)?;
    Ok(())
}
