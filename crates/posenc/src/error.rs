//! Errors of the encoding crate. Each variant names the cause in its message.

/// What can go wrong when building or applying a positional encoding.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The encoding pairs dimensions (sin/cos or a rotation plane) and needs an even width.
    #[error("the `{kind}` encoding needs an even dimension, got {dim} ({what})")]
    OddDimension {
        /// Encoding kind, as in the config.
        kind: &'static str,
        /// The offending width.
        dim: usize,
        /// Which width: `d_model`, `head_dim` or the rotated part of it.
        what: &'static str,
    },
    /// A width that must be positive was zero.
    #[error("the `{kind}` encoding needs {what} > 0, got 0")]
    Zero {
        /// Encoding kind, as in the config.
        kind: &'static str,
        /// Which quantity: `heads`, `d_model`, `max_positions`, ...
        what: &'static str,
    },
    /// A model size that must be positive was zero.
    #[error("{what} must be > 0, got 0")]
    ZeroSize {
        /// Which size: `heads`, `d_model`.
        what: &'static str,
    },
    /// A size is past its sane limit (see [`crate::limits`]).
    #[error("{what} = {value} is too large: the limit is {max}")]
    TooLarge {
        /// Which size.
        what: &'static str,
        /// The value given.
        value: usize,
        /// The largest allowed.
        max: usize,
    },
    /// An encoding with an end (a learned table's rows, the range xPos's scale fits in
    /// f32) was asked for a position past it.
    #[error(
        "position {position} is past the end of the `{kind}` encoding: it has max_positions = {max_positions} (positions 0..{max_positions})"
    )]
    PositionOutOfRange {
        /// Encoding kind, as in the config.
        kind: &'static str,
        /// The first position that does not fit.
        position: usize,
        /// The most positions the encoding takes (a learned table's rows, the end of a
        /// scale's range).
        max_positions: usize,
    },
    /// `d_model` is not a multiple of the head count, so heads cannot be formed.
    #[error("d_model = {d_model} is not divisible by heads = {heads}")]
    HeadsDontDivide {
        /// Model width.
        d_model: usize,
        /// Attention heads.
        heads: usize,
    },
    /// A configuration value is out of its domain, or the config does not parse.
    #[error("invalid encoding config: {0}")]
    Config(String),
    /// A tensor passed to a hook has the wrong rank or size.
    #[error("bad input to the `{kind}` encoding: {msg}")]
    Shape {
        /// Encoding kind, as in the config.
        kind: &'static str,
        /// What was expected and what came.
        msg: String,
    },
    /// An error from candle itself.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl From<Error> for candle_core::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Candle(e) => e,
            other => candle_core::Error::wrap(other),
        }
    }
}
