//! Any causal language model the commands take: a run directory of `posenc lm train`, or a
//! pretrained Llama-architecture model (`smollm2`, a GGUF file, a directory written by
//! `posenc convert`). Both are a [`LanguageModel`] on the same blocks; they differ only in
//! how they are loaded and tokenized.
//!
//! ```no_run
//! use posenc_lm::causal::CausalLm;
//! use posenc_llama::Precision;
//!
//! let lm = CausalLm::load("smollm2", Precision::Quantized, &candle_core::Device::Cpu)?;
//! let ids = lm.encode_prompt("To be, or not to be")?;
//! println!("{} tokens; {}", ids.len(), lm.describe());
//! # Ok::<(), posenc_lm::Error>(())
//! ```

use std::path::{Path, PathBuf};

use candle_core::Device;
use posenc_error::{bail, Context};
use posenc_llama::chat::ChatTemplate;
use posenc_llama::{Llama, Precision};
use posenc_transformer::LanguageModel;
use tokenizers::Tokenizer;

use crate::{run, text_tokenizer, Error, Result};

/// A loaded causal language model and what it needs around it.
pub struct CausalLm {
    /// The model.
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

impl CausalLm {
    /// Loads `spec` onto `device`: a run directory of ours, `smollm2`, a GGUF file, or a
    /// directory written by `posenc convert` (`precision` says how a GGUF's weights are
    /// multiplied).
    ///
    /// # Errors
    /// A model that does not exist or does not load, naming it.
    pub fn load(spec: &str, precision: Precision, device: &Device) -> Result<Self> {
        let path = PathBuf::from(spec);
        if is_run(&path) {
            let saved = run::load(&path, device)?;
            return Ok(Self {
                model: saved.model,
                tokenizer: saved.tokenizer,
                eos: None,
                chat: None,
                ours: true,
            });
        }
        if spec != "smollm2" && !path.exists() {
            bail!(
                "no model `{spec}`: give a run directory of `posenc lm train`, smollm2, a .gguf \
                 file, or a directory written by `posenc convert`"
            );
        }
        let llama = Llama::load(spec, precision, device).map_err(Error::task)?;
        Ok(Self {
            eos: llama.config.eos_token_id,
            model: llama.model,
            tokenizer: llama.tokenizer,
            chat: llama.chat,
            ours: false,
        })
    }

    /// The ids of a prompt: a character our tokenizer never saw is an error naming it.
    ///
    /// # Errors
    /// Such a character; the tokenizer's own failure.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        match self.ours {
            true => text_tokenizer::encode_strict(&self.tokenizer, text),
            false => text_tokenizer::encode(&self.tokenizer, text),
        }
    }

    /// The ids of a text to measure: an unseen character is one more token to predict.
    ///
    /// # Errors
    /// The tokenizer's own failure.
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        text_tokenizer::encode(&self.tokenizer, text)
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(text_tokenizer::decode(&self.tokenizer, ids).context("decoding tokens")?)
    }

    /// The model's encoding and trained context, for table headings.
    pub fn describe(&self) -> String {
        let cfg = self.model.config();
        format!("{}, trained on L = {}", cfg.encoding.kind(), cfg.context)
    }
}

/// Whether `path` is a run directory of ours (it has a manifest), not a converted model.
pub fn is_run(path: &Path) -> bool {
    path.join(posenc_train::rundir::MANIFEST).is_file()
}
