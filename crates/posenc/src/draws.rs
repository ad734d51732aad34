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

/// One stream of a run's draws, kept apart from the other streams drawn from the same
/// seed by its constant: each thread holds one ChaCha8 generator per stream, seeded per
/// step ([`Stream::seed`]). The encodings draw from [`Stream::ENCODINGS`]; dropout, in
/// `posenc-transformer`, from a stream of its own through the same mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream(pub u64);

thread_local! {
    static SAMPLERS: RefCell<Vec<(u64, ChaCha8Rng)>> = const { RefCell::new(Vec::new()) };
}

impl Stream {
    /// The encodings' draws (Abacus's offset).
    pub const ENCODINGS: Stream = Stream(0xAB4C_05AB_AC05_ABAC);

    /// Seeds this thread's generator of the stream for `step` of a run seeded `seed` (one
    /// ChaCha8 stream per step; a thread never seeded draws as `seed(0, 0)`).
    pub fn seed(self, seed: u64, step: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ self.0);
        rng.set_stream(step);
        self.with(|r| *r = rng);
    }

    /// An integer drawn uniformly from `0..=max`.
    pub fn up_to(self, max: usize) -> usize {
        self.with(|r| r.random_range(0..=max))
    }

    /// `dest` filled with uniform bits.
    pub fn fill(self, dest: &mut [u32]) {
        self.with(|r| r.fill(dest))
    }

    /// `f` on this thread's generator of the stream.
    fn with<R>(self, f: impl FnOnce(&mut ChaCha8Rng) -> R) -> R {
        SAMPLERS.with(|all| {
            let mut all = all.borrow_mut();
            let i = match all.iter().position(|(s, _)| *s == self.0) {
                Some(i) => i,
                None => {
                    all.push((self.0, ChaCha8Rng::seed_from_u64(self.0)));
                    all.len() - 1
                }
            };
            f(&mut all[i].1)
        })
    }
}

/// Seeds this thread's generator of the encodings' draws for `step` of a run seeded `seed`
/// ([`Stream::ENCODINGS`]).
pub fn seed(seed: u64, step: u64) {
    Stream::ENCODINGS.seed(seed, step);
}

/// An integer drawn uniformly from `0..=max`, from the encodings' stream.
pub fn up_to(max: usize) -> usize {
    Stream::ENCODINGS.up_to(max)
}
