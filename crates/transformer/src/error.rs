//! Errors of the Transformer crate, each naming its cause.

use std::path::PathBuf;

/// What can go wrong building, running, saving or loading a Transformer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is inconsistent.
    #[error("invalid transformer config: {0}")]
    Config(String),
    /// An input tensor has the wrong rank, size or values.
    #[error("bad input: {0}")]
    Input(String),
    /// A checkpoint does not fit the model: every problem is listed.
    #[error("checkpoint {} does not fit the model: {}", path.display(), problems.join("; "))]
    Checkpoint {
        /// The file read.
        path: PathBuf,
        /// Missing, extra, mis-shaped or mistyped tensors.
        problems: Vec<String>,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A config file does not parse.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// From the positional encoding.
    #[error(transparent)]
    Encoding(#[from] posenc::Error),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl From<posenc_io::FileError> for Error {
    fn from(e: posenc_io::FileError) -> Self {
        Self::Io {
            path: e.path,
            source: e.source,
        }
    }
}
