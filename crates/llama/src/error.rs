//! Errors of the Llama crate, each naming its cause.

/// What can go wrong reading a GGUF file, converting it, or loading and running a Llama model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cause stated in words: bad input, a file that is not what it should be, a size
    /// past its limit.
    #[error(transparent)]
    Invalid(#[from] posenc_error::Invalid),
    /// An error, with what was being done when it happened (reading a file, say).
    #[error(transparent)]
    Context(#[from] posenc_error::Contextual),
    /// From the Transformer blocks (a checkpoint that does not fit, bad input).
    #[error(transparent)]
    Transformer(#[from] posenc_transformer::Error),
    /// From the positional encoding (rotary scaling).
    #[error(transparent)]
    Encoding(#[from] posenc::Error),
    /// A JSON file (config, tokenizer) does not parse or cannot be written.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A file could not be saved, named with its cause.
    #[error(transparent)]
    File(#[from] posenc_io::FileError),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
