//! Passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention"; used by Chen et al.
//! 2023 for Position Interpolation and by Peng et al. 2023 for YaRN): a five-digit number
//! hidden at a depth of repeated filler, then asked for. The model passes a trial when the
//! first number it writes is the key.
//!
//! ```text
//! INTRO  FILLER × ⌊depth·n⌋  "The pass key is 71432. Remember it. 71432 is the pass key."
//!        FILLER × (n − ⌊depth·n⌋)  "What is the pass key? The pass key is"
//! ```
//!
//! The prompt is put together from the token ids of its parts, so its length is exact
//! (`n` fillers fill the requested length as nearly as whole fillers can) and the key sits
//! at the same place whatever the tokenizer does across a part's edge.

use std::time::Instant;

use posenc_error::{ensure, Context};
use posenc_train::error::Result;
use posenc_transformer::LanguageModel;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::sample::{generate_observed, Sampling};
use posenc_train::memory::{peak_rss_mb, reset_peak_rss};

/// The task's opening, as in the Landmark Attention code.
pub const INTRO: &str = "There is an important info hidden inside a lot of irrelevant text. \
Find it and memorize it. I will quiz you about the important information there.";
/// One unit of filler.
pub const FILLER: &str =
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
/// The question that closes the prompt.
pub const QUESTION: &str = " What is the pass key? The pass key is";

/// The sentence that hides `key`.
pub fn needle(key: &str) -> String {
    format!(" The pass key is {key}. Remember it. {key} is the pass key.")
}

/// Tokens generated after the question: the five digits and room for a space or two.
pub const ANSWER_TOKENS: usize = 10;

/// The most trials per cell.
pub const MAX_TRIALS: usize = 1000;

/// What a passkey run measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PasskeyConfig {
    /// Prompt lengths in tokens.
    pub lengths: Vec<usize>,
    /// Where the key sits, as a fraction of the filler before it: 0 at the start, 1 at the
    /// end.
    pub depths: Vec<f64>,
    /// Trials (keys) per length and depth.
    pub trials: usize,
    /// Seed of the keys.
    pub seed: u64,
}

impl PasskeyConfig {
    /// Checks every setting is in its domain.
    ///
    /// # Errors
    /// No lengths or depths, a depth outside [0, 1], no trials or too many, a length past
    /// [`posenc::limits::MAX_POSITIONS`].
    pub fn validate(&self) -> Result<()> {
        ensure!(!self.lengths.is_empty(), "give at least one length");
        ensure!(!self.depths.is_empty(), "give at least one depth");
        for &d in &self.depths {
            ensure!(
                (0.0..=1.0).contains(&d),
                "a depth is a fraction between 0 and 1, got {d}"
            );
        }
        ensure!(self.trials > 0, "run at least one trial");
        posenc::limits::check("trials", self.trials, MAX_TRIALS)?;
        for &len in &self.lengths {
            posenc::limits::check("length", len, posenc::limits::MAX_POSITIONS)?;
        }
        Ok(())
    }

