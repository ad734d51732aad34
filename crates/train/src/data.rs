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

/// Generates every split from `cfg.seed`.
pub fn generate(cfg: &DataConfig) -> Splits {
    let sampler = Sampler::default();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut seen = HashSet::new();
    let mut draw =
        |n: usize, clauses: &dyn Fn(usize) -> usize, rng: &mut ChaCha8Rng| -> Vec<Pair> {
            let mut out = Vec::with_capacity(n);
            while out.len() < n {
                let s = sampler.sentence(rng, clauses(out.len()));
                if seen.insert(s.english()) {
                    out.push(Pair::from(&s));
                }
            }
            out
        };
    let short = |i: usize| 1 + i % 2;
    let train = draw(cfg.train, &short, &mut rng);
    let valid = draw(cfg.valid, &short, &mut rng);
    let test = draw(cfg.test, &short, &mut rng);
    let test_long = draw(cfg.test_long, &|i| 3 + i % 2, &mut rng);
    let mut order_swap = Vec::with_capacity(cfg.order_swap);
    while order_swap.len() < cfg.order_swap {
        let a = sampler.clause(&mut rng, true);
        let b = a.swapped().expect("forced transitive");
        let (a, b) = (Sentence(vec![a]), Sentence(vec![b]));
        if !seen.contains(&a.english()) && !seen.contains(&b.english()) {
            seen.insert(a.english());
            seen.insert(b.english());
            order_swap.push((Pair::from(&a), Pair::from(&b)));
        }
    }
    Splits {
        train,
        valid,
        test,
        test_long,
        order_swap,
    }
}
