//! The language model's two tokenizations of running text, both `tokenizers` tokenizers
//! (saved as `tokenizer.json`) trained on the train split only:
//!
//! - **characters**: one token per character seen in training, `<unk>` for any other
//!   (nanoGPT's `shakespeare_char`);
//! - **byte-level BPE** (GPT-2's): the 256 bytes plus `merges` learned merges, so any text,
//!   seen or not, encodes and decodes back exactly.

use posenc_error::ensure;
use posenc_train::error::Result;
use serde::{Deserialize, Serialize};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{SplitDelimiterBehavior, Tokenizer};

/// The unknown character of the character tokenizer.
pub const UNK: &str = "<unk>";

/// Which tokenization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", deny_unknown_fields)]
pub enum TextTokenizer {
    /// One token per character.
    Char,
    /// Byte-level BPE with this many merges.
    Bpe {
        /// Merges learned on top of the 256 bytes.
        merges: usize,
    },
}

impl TextTokenizer {
    /// In words: "characters" or "BPE, N merges".
    pub fn describe(&self) -> String {
        match self {
            Self::Char => "characters".to_string(),
            Self::Bpe { merges } => format!("BPE, {merges} merges"),
        }
    }

    /// Trains the tokenizer on `text`.
    ///
    /// # Errors
    /// An empty text, or more merges than [`posenc::limits::MAX_POSITIONS`].
    pub fn train(self, text: &str) -> Result<Tokenizer> {
        ensure!(!text.is_empty(), "cannot train a tokenizer on empty text");
        let lines = || text.split_inclusive('\n');
        match self {
            Self::Char => {
                let (mut tokenizer, mut trainer) = posenc_train::tokenize::word_level(&[UNK], UNK)?;
                // Every character, newlines included, is a piece of its own.
                let every_char = Split::new(
                    SplitPattern::Regex("(?s).".into()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map_err(posenc_train::Error::Tokenizer)?;
                tokenizer.with_pre_tokenizer(Some(every_char));
                tokenizer.with_decoder(Some(Fuse::new()));
                tokenizer
                    .train(&mut trainer, lines())
                    .map_err(posenc_train::Error::Tokenizer)?;
                Ok(tokenizer)
            }
            Self::Bpe { merges } => {
                posenc::limits::check("merges", merges, posenc::limits::MAX_POSITIONS)?;
                let alphabet = ByteLevel::alphabet();
                let mut trainer: TrainerWrapper = BpeTrainer::builder()
                    .vocab_size(alphabet.len() + merges)
                    .min_frequency(2)
                    .initial_alphabet(alphabet.into_iter().collect())
                    .show_progress(false)
                    .build()
                    .into();
                let mut tokenizer = Tokenizer::new(BPE::default());
                tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
                tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
                tokenizer
                    .train(&mut trainer, lines())
                    .map_err(posenc_train::Error::Tokenizer)?;
                Ok(tokenizer)
            }
        }
    }
}

/// The ids of `text`; a character the character tokenizer never saw becomes `<unk>`
/// (right for measuring a corpus, where it is one more token to predict).
pub fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    Ok(tokenizer
        .encode_fast(text, false)
        .map_err(posenc_train::Error::Tokenizer)?
        .get_ids()
        .to_vec())
}

/// The ids of `text`, refusing a character the tokenizer cannot represent (right for a
/// prompt, where `<unk>` would silently change what the user asked).
///
/// # Errors
/// Names the first unknown character and its place.
pub fn encode_strict(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let encoding = tokenizer
        .encode(text, false)
        .map_err(posenc_train::Error::Tokenizer)?;
    if let Some(unk) = tokenizer.token_to_id(UNK) {
        if let Some(i) = encoding.get_ids().iter().position(|&id| id == unk) {
            let (start, end) = encoding.get_offsets()[i];
            let what = text.get(start..end).unwrap_or("?");
            posenc_error::bail!(
                "the model's tokenizer has no token for {what:?} (character {} of the prompt): \
                 it knows only the characters of its training text",
                text[..start.min(text.len())].chars().count() + 1
            );
        }
    }
    Ok(encoding.get_ids().to_vec())
}

/// The text of `ids`.
pub fn decode(tokenizer: &Tokenizer, ids: &[u32]) -> Result<String> {
    tokenizer
        .decode(ids, false)
        .map_err(posenc_train::Error::Tokenizer)
}
