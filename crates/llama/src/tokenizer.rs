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
use tokenizers::models::bpe::BPE;
use tokenizers::{AddedToken, Tokenizer};

use crate::gguf::GgufFile;

/// `tokenizer.ggml.token_type` of control tokens.
const CONTROL: i64 = 3;
/// `tokenizer.ggml.token_type` of user-defined tokens.
const USER_DEFINED: i64 = 4;

/// What a GGUF file says of its tokenizer: a `tokenizer.json` without its three large
/// parts, and those parts.
struct Described {
    /// `tokenizer.json` with an empty vocabulary, no merges and no added tokens.
    shell: Value,
    tokens: Vec<String>,
    merges: Vec<(String, String)>,
    /// The control and user-defined tokens, by id.
    special: Vec<(usize, String)>,
}

/// Reads `file`'s tokenizer.
fn describe(file: &GgufFile) -> Result<Described> {
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
    let tokens: Vec<String> = file
        .strings("tokenizer.ggml.tokens")?
        .into_iter()
        .map(str::to_string)
        .collect();
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
            Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => {
                Ok((a.to_string(), b.to_string()))
            }
            _ => bail!("tokenizer.ggml.merges has `{m}`, which is not two tokens"),
        })
        .collect::<Result<Vec<_>>>()?;
    let special = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, &ty))| ty == CONTROL || ty == USER_DEFINED)
        .map(|(id, (content, _))| (id, content.clone()))
        .collect();
    let shell = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
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
            "ignore_merges": false, "vocab": {}, "merges": [],
        },
    });
    Ok(Described {
        shell,
        tokens,
        merges,
        special,
    })
}

/// The tokenizer of `file` as the JSON of a `tokenizer.json`.
///
/// # Errors
/// A model other than `gpt2` or an unknown `pre`, missing entries, or merges that are not
/// two tokens.
pub fn tokenizer_json(file: &GgufFile) -> Result<Value> {
    let Described {
        mut shell,
        tokens,
        merges,
        special,
    } = describe(file)?;
    let vocab: serde_json::Map<String, Value> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, json!(i)))
        .collect();
    shell["model"]["vocab"] = Value::Object(vocab);
    shell["model"]["merges"] = merges.into_iter().map(|(a, b)| json!([a, b])).collect();
    shell["added_tokens"] = special
        .into_iter()
        .map(|(id, content)| {
            json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true,
            })
        })
        .collect();
    Ok(shell)
}

/// The tokenizer of `file`: what [`tokenizer_json`] describes, with the vocabulary and
/// merges handed to the BPE model directly (as JSON they were most of the start-up).
///
/// # Errors
/// As [`tokenizer_json`]; also a vocabulary the `tokenizers` crate refuses.
pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
    let refused = |e: &dyn std::fmt::Display| {
        invalid!("building the tokenizer of {}: {e}", file.path().display())
    };
    let Described {
        shell,
        tokens,
        merges,
        special,
    } = describe(file)?;
    let mut tokenizer: Tokenizer = serde_json::from_value(shell).map_err(|e| refused(&e))?;
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| refused(&e))?;
    tokenizer.with_model(bpe);
    // Added after the model, so that each takes its id in the vocabulary.
    let special: Vec<AddedToken> = special
        .into_iter()
        .map(|(_, content)| AddedToken::from(content, true))
        .collect();
    tokenizer
        .add_special_tokens(special)
        .map_err(|e| refused(&e))?;
    Ok(tokenizer)
}
