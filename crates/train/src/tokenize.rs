//! Word-level tokenizers (the `tokenizers` crate's `WordLevel` model), which the tasks'
//! vocabularies build on.

use tokenizers::models::wordlevel::{WordLevel, WordLevelTrainer};
use tokenizers::{AddedToken, Tokenizer};

use crate::error::Result;
use posenc_error::invalid;

pub use tokenizers::models::TrainerWrapper;

/// An untrained word-level tokenizer whose unknown token is `unk`, and its trainer, which
/// puts `specials` first (ids 0, 1, …) and keeps every piece seen once or more.
///
/// # Errors
/// The `tokenizers` crate's, should it refuse the settings.
pub fn word_level(specials: &[&str], unk: &str) -> Result<(Tokenizer, TrainerWrapper)> {
    let trainer: TrainerWrapper = WordLevelTrainer::builder()
        .min_frequency(1)
        .special_tokens(
            specials
                .iter()
                .map(|s| AddedToken::from(*s, true))
                .collect(),
        )
        .show_progress(false)
        .build()
        .map_err(|e| invalid!("{e}"))?
        .into();
    let model = WordLevel::builder()
        .unk_token(unk.to_string())
        .build()
        .map_err(crate::Error::Tokenizer)?;
    Ok((Tokenizer::new(model), trainer))
}
