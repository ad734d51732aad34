//! Word-level tokenizers, one per language, trained on the corpus with the `tokenizers`
//! crate and saved as `source.tokenizer.json` / `target.tokenizer.json`.

use std::path::Path;

use posenc_error::Context;
use posenc_train::error::Result;
use posenc_train::tokenize::word_level;
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
use tokenizers::{Model, Tokenizer};

/// Padding: ignored by the loss and masked in attention.
pub const PAD: &str = "<pad>";
/// Start of a target sequence.
pub const BOS: &str = "<s>";
/// End of a sequence.
pub const EOS: &str = "</s>";
/// An unknown word.
pub const UNK: &str = "<unk>";
/// The special tokens, with ids 0, 1, 2, 3.
pub const SPECIALS: [&str; 4] = [PAD, BOS, EOS, UNK];
/// Id of [`PAD`].
pub const PAD_ID: u32 = 0;
/// Id of [`BOS`].
pub const BOS_ID: u32 = 1;
/// Id of [`EOS`].
pub const EOS_ID: u32 = 2;

/// A word of the input the model cannot take: not in its vocabulary, or one of the
/// special tokens (which mark structure and are never typed).
#[derive(Debug, thiserror::Error)]
#[error("{} `{}` on line {line}: {}", if self.is_special() { "special token" } else { "unknown word" }, word.escape_debug(), self.why())]
pub struct UnknownWord {
    /// The word.
    pub word: String,
    /// 1-based line of the input.
    pub line: usize,
}

impl From<UnknownWord> for posenc_train::Error {
    fn from(e: UnknownWord) -> Self {
        Self::task(e)
    }
}

impl UnknownWord {
    fn is_special(&self) -> bool {
        SPECIALS.contains(&self.word.as_str())
    }

    fn why(&self) -> &'static str {
        if self.is_special() {
            "it marks padding, sentence ends or unknown words, and is not a word of the input"
        } else {
            "it is not in the model's vocabulary"
        }
    }
}

/// A sentence as the vocabulary spells it: lower case, punctuation dropped, single spaces
/// (the toy languages have neither capitals nor punctuation). Special tokens such as
/// `<pad>` pass through unchanged, so [`Vocab::encode`] can refuse them by name.
///
/// ```
/// use posenc_kotoba::vocab::normalize;
/// assert_eq!(normalize("  The dog chases the cat. "), "the dog chases the cat");
/// assert_eq!(normalize("the </s> dog"), "the </s> dog");
/// ```
pub fn normalize(sentence: &str) -> String {
    sentence
        .split_whitespace()
        .map(|w| {
            if SPECIALS.contains(&w) {
                w.to_string()
            } else {
                w.chars()
                    .filter(|c| !c.is_ascii_punctuation())
                    .flat_map(char::to_lowercase)
                    .collect()
            }
        })
        .filter(|w: &String| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The sentences of one line of English: split after each `.`, `!` or `?` that ends a
/// word, trimmed, empty ones dropped (`"the dog runs. the cat sleeps"` is two); a line
/// with none is one empty sentence.
pub fn sentences(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let ends = matches!(c, '.' | '!' | '?')
            && chars.peek().is_none_or(|&(_, next)| next.is_whitespace());
        if ends {
            parts.push(&line[start..i + c.len_utf8()]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&line[start..]);
    let parts: Vec<&str> = parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !normalize(p).is_empty())
        .collect();
    match parts.is_empty() {
        true => vec![""],
        false => parts,
    }
}

/// A whitespace word-level vocabulary.
#[derive(Clone)]
pub struct Vocab {
    tokenizer: Tokenizer,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vocab({} tokens)", self.len())
    }
}

impl Vocab {
    /// Trains a word-level tokenizer on `texts`, specials first.
    pub fn train<'a>(texts: impl Iterator<Item = &'a str> + Send) -> Result<Self> {
        let (mut tokenizer, mut trainer) = word_level(&SPECIALS, UNK)?;
        tokenizer.with_pre_tokenizer(Some(WhitespaceSplit));
        tokenizer
            .train(&mut trainer, texts)
            .map_err(posenc_train::Error::Tokenizer)?;
        let vocab = Self { tokenizer };
        for (i, s) in SPECIALS.iter().enumerate() {
            posenc_error::ensure!(
                vocab.id(s) == Some(i as u32),
                "special token {s} must have id {i}"
            );
        }
        Ok(vocab)
    }

    /// Loads a saved tokenizer.
    pub fn load(path: &Path) -> Result<Self> {
        let tokenizer = Tokenizer::from_file(path)
            .map_err(posenc_train::Error::Tokenizer)
            .with_context(|| format!("reading tokenizer {}", path.display()))?;
        Ok(Self { tokenizer })
    }

    /// The tokenizer as JSON (what [`Vocab::load`] reads).
    pub fn to_json(&self) -> Result<String> {
        Ok(self
            .tokenizer
            .to_string(true)
            .map_err(posenc_train::Error::Tokenizer)
            .context("serialising a tokenizer")?)
    }

    /// Saves it as JSON, atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        Ok(posenc_io::write_atomic(path, self.to_json()?.as_bytes())
            .with_context(|| format!("writing tokenizer {}", path.display()))?)
    }

    /// Number of tokens, specials included.
    pub fn len(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of a word.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.tokenizer.token_to_id(word)
    }

    /// The ids of a sentence; a word not in the vocabulary, or a special token, is an
    /// [`UnknownWord`] error.
    pub fn encode(&self, text: &str, line: usize) -> Result<Vec<u32>, UnknownWord> {
        text.split_whitespace()
            .map(|w| {
                let id = self.id(w).filter(|&i| i as usize >= SPECIALS.len());
                id.ok_or_else(|| UnknownWord {
                    word: w.to_string(),
                    line,
                })
            })
            .collect()
    }

    /// The ids of a sentence through the tokenizer itself (unknown words become `<unk>`).
    pub fn encode_lossy(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(posenc_train::Error::Tokenizer)?;
        Ok(enc.get_ids().to_vec())
    }

    /// The words of `ids`, stopping at `</s>` and skipping other specials.
    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .take_while(|&&i| i != EOS_ID)
            .filter(|&&i| i as usize >= SPECIALS.len())
            .filter_map(|&i| self.tokenizer.get_model().id_to_token(i))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::sentences;

    #[test]
    fn a_line_splits_after_each_sentence_end() {
        assert_eq!(
            sentences("the dog runs. the cat sleeps!  a bird sings?"),
            ["the dog runs.", "the cat sleeps!", "a bird sings?"]
        );
        // Not inside a word, nothing empty kept, and an empty line stays one sentence.
        assert_eq!(sentences("the dog.runs"), ["the dog.runs"]);
        assert_eq!(sentences("the dog runs. . "), ["the dog runs."]);
        assert_eq!(sentences(""), [""]);
        assert_eq!(sentences(" ... "), [""]);
    }
}
