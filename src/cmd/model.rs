//! The causal language models the `lm` commands (and `generate`) take: a run directory of
//! `posenc lm train`, or a pretrained Llama-architecture model (`smollm2`, a GGUF file, a
//! directory written by `posenc convert`). Both are a [`LanguageModel`] on the same
//! blocks; they differ only in how they are loaded and tokenized.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::DType;
use posenc_llama::chat::ChatTemplate;
use posenc_llama::{Llama, Precision};
use posenc_lm::lm_run;
use posenc_lm::text_tokenizer;
use posenc_transformer::LanguageModel;
use tokenizers::Tokenizer;

use super::{DeviceArg, RopeScalingArg};

/// Which model, how to load it, and whether to stretch its rotary context.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A run directory of `posenc lm train`, `smollm2` (fetched by
    /// scripts/fetch_smollm2.sh), a .gguf file, or a directory written by `posenc convert`
    /// [default: `posenc generate`: smollm2; `posenc lm …`: the shipped
    /// models/shakespeare-alibi].
    #[arg(long)]
    model: Option<String>,
    /// Dequantize a GGUF's weights to f32 (exact, slower) instead of multiplying them
    /// quantized.
    #[arg(long)]
    f32: bool,
    /// The dtype of the key/value cache [default: f16 for a quantized GGUF, as llama.cpp's;
    /// f32 otherwise].
    #[arg(long, value_enum)]
    kv_cache: Option<CacheDtype>,
    /// Where to compute: cpu; cuda or cuda:N (built with --features cuda); metal or metal:N
    /// (--features metal).
    #[arg(long, default_value = "cpu")]
    device: DeviceArg,
    #[command(flatten)]
    rope_scaling: RopeScalingArg,
}

/// What `--kv-cache` keeps keys and values in.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum CacheDtype {
    /// 4 bytes a value: exact.
    F32,
    /// 2 bytes a value, rounded to 11 significant bits.
    F16,
}

impl From<CacheDtype> for DType {
    fn from(d: CacheDtype) -> Self {
        match d {
            CacheDtype::F32 => DType::F32,
            CacheDtype::F16 => DType::F16,
        }
    }
}

/// A loaded causal language model and what it needs around it.
pub struct CausalLm {
    /// The model, any `--rope-scaling` applied.
    pub model: LanguageModel,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The token that ends a generation, if the model has one.
    pub eos: Option<u32>,
    /// Its chat template, if it has one.
    pub chat: Option<ChatTemplate>,
    /// Trained by us: a character it never saw is refused in a prompt instead of
    /// becoming `<unk>`.
    ours: bool,
}

impl ModelArgs {
    /// The `--model` given, or `default`.
    pub fn spec<'a>(&'a self, default: &'a str) -> &'a str {
        self.model.as_deref().unwrap_or(default)
    }

    /// `--rope-scaling` as given.
    pub fn rope_scaling(&self) -> Option<&str> {
        self.rope_scaling.json()
    }

    /// Loads `--model` (or `default`).
    ///
    /// # Errors
    /// A model that does not exist or does not load, naming it; a bad `--rope-scaling`.
    pub fn load(&self, default: &str) -> Result<CausalLm> {
        let spec = self.spec(default);
        let path = PathBuf::from(spec);
        let mut lm = if is_run(&path) {
            let saved = lm_run::load(&path, &self.device.0)?;
            CausalLm {
                model: saved.model,
                tokenizer: saved.tokenizer,
                eos: None,
                chat: None,
                ours: true,
            }
        } else if spec == "smollm2" || path.exists() {
            let precision = match self.f32 {
                true => Precision::F32,
                false => Precision::Quantized,
            };
            let llama = Llama::load(spec, precision, &self.device.0)?;
            CausalLm {
                eos: llama.config.eos_token_id,
                model: llama.model,
                tokenizer: llama.tokenizer,
                chat: llama.chat,
                ours: false,
            }
        } else {
            bail!(
                "no model `{spec}`: give a run directory of `posenc lm train`, smollm2, a .gguf \
                 file, or a directory written by `posenc convert`"
            )
        };
        lm.model = self.rope_scaling.apply(lm.model)?;
        if let Some(dtype) = self.kv_cache {
            lm.model.keep_cache_as(dtype.into())?;
        }
        Ok(lm)
    }
}

/// Whether `path` is a run directory of ours (it has a manifest), not a converted model.
fn is_run(path: &Path) -> bool {
    path.join(posenc_train::rundir::MANIFEST).is_file()
}

/// `--model`'s default for the `lm` commands.
pub fn shipped() -> String {
    lm_run::shipped_model().display().to_string()
}

impl CausalLm {
    /// The ids of a prompt: a character our tokenizer never saw is an error naming it.
    ///
    /// # Errors
    /// Such a character; the tokenizer's own failure.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        Ok(match self.ours {
            true => text_tokenizer::encode_strict(&self.tokenizer, text)?,
            false => text_tokenizer::encode(&self.tokenizer, text)?,
        })
    }

    /// The ids of a text to measure: an unseen character is one more token to predict.
    ///
    /// # Errors
    /// The tokenizer's own failure.
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        Ok(text_tokenizer::encode(&self.tokenizer, text)?)
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        text_tokenizer::decode(&self.tokenizer, ids).context("decoding tokens")
    }

    /// The model's context and encoding, for table headings.
    pub fn describe(&self) -> String {
        let cfg = self.model.config();
        format!("{}, trained on L = {}", cfg.encoding.kind(), cfg.context)
    }
}
