//! Errors of the training core and the tasks built on it, each naming its cause.

use crate::stop::{Diverged, Interrupted};

/// What can go wrong generating data, training, resuming, evaluating or decoding. The
/// core's own causes are its variants; a task's own error travels as [`Error::Task`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cause stated in words: bad input, a file that is not what it should be, a size
    /// past its limit.
    #[error(transparent)]
    Invalid(#[from] posenc_error::Invalid),
    /// An error, with what was being done when it happened (reading a file, say).
    #[error(transparent)]
    Context(#[from] posenc_error::Contextual),
    /// The training loss stopped being finite; the last checkpoint before it stays on disk.
    #[error("{0}")]
    Diverged(#[from] Diverged),
    /// The run was stopped on request (Ctrl-C), its checkpoint saved.
    #[error("{0}")]
    Interrupted(#[from] Interrupted),
    /// A task's own error (a word outside a vocabulary, say), as the task made it: find
    /// it with [`posenc_error::chain`] and `downcast_ref`.
    #[error("{0}")]
    Task(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// From the `tokenizers` crate (building, training, encoding or decoding).
    #[error("tokenizer: {0}")]
    Tokenizer(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// From a caller's callback (a token sink, a data loader), passed through as it came.
    #[error("{0}")]
    Callback(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A file could not be saved, named with its cause.
    #[error(transparent)]
    File(#[from] posenc_io::FileError),
    /// A results or state file does not parse.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// From the Transformer (a checkpoint that does not fit, bad input).
    #[error(transparent)]
    Transformer(#[from] posenc_transformer::Error),
    /// From the positional encoding.
    #[error(transparent)]
    Encoding(#[from] posenc::Error),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
impl Error {
    /// A task's own error, as [`Error::Task`].
    pub fn task(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Task(e.into())
    }

    /// Any error of a caller's callback, as [`Error::Callback`].
    pub fn callback(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Callback(e.into())
    }

    /// The interruption this error comes from, if it does (under any context).
    pub fn interrupted(&self) -> Option<Interrupted> {
        posenc_error::chain(self).find_map(|e| e.downcast_ref::<Interrupted>().cloned())
    }

    /// The divergence this error comes from, if it does (under any context).
    pub fn diverged(&self) -> Option<Diverged> {
        posenc_error::chain(self).find_map(|e| e.downcast_ref::<Diverged>().copied())
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
