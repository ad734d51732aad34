//! Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings
//! Boost Length Generalization of Transformers").
//!
//! ```text
//! train:  positions = sort(sample len of {0, 1, …, range − 1} without replacement)
//! test:   positions = 0, 1, …, len − 1
//! ```
//!
//! Trained on sequences of `len` tokens but with positions spread over a range `range`
//! several times longer, the model sees every position (and every distance) up to `range`
//! while only their order carries meaning, so a test sequence longer than `len` (up to
//! `range`) brings no position it has never seen. Any encoding takes this through the
//! seam: the hooks receive [`posenc::Positions::At`] in training. Ours draws one set per
//! batch, shared by its sequences (the paper draws one per sequence), and a fresh one every
//! step, from the step's own seeded generator so a resumed run draws the same.

use crate::error::Result;
use posenc_error::ensure;
use rand::Rng;

/// `len` distinct positions from `0..range`, increasing.
///
/// # Errors
/// If `range < len`.
pub fn draw(rng: &mut impl Rng, len: usize, range: usize) -> Result<Vec<u32>> {
    ensure!(
        range >= len,
        "randomized positions need a range of at least the sequence length: {range} < {len}"
    );
    ensure!(
        u32::try_from(range).is_ok(),
        "randomized position range {range} is too large"
    );
    let mut positions: Vec<u32> = rand::seq::index::sample(rng, range, len)
        .into_iter()
        .map(|p| p as u32)
        .collect();
    positions.sort_unstable();
    Ok(positions)
}

/// Checks a `randomized_positions` setting against the training length `len` and the
/// encoding's table, if it has one (`max_positions`).
///
/// # Errors
/// A range shorter than `len`, too large, or past the table.
pub fn check(range: usize, len: usize, max_positions: Option<usize>) -> Result<()> {
    ensure!(
        range >= len,
        "randomized_positions = {range} must be at least the training length {len}"
    );
    posenc::limits::check("randomized_positions", range, posenc::limits::MAX_POSITIONS)?;
    if let Some(max) = max_positions {
        ensure!(
            range <= max,
            "randomized_positions = {range} is past the encoding's max_positions = {max}"
        );
    }
    Ok(())
}