    /// The key of one trial: five digits, the same for the same seed, length, depth and
    /// trial (`-0.0` is depth 0).
    pub fn key(&self, length: usize, depth: f64, trial: usize) -> String {
        let mix = self.seed
            ^ (length as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            // `+ 0.0` turns -0.0 into 0.0 and leaves every other depth's bits alone.
            ^ (depth + 0.0).to_bits().rotate_left(17)
            ^ (trial as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        ChaCha8Rng::seed_from_u64(mix)
            .random_range(10_000..100_000u32)
            .to_string()
    }
}

/// One trial's prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The token ids.
    pub ids: Vec<u32>,
    /// The token at which the needle starts.
    pub needle_at: usize,
}

/// The shortest prompt `encode`'s tokenizer can make: the introduction, the needle (with a
/// five-digit key), the question and one filler.
///
/// # Errors
/// `encode`'s own.
pub fn shortest(encode: &dyn Fn(&str) -> Result<Vec<u32>>) -> Result<usize> {
    let parts = [INTRO, FILLER, &needle("99999"), QUESTION];
    let mut total = 0;
    for part in parts {
        total += encode(part)?.len();
    }
    Ok(total)
}

/// The default lengths of a passkey test for a model of `context`: ½, 1, 2 and 4 times it,
/// each raised to at least `shortest`; where that leaves fewer than four, doubling the
/// longest until there are four.
pub fn default_lengths(context: usize, shortest: usize) -> Vec<usize> {
    let mut lengths: Vec<usize> = [context / 2, context, 2 * context, 4 * context]
        .map(|l| l.max(shortest))
        .to_vec();
    lengths.dedup();
    while lengths.len() < 4 {
        let last = lengths.last().copied().unwrap_or(shortest).max(1);
        lengths.push(2 * last);
    }
    lengths
}

/// The prompt of `length` tokens (as nearly as whole fillers reach it) with `key` at
/// `depth`, from the token ids `encode` gives each part.
///
/// # Errors
/// A length too short for the parts and one filler, naming the shortest; `encode`'s own.
pub fn prompt(
    encode: &dyn Fn(&str) -> Result<Vec<u32>>,
    length: usize,
    depth: f64,
    key: &str,
) -> Result<Prompt> {
    let (intro, filler, needle, question) = (
        encode(INTRO)?,
        encode(FILLER)?,
        encode(&needle(key))?,
        encode(QUESTION)?,
    );
    ensure!(
        !filler.is_empty(),
        "the tokenizer gives the filler no tokens"
    );
    let fixed = intro.len() + needle.len() + question.len();
    let shortest = fixed + filler.len();
    ensure!(
        length >= shortest,
        "a passkey prompt of {length} tokens is too short: this tokenizer needs at least {shortest}"
    );
    let n = (length - fixed) / filler.len();
    let before = ((depth * n as f64).round() as usize).min(n);
    let mut ids = intro;
    for _ in 0..before {
        ids.extend_from_slice(&filler);
    }
    let needle_at = ids.len();
    ids.extend(needle);
    for _ in before..n {
        ids.extend_from_slice(&filler);
    }
    ids.extend(question);
    Ok(Prompt { ids, needle_at })
}

/// The first run of digits in `text`, if any.
pub fn first_number(text: &str) -> Option<&str> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let rest = &text[start..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// One trial: a tidy record (one row of a table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PasskeyRecord {
    /// The requested length.
    pub length: usize,
    /// The prompt's real length in tokens.
    pub tokens: usize,
    /// The requested depth.
    pub depth: f64,
    /// The trial's number, from 0.
    pub trial: usize,
    /// The seed the key was drawn with ([`PasskeyConfig::seed`]).
    pub seed: u64,
    /// The hidden key.
    pub key: String,
    /// What the model wrote after the question.
    pub answer: String,
    /// Whether the first number in the answer is the key.
    pub correct: bool,
    /// Wall time of the trial, prompt included.
    pub seconds: f64,
    /// The process's peak resident memory during the trial, in MB (Linux only).
    pub peak_rss_mb: Option<f64>,
}

/// A model with its tokenizer, as the task needs it.
pub struct Subject<'a> {
    /// The model.
    pub model: &'a LanguageModel,
    /// Text to token ids.
    pub encode: &'a dyn Fn(&str) -> Result<Vec<u32>>,
    /// Token ids to text.
    pub decode: &'a dyn Fn(&[u32]) -> Result<String>,
    /// The end-of-sequence token, which ends an answer.
    pub eos: Option<u32>,
}

