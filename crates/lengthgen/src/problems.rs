//! The algorithmic problems, each a prompt and its answer in one sequence:
//!
//! ```text
//! prompt = answer .          tokens: 0 <pad>, 1 '=', 2 '.', 3 '+', 4… the digits 0–9,
//!                             14… the index hints a–z, A–Z (`addition-hints` only)
//! ```
//!
//! | problem | prompt of length n | answer |
//! |---|---|---|
//! | `copy` | n digits x | x |
//! | `reverse` | n digits x | x reversed |
//! | `sort` | n digits x | x in increasing order |
//! | `duplicate` | n digits x | x twice (Delétang et al. 2023, "duplicate string") |
//! | `addition` | a + b, n digits each, least significant first | a + b in n + 1 digits, least significant first (Kazemnejad et al. 2023) |
//! | `addition-hints` | the same, each digit after its index hint | the same, each digit after its index hint (Zhou et al. 2023, 2024) |
//! | `addition-mixed` | a + b, one of n digits, the other of 1 to n (uniform), least significant first | a + b in n + 1 digits, least significant first (McLeish et al. 2024 draw the two lengths apart) |
//! | `count` | n digits x, `+`, a digit q | how many times q occurs in x, in as many digits as n has, least significant first |
//! | `selective-copy` | n tokens: ⌈n/2⌉ digits with ⌊n/2⌋ blanks (`+`) among them | the digits, in order, without the blanks |
//!
//! The last two are the kind of task Golovneva et al. 2024 (CoPE) built to need counting
//! rather than positions: to count one digit's occurrences, or to find the k-th digit that
//! is not a blank, attention must count tokens of a kind, which an index does not give.
//! Theirs count words and copy past noise tokens in text; these are digit versions in the
//! format of the others.
//!
//! Index hints label each digit with its place: `3`, the units, `1`, the tens, of 13 + 22
//! become `c3d1+c2d2=c5d3e0.`: the digits of one place share a hint, so attention can find
//! a place's operands by content (the hint) rather than by position. An instance's hints
//! are consecutive from a random start among the [`HINTS`] symbols, so training on short
//! instances still sees every hint and every pair of neighbours, and an instance of any
//! length up to `HINTS − 1` digits is written with hints training has seen.
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
/// Tokens in the vocabulary of every problem without index hints.
pub const VOCAB: usize = 14;
/// The first index hint's token (`a`); hint `i` is `HINT + i`.
pub const HINT: u32 = VOCAB as u32;
/// Index hints: `a`–`z`, `A`–`Z`.
pub const HINTS: usize = 52;

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
    /// The sum, each digit after an index hint of its place.
    #[serde(rename = "addition-hints")]
    AdditionHints,
    /// The sum of two numbers of different lengths, least significant digit first.
    #[serde(rename = "addition-mixed")]
    AdditionMixed,
    /// How many times the query digit occurs.
    Count,
    /// The digits without the blanks among them.
    #[serde(rename = "selective-copy")]
    SelectiveCopy,
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
    pub const ALL: [Problem; 9] = [
        Problem::Copy,
        Problem::Reverse,
        Problem::Sort,
        Problem::Duplicate,
        Problem::Addition,
        Problem::AdditionHints,
        Problem::AdditionMixed,
        Problem::Count,
        Problem::SelectiveCopy,
    ];

    /// Its name in commands and files.
    pub fn name(self) -> &'static str {
        match self {
            Problem::Copy => "copy",
            Problem::Reverse => "reverse",
            Problem::Sort => "sort",
            Problem::Duplicate => "duplicate",
            Problem::Addition => "addition",
            Problem::AdditionHints => "addition-hints",
            Problem::AdditionMixed => "addition-mixed",
            Problem::Count => "count",
            Problem::SelectiveCopy => "selective-copy",
        }
    }

    /// Tokens in its vocabulary: [`VOCAB`], and the [`HINTS`] for `addition-hints`.
    pub fn vocab_size(self) -> usize {
        match self {
            Problem::AdditionHints => VOCAB + HINTS,
            _ => VOCAB,
        }
    }

    /// The longest instance it can write, if it is bounded: `addition-hints` has a hint for
    /// each of the sum's `n + 1` places.
    pub fn max_length(self) -> Option<usize> {
        match self {
            Problem::AdditionHints => Some(HINTS - 1),
            _ => None,
        }
    }

    /// Tokens in the sequence of an instance of length `n` (`addition-mixed`: the longest,
    /// both numbers of `n` digits).
    pub fn sequence_len(self, n: usize) -> usize {
        let (prompt, answer) = match self {
            Problem::Copy | Problem::Reverse | Problem::Sort => (n, n),
            Problem::Duplicate => (n, 2 * n),
            Problem::Addition | Problem::AdditionMixed => (2 * n + 1, n + 1),
            Problem::AdditionHints => (4 * n + 1, 2 * (n + 1)),
            Problem::Count => (n + 2, decimal_width(n)),
            Problem::SelectiveCopy => (n, n.div_ceil(2)),
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
                add(&prompt[..n], &prompt[n + 1..])
            }
            Problem::AdditionMixed => {
                let plus = prompt
                    .iter()
                    .position(|&t| t == PLUS)
                    .unwrap_or(prompt.len());
                let (a, b) = (&prompt[..plus], prompt.get(plus + 1..).unwrap_or(&[]));
                // Zeros after the shorter number's most significant digit.
                let n = a.len().max(b.len());
                let widen = |x: &[u32]| [x, &vec![DIGIT; n - x.len()]].concat();
                add(&widen(a), &widen(b))
            }
            Problem::AdditionHints => {
                let n = prompt.len() / 4;
                let digits = |number: &[u32]| -> Vec<u32> {
                    number.iter().skip(1).step_by(2).copied().collect()
                };
                let sum = add(&digits(&prompt[..2 * n]), &digits(&prompt[2 * n + 1..]));
                let first = prompt.first().map_or(0, |&h| h.saturating_sub(HINT));
                with_hints(&sum, first)
            }
            Problem::Count => {
                let n = prompt.len().saturating_sub(2);
                let query = prompt.last().copied().unwrap_or(DIGIT);
                let count = prompt[..n].iter().filter(|&&t| t == query).count();
                (0..decimal_width(n))
                    .scan(count, |left, _| {
                        let digit = DIGIT + (*left % 10) as u32;
                        *left /= 10;
                        Some(digit)
                    })
                    .collect()
            }
            Problem::SelectiveCopy => prompt.iter().copied().filter(|&t| t != PLUS).collect(),
        }
    }

    /// A uniformly random prompt of length `n` (digits; addition: two numbers of `n`
    /// digits, with hints from a uniformly random start; mixed: one of `n` digits, the
    /// other of a uniform length in `1..=n`, either first) with its answer.
    ///
    /// `addition-hints` needs `n < HINTS` ([`Problem::max_length`]); past it the hints
    /// run out, and the prompt has meaningless tokens.
    pub fn random(self, n: usize, rng: &mut impl Rng) -> Instance {
        let mut digits =
            |k: usize| -> Vec<u32> { (0..k).map(|_| DIGIT + rng.random_range(0..10)).collect() };
        let prompt = match self {
            Problem::Addition => [digits(n), vec![PLUS], digits(n)].concat(),
            Problem::AdditionMixed => {
                let (long, mut short) = (digits(n), digits(n));
                short.truncate(rng.random_range(1..=n.max(1)));
                match rng.random_bool(0.5) {
                    true => [long, vec![PLUS], short].concat(),
                    false => [short, vec![PLUS], long].concat(),
                }
            }
            Problem::AdditionHints => {
                let (a, b) = (digits(n), digits(n));
                let first = rng.random_range(0..=HINTS.saturating_sub(n + 1) as u32);
                [with_hints(&a, first), vec![PLUS], with_hints(&b, first)].concat()
            }
            Problem::Count => [digits(n), vec![PLUS], digits(1)].concat(),
            Problem::SelectiveCopy => {
                // ⌈n/2⌉ digits, and ⌊n/2⌋ blanks put among them by a random shuffle.
                let mut prompt = [digits(n.div_ceil(2)), vec![PLUS; n / 2]].concat();
                for i in (1..prompt.len()).rev() {
                    prompt.swap(i, rng.random_range(0..=i));
                }
                prompt
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
    type Err = posenc_train::Error;

    fn from_str(s: &str) -> posenc_train::Result<Self> {
        Problem::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Problem::ALL.iter().map(|p| p.name()).collect();
                posenc_error::invalid!("unknown task `{s}` (tasks: {})", names.join(", ")).into()
            })
    }
}

/// The sum of two numbers of the same length, least significant digit first, in one digit
/// more.
fn add(a: &[u32], b: &[u32]) -> Vec<u32> {
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

/// How many decimal digits `n` has (1 for 0): a count of at most `n` fits in them.
fn decimal_width(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// `digits`, each after its index hint, the hints consecutive from hint `first`.
fn with_hints(digits: &[u32], first: u32) -> Vec<u32> {
    (HINT + first..)
        .zip(digits)
        .flat_map(|(h, &d)| [h, d])
        .collect()
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

/// The tokens as text: digits, `+`, `=`, `.`, the hints `a`–`z`, `A`–`Z` (and `_` for
/// padding, `?` for a token of no problem).
pub fn render(tokens: &[u32]) -> String {
    const LETTERS: &[u8; HINTS] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    tokens
        .iter()
        .map(|&t| match t {
            PAD => '_',
            SEP => '=',
            EOS => '.',
            PLUS => '+',
            h if h >= HINT => LETTERS.get((h - HINT) as usize).map_or('?', |&c| c as char),
            d => char::from_digit(d - DIGIT, 10).unwrap_or('?'),
        })
        .collect()
}
