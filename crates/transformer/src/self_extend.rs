//! Self-extend (Jin et al. 2024, "LLM Maybe LongLM"): a rotary model reads past its trained
//! context with no training, by reading far keys at grouped positions.
//!
//! A query `i` reads each key `j` within its neighbour window `W` as usual, at distance
//! `i − j`. Further keys it reads at grouped positions, `G` tokens to a position, shifted so
//! that the grouped distances carry on from the window's:
//!
//! ```text
//! near (i − j < W):   q_i at i,                    k_j at j          distance i − j
//! far  (i − j ≥ W):   q_i at ⌊i/G⌋ + W − W/G,     k_j at ⌊j/G⌋      distance ⌊i/G⌋ − ⌊j/G⌋ + W − W/G
//! ```
//!
//! so no distance exceeds `W + ⌊n/G⌋` over `n` tokens: within a trained context `L`, a model
//! reads about `(L − W)·G + W` tokens. The scores of the two readings are merged before one
//! softmax, as the paper's `torch.where(neighbor_mask, neighbor_attn, group_attn)`.
//!
//! The rotations are the model's own encoding's ([`posenc::PositionalEncoding::rotate`]),
//! asked at grouped positions ([`posenc::Positions::At`]), so any rotary kind works and no
//! file here knows which one it is. Attention with self-extend keeps its keys in the cache as
//! they came and rotates them both ways at every read, and takes its queries 64 at a time,
//! so its scores never span more than `64 × n`.
//!
//! llama.cpp's `--grp-attn-n G --grp-attn-w W` is the same idea done by dividing the cached
//! keys' positions block by block; the two read far keys alike, not identically.

use posenc::PositionalEncoding;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Self-extend's settings: `group` tokens share a far position, and keys within `window`
/// positions of a query are read as they are.
///
/// ```
/// use posenc_transformer::SelfExtend;
/// let se = SelfExtend::new(4, 1024).unwrap();
/// assert_eq!(se.query_position(5000), 5000 / 4 + 1024 - 256);
/// assert_eq!(se.key_position(5000), 1250);
/// assert!(SelfExtend::new(0, 1024).is_err() && SelfExtend::new(3, 1024).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelfExtend {
    /// `G`: tokens per grouped position (llama.cpp's `--grp-attn-n`).
    pub group: usize,
    /// `W`: the neighbour window, read at exact distances (llama.cpp's `--grp-attn-w`).
    pub window: usize,
}

impl SelfExtend {
    /// Groups of `group` tokens beyond a neighbour window of `window`.
    ///
    /// # Errors
    /// A group or window of 0, a window past [`posenc::limits::MAX_POSITIONS`], or a window
    /// that is not a multiple of the group (as llama.cpp requires: the grouped positions
    /// then meet the window's exactly).
    pub fn new(group: usize, window: usize) -> Result<Self> {
        use posenc::limits::{check_positive, MAX_POSITIONS};
        check_positive("the self-extend group", group, MAX_POSITIONS)?;
        check_positive("the self-extend window", window, MAX_POSITIONS)?;
        if !window.is_multiple_of(group) {
            return Err(Error::Input(format!(
                "a self-extend window of {window} is not a multiple of its group of {group}"
            )));
        }
        Ok(Self { group, window })
    }

    /// Checks the settings against a model trained on `context` positions.
    ///
    /// # Errors
    /// A window wider than the context: its near keys would sit at distances the model
    /// never saw.
    pub fn check_context(&self, context: usize) -> Result<()> {
        if self.window > context {
            return Err(Error::Input(format!(
                "a self-extend window of {} is wider than the model's trained context of {context}: \
                 its neighbours would sit at distances the model never saw",
                self.window
            )));
        }
        Ok(())
    }

    /// The grouped position of a far query at `i`: `⌊i/G⌋ + W − W/G`.
    pub fn query_position(&self, i: usize) -> usize {
        i / self.group + self.window - self.window / self.group
    }

    /// The grouped position of a far key at `j`: `⌊j/G⌋`.
    pub fn key_position(&self, j: usize) -> usize {
        j / self.group
    }

    /// Whether query `i` reads key `j ≤ i` as a neighbour.
    pub fn near(&self, i: usize, j: usize) -> bool {
        i - j < self.window
    }

    /// For queries at `rows` (positions, end exclusive) over keys `0..keys`: the keys before
    /// `a` are far for every query, those from `b` on near for every one, and `a..b` (at
    /// most `rows.len()` of them) differ from query to query.
    pub(crate) fn bands(&self, rows: std::ops::Range<usize>, keys: usize) -> (usize, usize) {
        let a = (rows.start + 1).saturating_sub(self.window).min(keys);
        let b = rows.end.saturating_sub(self.window).clamp(a, keys);
        (a, b)
    }
}

/// Positions as the `u32` list [`posenc::Positions::At`] takes.
///
/// # Errors
/// A position past `u32`.
pub(crate) fn positions(
    range: std::ops::Range<usize>,
    f: impl Fn(usize) -> usize,
) -> Result<Vec<u32>> {
    range
        .map(|i| {
            u32::try_from(f(i)).map_err(|_| Error::Input(format!("position {} is past u32", f(i))))
        })
        .collect()
}

/// Checks that `encoding` is one self-extend can regroup: it declares that it rotates
/// queries and keys, and adds no bias, decay or score of its own ([`posenc::Capabilities`]);
/// no kind is named.
///
/// # Errors
/// An encoding that does not rotate, or that also biases the scores.
pub fn check_encoding(encoding: &dyn PositionalEncoding) -> Result<()> {
    let refuse = |why: &str| {
        Err(Error::Input(format!(
            "self-extend regroups rotary positions: the encoding `{}` {why}",
            encoding.kind()
        )))
    };
    let caps = encoding.capabilities();
    if !caps.rotates {
        return refuse("does not rotate queries and keys");
    }
    if caps.biases || caps.reads_scores || caps.reads_input {
        return refuse("also adds to the scores, which would still read the true distances");
    }
    Ok(())
}
