//! Sane upper bounds on sizes that come from users (flags, config files), checked before
//! anything is allocated, so an absurd value is an error naming it rather than an
//! out-of-memory abort.
//!
//! The bounds are far above any model this project trains or loads (the paper's big
//! model has `d_model` 1024 and 16 heads; Llama-3-70B 8192 and 64), and low enough that a
//! table they allow fits in memory.
//!
//! ```
//! use posenc::limits::{check, MAX_HEADS};
//! assert!(check("heads", 8, MAX_HEADS).is_ok());
//! let e = check("heads", 1_000_000_000, MAX_HEADS).unwrap_err().to_string();
//! assert!(e.contains("heads") && e.contains("1000000000") && e.contains("1024"));
//! ```

use crate::{Error, Result};

/// The widest model: `d_model` (and any other per-token width).
pub const MAX_D_MODEL: usize = 1 << 16;
/// The most attention heads.
pub const MAX_HEADS: usize = 1 << 10;
/// The most positions a sequence, a learned table or a bucket range may have.
pub const MAX_POSITIONS: usize = 1 << 20;
/// The most positions of a table drawn or printed whole: figures and printed tables hold
/// `len × len` interactions.
pub const MAX_TABLE_LEN: usize = 1 << 12;

/// `Ok` if `value <= max`, else an error naming `what`, the value and the limit.
pub fn check(what: &'static str, value: usize, max: usize) -> Result<()> {
    if value > max {
        Err(Error::TooLarge { what, value, max })
    } else {
        Ok(())
    }
}

/// Checks a length of a table shown whole (`encoding show`, `props`, `plot encoding`).
pub fn check_table_len(len: usize) -> Result<()> {
    check("len", len, MAX_TABLE_LEN)
}

/// `Ok` if `0 < value <= max`, else an error naming `what`.
pub fn check_positive(what: &'static str, value: usize, max: usize) -> Result<()> {
    if value == 0 {
        return Err(Error::ZeroSize { what });
    }
    check(what, value, max)
}

/// The width of one head, `d_model / heads`, or an error if `heads` is 0 or does not
/// divide `d_model`: the one place this rule is written.
pub fn head_dim(d_model: usize, heads: usize) -> Result<usize> {
    if heads == 0 || !d_model.is_multiple_of(heads) {
        return Err(Error::HeadsDontDivide { d_model, heads });
    }
    Ok(d_model / heads)
}
