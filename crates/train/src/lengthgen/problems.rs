//! The algorithmic problems, each a prompt and its answer in one sequence:
//!
//! ```text
//! prompt = answer .          tokens: 0 <pad>, 1 '=', 2 '.', 3 '+', 4… the digits 0–9
//! ```
//!
//! | problem | prompt of length n | answer |
//! |---|---|---|
//! | `copy` | n digits x | x |
//! | `reverse` | n digits x | x reversed |
//! | `sort` | n digits x | x in increasing order |
//! | `duplicate` | n digits x | x twice (Delétang et al. 2023, "duplicate string") |
//! | `addition` | a + b, n digits each, least significant first | a + b in n + 1 digits, least significant first (Kazemnejad et al. 2023) |
//!
//! An instance is *held out* when a hash of its prompt falls in one tenth of the range
//! ([`is_held_out`]): training never draws a held-out prompt and evaluation draws only
//! those, so the two never share an instance, at any length.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Padding: never a target.
pub const PAD: u32 = 0;
/// Between the prompt and the answer.
pub const SEP: u32 = 1;
/// After the answer.
pub const EOS: u32 = 2;
/// Between addition's operands.
pub const PLUS: u32 = 3;
/// The first digit's token (`0`); digit `d` is `DIGIT + d`.
pub const DIGIT: u32 = 4;
/// Tokens in the vocabulary.
pub const VOCAB: usize = 14;

/// One algorithmic problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Repeat the digits.
    Copy,
    /// The digits in reverse order.
    Reverse,
    /// The digits sorted.
    Sort,
    /// The digits twice.
    Duplicate,
    /// The sum of two numbers, least significant digit first.
    Addition,
}

/// A prompt and its answer (tokens, without the separator and end token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The prompt.
    pub prompt: Vec<u32>,
    /// The answer.
    pub answer: Vec<u32>,
}

impl Instance {
    /// The whole sequence: `prompt = answer .`.
    pub fn sequence(&self) -> Vec<u32> {
        let mut s = Vec::with_capacity(self.len());
        s.extend(&self.prompt);
        s.push(SEP);
        s.extend(&self.answer);
        s.push(EOS);
        s
    }

    /// Tokens in [`Self::sequence`].
    pub fn len(&self) -> usize {
        self.prompt.len() + self.answer.len() + 2
    }

    /// Never: a sequence holds at least the separator and the end token.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Where the answer (and the end token) starts in [`Self::sequence`].
    pub fn answer_start(&self) -> usize {
        self.prompt.len() + 1
    }
}

impl Problem {
    /// Every problem.
    pub const ALL: [Problem; 5] = [
        Problem::Copy,
        Problem::Reverse,
        Problem::Sort,
        Problem::Duplicate,
        Problem::Addition,
    ];

    /// Its name in commands and files.
    pub fn name(self) -> &'static str {
        match self {
            Problem::Copy => "copy",
            Problem::Reverse => "reverse",
            Problem::Sort => "sort",
            Problem::Duplicate => "duplicate",
            Problem::Addition => "addition",
        }
    }

    /// Tokens in the sequence of an instance of length `n`.
    pub fn sequence_len(self, n: usize) -> usize {
        let (prompt, answer) = match self {
            Problem::Copy | Problem::Reverse | Problem::Sort => (n, n),
            Problem::Duplicate => (n, 2 * n),
            Problem::Addition => (2 * n + 1, n + 1),
        };
        prompt + answer + 2
    }

    /// The answer to `prompt`, computed directly from its meaning.
    pub fn solve(self, prompt: &[u32]) -> Vec<u32> {
        match self {
            Problem::Copy => prompt.to_vec(),
            Problem::Reverse => prompt.iter().rev().copied().collect(),
            Problem::Sort => {
                let mut s = prompt.to_vec();
                s.sort_unstable();
                s
            }
            Problem::Duplicate => [prompt, prompt].concat(),
            Problem::Addition => {
                let n = prompt.len() / 2;
                let (a, b) = (&prompt[..n], &prompt[n + 1..]);
                let mut carry = 0;
                let mut sum: Vec<u32> = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| {
                        let d = (x - DIGIT) + (y - DIGIT) + carry;
                        carry = d / 10;
                        DIGIT + d % 10
                    })
                    .collect();
                sum.push(DIGIT + carry);
                sum
            }
        }
    }

    /// A uniformly random prompt of length `n` (digits; addition: two numbers of `n`
    /// digits) with its answer.
    pub fn random(self, n: usize, rng: &mut impl Rng) -> Instance {
        let mut digits =
            |k: usize| -> Vec<u32> { (0..k).map(|_| DIGIT + rng.random_range(0..10)).collect() };
        let prompt = match self {
            Problem::Addition => {
                let mut p = digits(n);
                p.push(PLUS);
                p.extend(digits(n));
                p
            }
            _ => digits(n),
        };
        let answer = self.solve(&prompt);
        Instance { prompt, answer }
    }

    /// A random instance of length `n` from the held-out tenth (`held_out`) or from the
    /// rest. `None` if a thousand draws found none (a length with very few instances,
    /// e.g. copying one digit, may have no held-out instance at all).
    pub fn sample(self, n: usize, held_out: bool, rng: &mut impl Rng) -> Option<Instance> {
        (0..1000)
            .map(|_| self.random(n, rng))
            .find(|i| is_held_out(&i.prompt) == held_out)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Problem {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        Problem::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Problem::ALL.iter().map(|p| p.name()).collect();
                posenc_error::invalid!("unknown task `{s}` (tasks: {})", names.join(", ")).into()
            })
    }
}

/// Whether `prompt` belongs to the held-out tenth: FNV-1a of its tokens, modulo 10, is 0.
pub fn is_held_out(prompt: &[u32]) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in prompt {
        for b in t.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h.is_multiple_of(10)
}

/// The tokens as text: digits, `+`, `=`, `.` (and `_` for padding).
pub fn render(tokens: &[u32]) -> String {
    tokens
        .iter()
        .map(|&t| match t {
            PAD => '_',
            SEP => '=',
            EOS => '.',
            PLUS => '+',
            d => char::from_digit(d.saturating_sub(DIGIT), 10).unwrap_or('?'),
        })
        .collect()
}
