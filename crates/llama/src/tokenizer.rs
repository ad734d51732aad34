//! The byte-level BPE tokenizer a GGUF file describes (`tokenizer.ggml.*`), built as a
//! Hugging Face `tokenizer.json` for the `tokenizers` crate.
//!
//! GPT-2's scheme (Radford et al. 2019): text is split by a regular expression, each
//! piece's UTF-8 bytes are mapped to printable characters, and the merges join them in
//! rank order. `tokenizer.ggml.pre` names the splitting: `smollm` also splits every digit
//! on its own (as SmolLM2's own tokenizer and llama.cpp). Control and user-defined tokens
//! (`<|im_start|>`, …) are special: matched whole before splitting, never merged.

use crate::error::Result;
use posenc_error::{bail, ensure, invalid};
use serde_json::{json, Value};
use tokenizers::Tokenizer;

use crate::gguf::GgufFile;

/// `tokenizer.ggml.token_type` of control tokens.
const CONTROL: i64 = 3;
/// `tokenizer.ggml.token_type` of user-defined tokens.
const USER_DEFINED: i64 = 4;

/// The tokenizer of `file` as the JSON of a `tokenizer.json`.
///
/// # Errors
/// A model other than `gpt2` or an unknown `pre`, missing entries, or merges that are not
/// two tokens.
pub fn tokenizer_json(file: &GgufFile) -> Result<Value> {
    let model = file.string("tokenizer.ggml.model")?;
    ensure!(
        model == "gpt2",
        "tokenizer model `{model}` is not supported (only byte-level BPE, `gpt2`)"
    );
    let pre = if file.has_key("tokenizer.ggml.pre") {
        file.string("tokenizer.ggml.pre")?
    } else {
        "default"
    };
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true
    });
    let pre_tokenizer = match pre {
        "default" | "gpt-2" | "gpt2" => byte_level,
        "smollm" => json!({
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level],
        }),
        other => {
            bail!("tokenizer.ggml.pre = `{other}` is not supported (known: default, gpt-2, smollm)")
        }
    };
    let tokens = file.strings("tokenizer.ggml.tokens")?;
    let types = if file.has_key("tokenizer.ggml.token_type") {
        file.integers("tokenizer.ggml.token_type")?
    } else {
        vec![1; tokens.len()]
    };
    ensure!(
        types.len() == tokens.len(),
        "tokenizer.ggml.token_type has {} entries for {} tokens",
        types.len(),
        tokens.len()
    );
    let merges = file
        .strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| match m.split_once(' ') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => Ok(json!([a, b])),
            _ => bail!("tokenizer.ggml.merges has `{m}`, which is not two tokens"),
        })
        .collect::<Result<Vec<_>>>()?;
    let vocab: serde_json::Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), json!(i)))
        .collect();
    let added: Vec<Value> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, &ty))| ty == CONTROL || ty == USER_DEFINED)
        .map(|(id, (content, _))| {
            json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true,
            })
        })
        .collect();
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {
            "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true
        },
        "decoder": {
            "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true
        },
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": merges,
        },
    }))
}

/// The tokenizer of `file`.
///
/// # Errors
/// As [`tokenizer_json`]; also a vocabulary the `tokenizers` crate refuses.
pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
    let json = tokenizer_json(file)?;
    Ok(Tokenizer::from_bytes(serde_json::to_vec(&json)?)
        .map_err(|e| invalid!("building the tokenizer of {}: {e}", file.path().display()))?)
}
