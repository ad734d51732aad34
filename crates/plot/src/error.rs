//! Errors of the plotting crate, each naming its cause.

/// What can go wrong drawing a figure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cause stated in words: bad input, a file that is not what it should be, a size
    /// past its limit.
    #[error(transparent)]
    Invalid(#[from] posenc_error::Invalid),
    /// An error, with what was being done when it happened (reading a file, say).
    #[error(transparent)]
    Context(#[from] posenc_error::Contextual),
    /// plotters failed to draw (its own errors borrow the backend, so they are kept as text).
    #[error("drawing failed: {0}")]
    Draw(String),
    /// A file could not be saved, named with its cause.
    #[error(transparent)]
    File(#[from] posenc_io::FileError),
    /// From the positional encoding being drawn.
    #[error(transparent)]
    Encoding(#[from] posenc::Error),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
