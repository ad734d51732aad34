//! What an encoding draws while it trains (Abacus's offset), from a generator of this
//! thread seeded once per step of a run.
//!
//! A training loop seeds it from its run's seed and the step before each step (through
//! `posenc_transformer::dropout::seed`, which seeds dropout's generator beside it), so the
//! same seed draws the same offsets, and a resumed run draws exactly what an uninterrupted
//! one does. An encoding draws only while training, that is while its input tracks
//! gradients (the rule dropout follows).

use std::cell::RefCell;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Keeps the encodings' draws apart from the other streams a run draws from the same seed.
const STREAM: u64 = 0xAB4C_05AB_AC05_ABAC;

thread_local! {
    static SAMPLER: RefCell<ChaCha8Rng> = RefCell::new(ChaCha8Rng::seed_from_u64(STREAM));
}

/// Seeds this thread's generator for `step` of a run seeded `seed` (one ChaCha8 stream per
/// step; a thread never seeded draws as `seed(0, 0)`).
pub fn seed(seed: u64, step: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ STREAM);
    rng.set_stream(step);
    SAMPLER.with(|s| *s.borrow_mut() = rng);
}

/// An integer drawn uniformly from `0..=max`.
pub fn up_to(max: usize) -> usize {
    SAMPLER.with(|s| s.borrow_mut().random_range(0..=max))
}
