//! The toy corpus: deterministic splits of English → Kotoba pairs.
//!
//! | split | clauses | what it tests |
//! |---|---|---|
//! | train, valid | 1–2 | learning |
//! | test | 1–2 | generalisation to sentences not in train |
//! | test-long | 3–4 | generalisation to longer sentences than any trained on |
//! | order-swap | 1 transitive | word order: a clause and the same clause with subject and object swapped |
//!
//! Every split is a pure function of the seed. Only train may repeat nothing; the
//! evaluation splits hold no sentence of train.

use std::collections::HashSet;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::kotoba::{Sampler, Sentence};

/// One translation pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    /// English.
    pub src: String,
    /// Kotoba.
    pub tgt: String,
}

impl From<&Sentence> for Pair {
    fn from(s: &Sentence) -> Self {
        Pair {
            src: s.english(),
            tgt: s.kotoba(),
        }
    }
}

/// How much of each split to generate, and from which seed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// Seed of every split.
    pub seed: u64,
    /// Training pairs.
    pub train: usize,
    /// Validation pairs.
    pub valid: usize,
    /// Test pairs.
    pub test: usize,
    /// Pairs of 3 and 4 clauses.
    pub test_long: usize,
    /// Order-swap pairs of pairs.
    pub order_swap: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            seed: 1234,
            train: 40_000,
            valid: 500,
            test: 1000,
            test_long: 500,
            order_swap: 500,
        }
    }
}

/// All splits.
#[derive(Debug, Clone)]
pub struct Splits {
    /// Training pairs (1–2 clauses, distinct).
    pub train: Vec<Pair>,
    /// Validation pairs (1–2 clauses, not in train).
    pub valid: Vec<Pair>,
    /// Test pairs (1–2 clauses, not in train or valid).
    pub test: Vec<Pair>,
    /// 3- and 4-clause pairs.
    pub test_long: Vec<Pair>,
    /// A transitive clause and the same clause with subject and object swapped, neither in train.
    pub order_swap: Vec<(Pair, Pair)>,
}

impl Splits {
    /// The evaluation splits by name, order-swap flattened (halves alternate).
    pub fn evaluation(&self) -> Vec<(&'static str, Vec<Pair>)> {
        let swap = self
            .order_swap
            .iter()
            .flat_map(|(a, b)| [a.clone(), b.clone()])
            .collect();
        vec![
            ("valid", self.valid.clone()),
            ("test", self.test.clone()),
            ("test-long", self.test_long.clone()),
            ("order-swap", swap),
        ]
    }
}

/// The most pairs any split may ask for.
pub const MAX_PAIRS: usize = 1_000_000;

impl DataConfig {
    /// Checks every split is non-empty and within [`MAX_PAIRS`].
    pub fn validate(&self) -> posenc_train::Result<()> {
        for (name, n) in [
            ("train", self.train),
            ("valid", self.valid),
            ("test", self.test),
            ("test_long", self.test_long),
            ("order_swap", self.order_swap),
        ] {
            posenc_error::ensure!(n > 0, "data.{name} must be at least 1, got 0");
            posenc::limits::check("data split size", n, MAX_PAIRS)
                .map_err(|e| posenc_error::invalid!("data.{name}: {e}"))?;
        }
        Ok(())
    }
}

/// Draws this many times per pair asked for (and at least [`MIN_DRAWS`]) before deciding
/// the grammar has no more distinct sentences of the kind.
const DRAWS_PER_PAIR: usize = 50;
const MIN_DRAWS: usize = 100_000;

/// Generates every split from `cfg.seed`.
///
/// # Errors
/// If a split asks for more distinct sentences than the grammar has (they are drawn at
/// random, so "more" means none new turned up in many draws).
pub fn generate(cfg: &DataConfig) -> posenc_train::Result<Splits> {
    cfg.validate()?;
    let sampler = Sampler::default();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut seen = HashSet::new();
    let budget = |n: usize| (n * DRAWS_PER_PAIR).max(MIN_DRAWS);
    let exhausted = |name: &str, got: usize, n: usize| {
        posenc_error::invalid!(
            "data.{name} asks for {n} distinct sentences, but only {got} new ones turned up in {} draws: the grammar has too few; ask for fewer",
            budget(n)
        )
    };
    let mut draw = |name: &str,
                    n: usize,
                    clauses: &dyn Fn(usize) -> usize,
                    rng: &mut ChaCha8Rng|
     -> posenc_train::Result<Vec<Pair>> {
        let mut out = Vec::with_capacity(n);
        let mut draws = 0;
        while out.len() < n {
            draws += 1;
            if draws > budget(n) {
                return Err(exhausted(name, out.len(), n).into());
            }
            let s = sampler.sentence(rng, clauses(out.len()));
            if seen.insert(s.english()) {
                out.push(Pair::from(&s));
            }
        }
        Ok(out)
    };
    let short = |i: usize| 1 + i % 2;
    let train = draw("train", cfg.train, &short, &mut rng)?;
    let valid = draw("valid", cfg.valid, &short, &mut rng)?;
    let test = draw("test", cfg.test, &short, &mut rng)?;
    let test_long = draw("test_long", cfg.test_long, &|i| 3 + i % 2, &mut rng)?;
    let mut order_swap = Vec::with_capacity(cfg.order_swap);
    let mut draws = 0;
    while order_swap.len() < cfg.order_swap {
        draws += 1;
        if draws > budget(cfg.order_swap) {
            return Err(exhausted("order_swap", order_swap.len(), cfg.order_swap).into());
        }
        let a = sampler.clause(&mut rng, true);
        let b = a.swapped().expect("forced transitive");
        let (a, b) = (Sentence(vec![a]), Sentence(vec![b]));
        if !seen.contains(&a.english()) && !seen.contains(&b.english()) {
            seen.insert(a.english());
            seen.insert(b.english());
            order_swap.push((Pair::from(&a), Pair::from(&b)));
        }
    }
    Ok(Splits {
        train,
        valid,
        test,
        test_long,
        order_swap,
    })
}
