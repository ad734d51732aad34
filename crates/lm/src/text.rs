//! Generated tokens as text while they stream: whole characters only, and the stop texts
//! that end a generation, found as they appear.

use crate::causal::CausalLm;
use crate::Result;

/// Generated tokens turned into text as they come: a character split across tokens
/// (byte-level BPE) is held back until it is whole.
#[derive(Debug, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    shown: usize,
}

impl TextStream {
    /// The text `token` completes (empty while a character is still split).
    ///
    /// # Errors
    /// A token outside the vocabulary.
    pub fn push(&mut self, lm: &CausalLm, token: u32) -> Result<String> {
        self.ids.push(token);
        let text = lm.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') || text.len() < self.shown {
            return Ok(String::new());
        }
        let piece = text[self.shown..].to_string();
        self.shown = text.len();
        Ok(piece)
    }
}

/// The texts that end a generation (llama.cpp's reverse prompts, OpenAI's `stop`).
#[derive(Debug, Clone, Default)]
pub struct StopTexts {
    texts: Vec<String>,
}

impl StopTexts {
    /// The stop texts; empty ones are left out.
    pub fn new(texts: impl IntoIterator<Item = String>) -> Self {
        Self {
            texts: texts.into_iter().filter(|t| !t.is_empty()).collect(),
        }
    }

    /// The first stop text `text` holds, and where it starts, when its last `piece` bytes
    /// are new: only the end can newly hold one, so only the piece and what precedes it by
    /// less than the longest stop text are searched.
    pub fn find(&self, text: &str, piece: usize) -> Option<(usize, &str)> {
        let longest = self.texts.iter().map(String::len).max()?;
        let from = floor_boundary(text, text.len().saturating_sub(piece + longest));
        self.texts
            .iter()
            .filter_map(|t| {
                text[from..]
                    .find(t.as_str())
                    .map(|at| (from + at, t.as_str()))
            })
            .min()
    }

    /// Where `text` may be shown up to while it could still grow into a stop text: before
    /// the longest end of it that begins one (a stream that must not show its stop text
    /// holds the rest back).
    pub fn shown_up_to(&self, text: &str) -> usize {
        let begins = |at: usize| {
            let end = &text[at..];
            self.texts.iter().any(|t| t.starts_with(end))
        };
        // A longer end would hold a whole stop text, which `find` sees.
        let longest = self.texts.iter().map(String::len).max().unwrap_or(0);
        (floor_boundary(text, text.len().saturating_sub(longest))..text.len())
            .filter(|&at| text.is_char_boundary(at))
            .find(|&at| begins(at))
            .unwrap_or(text.len())
    }
}

/// The largest character boundary of `text` at or before `at`.
fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}
