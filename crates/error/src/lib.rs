//! # posenc-error: what the library crates' typed errors share
//!
//! Each library crate (`posenc-train`, `posenc-embed`, `posenc-llama`, `posenc-plot`) has
//! its own `Error` enum, built with `thiserror`, whose variants a caller can match: a
//! divergence, a checkpoint that does not fit, an I/O failure with its path, candle's own
//! errors. Two variants are common to all of them and live here:
//!
//! - [`Invalid`]: a cause stated in words (bad input, a file that is not what it should
//!   be), built by [`bail!`], [`ensure!`] and [`invalid!`];
//! - [`Contextual`]: what was being done when an error happened ("reading
//!   tokenizer.json"), with the error as its [`source`](std::error::Error::source), added by
//!   [`Context`].
//!
//! ```
//! use posenc_error::{ensure, Context, Contextual, Invalid};
//!
//! #[derive(Debug, thiserror::Error)]
//! enum Error {
//!     #[error(transparent)]
//!     Invalid(#[from] Invalid),
//!     #[error(transparent)]
//!     Context(#[from] Contextual),
//! }
//!
//! fn steps(text: &str) -> Result<usize, Error> {
//!     let n: usize = text.parse().context("reading --steps")?;
//!     ensure!(n > 0, "--steps must be at least 1, got {n}");
//!     Ok(n)
//! }
//!
//! assert_eq!(steps("3").unwrap(), 3);
//! assert_eq!(steps("0").unwrap_err().to_string(), "--steps must be at least 1, got 0");
//! let e = steps("x").unwrap_err();
//! assert_eq!(e.to_string(), "reading --steps: invalid digit found in string");
//! assert!(std::error::Error::source(&e).is_some());
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt::Display;

/// A cause stated in words: bad input, a file that is not what it should be, a size past
/// its limit. The message names the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// An error with what was being done when it happened: its message is the context, then
/// the error's own (`reading config.json: …`), and the error is its source too, for a report
/// that walks the chain.
#[derive(Debug, thiserror::Error)]
#[error("{context}{}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
pub struct Contextual {
    /// What was being done ("reading model.safetensors").
    pub context: String,
    /// The error that happened (none for a missing value: the context says what is missing).
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Adds the context an error happened in, as `anyhow::Context` does, but into the typed
/// [`Contextual`].
pub trait Context<T> {
    /// The error (or the missing value) with `context`.
    ///
    /// # Errors
    /// [`Contextual`], when `self` is an error or `None`.
    fn context<C: Display>(self, context: C) -> Result<T, Contextual>;

    /// As [`Context::context`], computing the context only on failure.
    ///
    /// # Errors
    /// [`Contextual`], when `self` is an error or `None`.
    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T, Contextual>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context<C: Display>(self, context: C) -> Result<T, Contextual> {
        self.with_context(|| context)
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T, Contextual> {
        self.map_err(|e| Contextual {
            context: f().to_string(),
            source: Some(Box::new(e)),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context<C: Display>(self, context: C) -> Result<T, Contextual> {
        self.with_context(|| context)
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T, Contextual> {
        self.ok_or_else(|| Contextual {
            context: f().to_string(),
            source: None,
        })
    }
}

/// An [`Invalid`] with a formatted message.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)+) => {
        $crate::Invalid(::std::format!($($arg)+))
    };
}

/// Returns an [`Invalid`] error (converted into the function's error type) with a
/// formatted message.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)+) => {
        return ::std::result::Result::Err($crate::invalid!($($arg)+).into())
    };
}

/// Returns an [`Invalid`] error with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            $crate::bail!($($arg)+);
        }
    };
}

/// The chain of `e` and its sources, outermost first.
pub fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}