impl Subject<'_> {
    /// The model's greedy answer to `prompt`, as text: up to `max_new` tokens, ended early
    /// by its end-of-sequence token; `on_tokens(n)` is called as each `n` prompt tokens are
    /// read.
    ///
    /// # Errors
    /// The model's and the decoder's own.
    pub fn answer(
        &self,
        prompt: &[u32],
        max_new: usize,
        on_tokens: impl FnMut(usize),
    ) -> Result<String> {
        let mut answer = Vec::new();
        generate_observed(
            self.model,
            prompt,
            max_new,
            Sampling::greedy(),
            None,
            on_tokens,
            |token| {
                if Some(token) == self.eos {
                    return Ok(false);
                }
                answer.push(token);
                Ok(true)
            },
        )?;
        (self.decode)(&answer)
    }
}

/// One trial, its prompt built.
struct Trial {
    length: usize,
    depth: f64,
    trial: usize,
    key: String,
    prompt: Prompt,
}

/// Every trial of `cfg`, each prompt checked against the model before any runs.
fn trials(subject: &Subject, cfg: &PasskeyConfig) -> Result<Vec<Trial>> {
    let mut all = Vec::new();
    for &length in &cfg.lengths {
        for &depth in &cfg.depths {
            for trial in 0..cfg.trials {
                let key = cfg.key(length, depth, trial);
                let prompt = prompt(subject.encode, length, depth, &key)?;
                subject
                    .model
                    .check_cache(1, prompt.ids.len() + ANSWER_TOKENS)
                    .with_context(|| format!("the passkey prompt of {length} tokens"))?;
                all.push(Trial {
                    length,
                    depth,
                    trial,
                    key,
                    prompt,
                });
            }
        }
    }
    Ok(all)
}

/// Runs every trial of `cfg` greedily, handing each record to `on_record` as it is done;
/// `on_tokens(n)` is called as each `n` prompt tokens are read (a progress bar's steps).
/// Every prompt is built and checked against the model's limits before the first runs.
///
/// # Errors
/// A bad setting, a prompt too short or too long for the model, and the model's own.
pub fn run(
    subject: &Subject,
    cfg: &PasskeyConfig,
    mut on_tokens: impl FnMut(usize),
    mut on_record: impl FnMut(&PasskeyRecord) -> Result<()>,
) -> Result<Vec<PasskeyRecord>> {
    cfg.validate()?;
    let all = trials(subject, cfg)?;
    let mut records = Vec::with_capacity(all.len());
    for Trial {
        length,
        depth,
        trial,
        key,
        prompt: p,
    } in all
    {
        reset_peak_rss();
        let start = Instant::now();
        let answer = subject.answer(&p.ids, ANSWER_TOKENS, &mut on_tokens)?;
        let record = PasskeyRecord {
            length,
            tokens: p.ids.len(),
            depth,
            trial,
            seed: cfg.seed,
            correct: first_number(&answer) == Some(key.as_str()),
            key,
            answer,
            seconds: start.elapsed().as_secs_f64(),
            peak_rss_mb: peak_rss_mb(),
        };
        on_record(&record)?;
        records.push(record);
    }
    Ok(records)
}

/// Keys found and trials by (length, depth), in the order of `cfg`:
/// `table[length][depth] = (found, trials)`.
pub fn found(cfg: &PasskeyConfig, records: &[PasskeyRecord]) -> Vec<Vec<(usize, usize)>> {
    cfg.lengths
        .iter()
        .map(|&l| {
            cfg.depths
                .iter()
                .map(|&d| {
                    let cell: Vec<_> = records
                        .iter()
                        .filter(|r| r.length == l && r.depth == d)
                        .collect();
                    (cell.iter().filter(|r| r.correct).count(), cell.len())
                })
                .collect()
        })
        .collect()
}

/// Accuracy by (length, depth), in the order of `cfg`: `table[length][depth]`.
pub fn accuracy(cfg: &PasskeyConfig, records: &[PasskeyRecord]) -> Vec<Vec<f64>> {
    found(cfg, records)
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|(right, trials)| right as f64 / trials.max(1) as f64)
                .collect()
        })
        .collect()
}
