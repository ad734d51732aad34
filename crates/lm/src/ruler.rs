//! A subset of RULER (Hsieh et al., COLM 2024, "RULER: What's the Real Context Size of Your
//! Long-Context Language Models?"; github.com/NVIDIA/RULER): retrieval and tracking tasks
//! harder than one passkey, at exact lengths.
//!
//! | task | what the model must give back |
//! |---|---|
//! | `niah_single` | the one number filed under a key, in a haystack of filler |
//! | `niah_multikey` | the number under one key, with three other keys' needles beside it |
//! | `niah_multivalue` | all four numbers filed under one key |
//! | `niah_multiquery` | the numbers of two keys out of four |
//! | `vt` | every variable of a chain `VAR B = VAR A` … that ends at one value |
//! | `cwe` | the ten words that recur most in a numbered list |
//! | `fwe` | the three coded words that recur most in a text whose counts fall as Zipf's law, `n · k^−α / ζ(α)` for the word of rank `k` (α = 2), the most frequent of all `...`, noise |
//! | `niah_multikey_3` | the UUID filed under one UUID key, in a haystack made only of other UUID needles |
//! | `threading` | the end of a thread through a JSON object of UUID pairs: the value under the first key is the next key, four hops (Roberts et al. 2024, "Needle Threading") |
//!
//! The prompts follow RULER's templates (its `synthetic.yaml` and the task generators'
//! wording), written again here, not copied. Three things differ, each said where it is
//! made: the haystack is always RULER's `noise` filler (the one the passkey test uses), not
//! Paul Graham's essays; keys are `adjective-noun` pairs from the short lists below, as
//! RULER's are from wonderwords'; and the common-words list draws its words from
//! pronounceable made-up words, so that 32k tokens hold enough distinct ones.
//!
//! A prompt is put together from the token ids of its parts, so its length is exact up to
//! a whole filler sentence (or list entry), and the needles sit where they were put
//! whatever the tokenizer does across a part's edge. An answer scores as RULER's
//! `string_match_all`: the fraction of the expected strings found in it, case ignored.

use std::time::Instant;

use posenc_error::{ensure, Context};
use posenc_train::error::Result;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::passkey::{Subject, FILLER};
use posenc_train::memory::{peak_rss_mb, reset_peak_rss};

/// The tasks, by RULER's names (without its numbered variants' suffixes, but for the UUID
/// needles of `niah_multikey_3`), and needle threading.
pub const TASKS: [&str; 9] = [
    "niah_single",
    "niah_multikey",
    "niah_multivalue",
    "niah_multiquery",
    "vt",
    "cwe",
    "fwe",
    "niah_multikey_3",
    "threading",
];

/// The hops of a `threading` prompt's thread.
pub const THREAD_HOPS: usize = 4;

/// The most tokens any task's answer may take (common words': RULER's 120).
pub const MAX_ANSWER: usize = 120;

/// The most samples per task, length and seed.
pub const MAX_SAMPLES: usize = 1000;

const ADJECTIVES: [&str; 32] = [
    "able", "bitter", "brave", "calm", "clever", "cold", "dark", "eager", "early", "fancy",
    "gentle", "giant", "golden", "happy", "hollow", "honest", "jolly", "kind", "lively", "lucky",
    "mighty", "narrow", "nervous", "polite", "proud", "quiet", "rapid", "silent", "silly",
    "sturdy", "tender", "witty",
];
const NOUNS: [&str; 32] = [
    "anchor", "apple", "basket", "bridge", "button", "candle", "castle", "cloud", "engine",
    "feather", "forest", "garden", "hammer", "island", "kettle", "ladder", "lantern", "meadow",
    "mirror", "needle", "orange", "pencil", "pillow", "planet", "river", "saddle", "shovel",
    "spoon", "thimble", "tunnel", "violin", "window",
];
const SYLLABLES: [&str; 24] = [
    "ba", "be", "bo", "da", "de", "do", "ka", "ke", "ko", "la", "le", "lo", "ma", "me", "mo", "na",
    "ne", "no", "ra", "re", "ro", "ta", "te", "to",
];

/// What a RULER run measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulerConfig {
    /// Tasks, from [`TASKS`].
    pub tasks: Vec<String>,
    /// Prompt lengths in tokens.
    pub lengths: Vec<usize>,
    /// Seeds of the haystacks: keys, values and where the needles go.
    pub seeds: Vec<u64>,
    /// Samples per task, length and seed.
    pub samples: usize,
}

impl RulerConfig {
    /// Checks every setting is in its domain.
    ///
    /// # Errors
    /// An unknown task, no tasks, lengths or seeds, no samples or too many, a length past
    /// [`posenc::limits::MAX_POSITIONS`].
    pub fn validate(&self) -> Result<()> {
        ensure!(!self.tasks.is_empty(), "give at least one task");
        for task in &self.tasks {
            ensure!(
                TASKS.contains(&task.as_str()),
                "unknown RULER task `{task}` (the tasks are {})",
                TASKS.join(", ")
            );
        }
        ensure!(!self.lengths.is_empty(), "give at least one length");
        ensure!(!self.seeds.is_empty(), "give at least one seed");
        ensure!(self.samples > 0, "run at least one sample");
        posenc::limits::check("samples", self.samples, MAX_SAMPLES)?;
        for &len in &self.lengths {
            posenc::limits::check("length", len, posenc::limits::MAX_POSITIONS)?;
        }
        Ok(())
    }
}

/// One sample's prompt and what its answer must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// The token ids, the answer's prefix last.
    pub ids: Vec<u32>,
    /// The strings a full answer holds.
    pub answers: Vec<String>,
    /// Tokens to generate (RULER's budget for the task, cut where ours are shorter).
    pub max_new: usize,
}

/// Text to token ids.
pub type Encode<'a> = &'a dyn Fn(&str) -> Result<Vec<u32>>;

/// The random draws of one sample: the same for the same task, length, seed and sample.
fn rng(task: &str, length: usize, seed: u64, sample: usize) -> ChaCha8Rng {
    let task_bits = task.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    ChaCha8Rng::seed_from_u64(
        seed ^ task_bits.rotate_left(7)
            ^ (length as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (sample as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
    )
}

/// `n` distinct `adjective-noun` keys.
fn keys(rng: &mut ChaCha8Rng, n: usize) -> Vec<String> {
    let mut all: Vec<String> = ADJECTIVES
        .iter()
        .flat_map(|a| NOUNS.iter().map(move |n| format!("{a}-{n}")))
        .collect();
    all.shuffle(rng);
    all.truncate(n);
    all
}

/// A seven-digit number, as RULER's values.
fn number(rng: &mut ChaCha8Rng) -> String {
    rng.random_range(1_000_000..10_000_000u32).to_string()
}

/// The ids of `parts` laid into a haystack of whole filler units between `head` and
/// `tail`: as many units as reach `length` tokens, the parts at the unit boundaries
/// `slots` gives (one per part, each in `0..=units`).
fn haystack(
    encode: Encode,
    length: usize,
    head: &str,
    parts: &[String],
    tail: &str,
    unit: &[u32],
    mut slots: impl FnMut(usize) -> Vec<usize>,
) -> Result<Vec<u32>> {
    let head = encode(head)?;
    let tail = encode(tail)?;
    let parts: Vec<Vec<u32>> = parts.iter().map(|p| encode(p)).collect::<Result<_>>()?;
    ensure!(!unit.is_empty(), "the tokenizer gives the filler no tokens");
    let fixed = head.len() + tail.len() + parts.iter().map(Vec::len).sum::<usize>();
    let shortest = fixed + unit.len();
    ensure!(
        length >= shortest,
        "a prompt of {length} tokens is too short for this task: this tokenizer needs at least \
         {shortest}"
    );
    let units = (length - fixed) / unit.len();
    let mut at = slots(units);
    at.sort_unstable();
    let mut ids = head;
    let mut next = 0;
    for u in 0..=units {
        while next < parts.len() && at[next] == u {
            ids.extend_from_slice(&parts[next]);
            next += 1;
        }
        if u < units {
            ids.extend_from_slice(unit);
        }
    }
    ids.extend(tail);
    Ok(ids)
}

/// Needle in a haystack: `keys` keys (one asked about unless `queries` > 1), `values`
/// numbers under each, the first `queries` keys asked for.
fn niah(
    encode: Encode,
    length: usize,
    rng: &mut ChaCha8Rng,
    keys_n: usize,
    values_n: usize,
    queries: usize,
) -> Result<Prompt> {
    let keys = keys(rng, keys_n);
    let values: Vec<Vec<String>> = keys
        .iter()
        .map(|_| (0..values_n).map(|_| number(rng)).collect())
        .collect();
    let mut needles: Vec<String> = keys
        .iter()
        .zip(&values)
        .flat_map(|(k, vs)| {
            vs.iter()
                .map(move |v| format!(" One of the special magic numbers for {k} is: {v}."))
        })
        .collect();
    needles.shuffle(rng);
    let asked = &keys[..queries];
    let query = match asked {
        [one] => one.clone(),
        many => format!(
            "{} and {}",
            many[..many.len() - 1].join(", "),
            many[many.len() - 1]
        ),
    };
    let head = "Some special magic numbers are hidden within the following text. Make sure to \
                memorize it. I will quiz you about the numbers afterwards.\n";
    let tail = format!(
        "\nWhat are all the special magic numbers for {query} mentioned in the provided text? \
         The special magic numbers for {query} mentioned in the provided text are"
    );
    let unit = encode(FILLER)?;
    let n = needles.len();
    let ids = haystack(encode, length, head, &needles, &tail, &unit, |units| {
        (0..n).map(|_| rng.random_range(0..=units)).collect()
    })?;
    Ok(Prompt {
        ids,
        answers: values[..queries].concat(),
        max_new: 16 * queries * values_n + 8,
    })
}

/// A made-up variable name: five capital letters.
fn variable(rng: &mut ChaCha8Rng) -> String {
    (0..5)
        .map(|_| rng.random_range(b'A'..=b'Z') as char)
        .collect()
}

/// Variable tracking: one chain of four hops, `VAR A = 12345.` then `VAR B = VAR A.` …,
/// spread through the haystack in order.
fn vt(encode: Encode, length: usize, rng: &mut ChaCha8Rng) -> Result<Prompt> {
    let value = rng.random_range(10_000..100_000u32).to_string();
    let mut names: Vec<String> = Vec::new();
    while names.len() < 5 {
        let name = variable(rng);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut links = vec![format!(" VAR {} = {value}.", names[0])];
    links.extend(
        names
            .windows(2)
            .map(|w| format!(" VAR {} = VAR {}.", w[1], w[0])),
    );
    let head = "Memorize and track the chain(s) of variable assignment hidden in the following \
                text.\n\n";
    let tail = format!(
        "\nQuestion: Find all variables that are assigned the value {value} in the text \
         above. Answer: According to the chain(s) of variable assignment in the text above, 5 \
         variables are assigned the value {value}, they are:"
    );
    let unit = encode(FILLER)?;
    let ids = haystack(encode, length, head, &links, &tail, &unit, |units| {
        // In order, at evenly spread places: a chain read forwards.
        (0..links.len()).map(|i| i * units / links.len()).collect()
    })?;
    Ok(Prompt {
        ids,
        answers: names,
        max_new: 40,
    })
}

/// A pronounceable made-up word of three syllables.
fn made_up(rng: &mut ChaCha8Rng) -> String {
    (0..3)
        .map(|_| *SYLLABLES.choose(rng).unwrap_or(&"ba"))
        .collect()
}

/// Common-words extraction: a numbered list where ten words appear 30 times each and the
/// rest 3 times, as many as reach the length; the ten asked for.
fn cwe(encode: Encode, length: usize, rng: &mut ChaCha8Rng) -> Result<Prompt> {
    const COMMON: usize = 10;
    let head = encode(
        "Below is a numbered list of words. In these words, some appear more often than \
         others. Memorize the ones that appear most often.\n",
    )?;
    let tail = encode(
        "\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 \
         words that appear most often in the list are:",
    )?;
    let mut words: Vec<String> = Vec::new();
    let fresh = |words: &mut Vec<String>, rng: &mut ChaCha8Rng| loop {
        let w = made_up(rng);
        if !words.contains(&w) {
            words.push(w.clone());
            return w;
        }
    };
    let common: Vec<String> = (0..COMMON).map(|_| fresh(&mut words, rng)).collect();
    let entry = |i: usize, w: &str| encode(&format!("{}. {w}\n", i + 1));
    let budget = length.saturating_sub(head.len() + tail.len());
    let mut list: Vec<String> = common.iter().flat_map(|w| vec![w.clone(); 30]).collect();
    let mut used = 0;
    for (i, w) in list.iter().enumerate() {
        used += entry(i, w)?.len();
    }
    // Uncommon words, three entries each, while the list (counted as laid out before its
    // shuffle, which changes the count by a token or two) fits.
    let mut uncommon = 0;
    loop {
        let w = fresh(&mut words, rng);
        let mut more = 0;
        for i in list.len()..list.len() + 3 {
            more += entry(i, &w)?.len();
        }
        if used + more > budget {
            break;
        }
        used += more;
        list.extend([w.clone(), w.clone(), w]);
        uncommon += 1;
    }
    ensure!(
        uncommon > 0,
        "a common-words prompt of {length} tokens is too short: the ten common words alone \
         take {} tokens",
        head.len() + tail.len() + used
    );
    list.shuffle(rng);
    let mut ids = head;
    for (i, w) in list.iter().enumerate() {
        ids.extend(entry(i, w)?);
    }
    ids.extend(tail);
    Ok(Prompt {
        ids,
        answers: common,
        max_new: MAX_ANSWER,
    })
}

/// Frequent-words extraction, as RULER's `freq_words_extraction.py` with α = 2: a
/// vocabulary of `length / 50` coded words of six random letters, the first of them `...`
/// (noise), the word of rank `k` written `⌊n · k^−α / ζ(α)⌋` times, all shuffled, with the
/// most words `n` that fit; the three after the noise asked for.
fn fwe(encode: Encode, length: usize, rng: &mut ChaCha8Rng) -> Result<Prompt> {
    const ALPHA: f64 = 2.0;
    // ζ(2) = π² / 6.
    let zeta = std::f64::consts::PI.powi(2) / 6.0;
    let head = encode(
        "Read the following coded text and track the frequency of each coded word. Find the \
         three most frequently appeared coded words. ",
    )?;
    let tail = encode(
        "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are \
         the three most frequently appeared words in the above coded text? Answer: According \
         to the coded text above, the three most frequently appeared words are:",
    )?;
    let size = length / 50;
    ensure!(
        size >= 5,
        "a frequent-words prompt of {length} tokens is too short: RULER's vocabulary of \
         length / 50 words needs at least 5, so 250 tokens"
    );
    let mut vocab: Vec<String> = vec!["...".into()];
    while vocab.len() < size {
        let w: String = (0..6)
            .map(|_| rng.random_range(b'a'..=b'z') as char)
            .collect();
        if !vocab.contains(&w) {
            vocab.push(w);
        }
    }
    let pieces: Vec<Vec<u32>> = vocab
        .iter()
        .map(|w| encode(&format!(" {w}")))
        .collect::<Result<_>>()?;
    let counts = |n: usize| -> Vec<usize> {
        (1..=vocab.len())
            .map(|k| (n as f64 * (k as f64).powf(-ALPHA) / zeta) as usize)
            .collect()
    };
    let tokens = |n: usize| -> usize {
        let text: usize = counts(n)
            .iter()
            .zip(&pieces)
            .map(|(c, p)| c * p.len())
            .sum();
        head.len() + tail.len() + text
    };
    // The most words that fit: double, then halve the step.
    let (mut n, mut step) = (0usize, 1usize);
    while tokens(n + step) <= length {
        n += step;
        step *= 2;
    }
    while step > 1 {
        step /= 2;
        if tokens(n + step) <= length {
            n += step;
        }
    }
    let c = counts(n);
    ensure!(
        c[1] > c[2] && c[2] > c[3] && c[3] > c[4],
        "a frequent-words prompt of {length} tokens is too short: its three most frequent \
         words are not told apart by their counts ({:?})",
        &c[1..5]
    );
    let mut order: Vec<usize> = c
        .iter()
        .enumerate()
        .flat_map(|(k, &m)| vec![k; m])
        .collect();
    order.shuffle(rng);
    let mut ids = head;
    for k in order {
        ids.extend_from_slice(&pieces[k]);
    }
    ids.extend(tail);
    Ok(Prompt {
        ids,
        answers: vocab[1..4].to_vec(),
        max_new: 50,
    })
}

/// A random version-4 UUID, as RULER's `uuid.UUID(int=random.getrandbits(128), version=4)`.
fn uuid(rng: &mut ChaCha8Rng) -> String {
    let bits: u128 = rng.random();
    let bits = (bits & !(0xFu128 << 76) | (0x4u128 << 76)) & !(0x3u128 << 62) | (0x2u128 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Whole `parts` from `more` after `head` (in the order drawn, `fixed` put at the places
/// `place` gives among them), as many as fit in `length` tokens with `tail`.
fn fill(
    encode: Encode,
    length: usize,
    head: &str,
    fixed: &[String],
    tail: &str,
    mut more: impl FnMut() -> String,
    mut place: impl FnMut(usize) -> usize,
) -> Result<(Vec<u32>, usize)> {
    let (head, tail) = (encode(head)?, encode(tail)?);
    let fixed: Vec<Vec<u32>> = fixed.iter().map(|p| encode(p)).collect::<Result<_>>()?;
    let mut used = head.len() + tail.len() + fixed.iter().map(Vec::len).sum::<usize>();
    ensure!(
        used <= length,
        "a prompt of {length} tokens is too short for this task: this tokenizer needs at least \
         {used}"
    );
    let mut parts: Vec<Vec<u32>> = Vec::new();
    loop {
        let next = encode(&more())?;
        if used + next.len() > length {
            break;
        }
        used += next.len();
        parts.push(next);
    }
    let drawn = parts.len();
    for f in fixed {
        let at = place(parts.len());
        parts.insert(at.min(parts.len()), f);
    }
    let mut ids = head;
    ids.extend(parts.concat());
    ids.extend(tail);
    Ok((ids, drawn))
}

/// RULER's `niah_multikey_3`: UUID keys and values, the haystack itself made of needles
/// under other UUIDs (`type_haystack: needle`), one of them asked for.
fn niah_uuid(encode: Encode, length: usize, rng: &mut ChaCha8Rng) -> Result<Prompt> {
    let needle = |k: &str, v: &str| format!(" One of the special magic uuids for {k} is: {v}.");
    let (key, value) = (uuid(rng), uuid(rng));
    let head = "Some special magic uuids are hidden within the following text. Make sure to \
                memorize it. I will quiz you about the uuids afterwards.\n";
    let tail = format!(
        "\nWhat are all the special magic uuids for {key} mentioned in the provided text? The \
         special magic uuids for {key} mentioned in the provided text are"
    );
    let mut draw = ChaCha8Rng::seed_from_u64(rng.random());
    let (ids, _) = fill(
        encode,
        length,
        head,
        &[needle(&key, &value)],
        &tail,
        || needle(&uuid(&mut draw), &uuid(&mut draw)),
        |n| rng.random_range(0..=n),
    )?;
    Ok(Prompt {
        ids,
        answers: vec![value],
        max_new: 128,
    })
}

/// Needle threading (Roberts et al. 2024): a JSON object of UUID pairs, among them a thread
/// of [`THREAD_HOPS`] pairs, each value the key of the next, at random places; asked for
/// the value at the thread's end, from its first key. The wording is ours; the paper's
/// haystacks are the same kind of object.
fn threading(encode: Encode, length: usize, rng: &mut ChaCha8Rng) -> Result<Prompt> {
    let thread: Vec<String> = (0..=THREAD_HOPS).map(|_| uuid(rng)).collect();
    let pair = |k: &str, v: &str| format!("\n  \"{k}\": \"{v}\",");
    let links: Vec<String> = thread.windows(2).map(|w| pair(&w[0], &w[1])).collect();
    let head = "Below is a JSON object of keys and values, all of them UUIDs. Some values are \
                themselves keys of the object: together they form a thread.\n{";
    let tail = format!(
        "\n}}\nQuestion: Start at the key {} and look up its value. That value is also a key: \
         look up its value in turn, and so on, until a value is not a key. What is that last \
         value? Answer: The last value of the thread is",
        thread[0]
    );
    let mut draw = ChaCha8Rng::seed_from_u64(rng.random());
    let (ids, drawn) = fill(
        encode,
        length,
        head,
        &links,
        &tail,
        || pair(&uuid(&mut draw), &uuid(&mut draw)),
        |n| rng.random_range(0..=n),
    )?;
    ensure!(
        drawn >= THREAD_HOPS,
        "a threading prompt of {length} tokens is too short: a thread of {THREAD_HOPS} hops \
         needs a haystack of at least as many other pairs, and {drawn} fit"
    );
    Ok(Prompt {
        ids,
        answers: vec![thread[THREAD_HOPS].clone()],
        max_new: 64,
    })
}

/// The prompt of one sample.
///
/// # Errors
/// An unknown task, a length too short for it (naming the shortest), `encode`'s own.
pub fn prompt(
    encode: Encode,
    task: &str,
    length: usize,
    seed: u64,
    sample: usize,
) -> Result<Prompt> {
    let mut rng = rng(task, length, seed, sample);
    let made = match task {
        "niah_single" => niah(encode, length, &mut rng, 1, 1, 1),
        "niah_multikey" => niah(encode, length, &mut rng, 4, 1, 1),
        "niah_multivalue" => niah(encode, length, &mut rng, 1, 4, 1),
        "niah_multiquery" => niah(encode, length, &mut rng, 4, 1, 2),
        "vt" => vt(encode, length, &mut rng),
        "cwe" => cwe(encode, length, &mut rng),
        "fwe" => fwe(encode, length, &mut rng),
        "niah_multikey_3" => niah_uuid(encode, length, &mut rng),
        "threading" => threading(encode, length, &mut rng),
        other => posenc_error::bail!(
            "unknown RULER task `{other}` (the tasks are {})",
            TASKS.join(", ")
        ),
    };
    Ok(made.with_context(|| format!("the {task} prompt of {length} tokens"))?)
}

/// RULER's `string_match_all`: the fraction of `answers` found in `output`, case ignored.
pub fn score(output: &str, answers: &[String]) -> f64 {
    if answers.is_empty() {
        return 0.0;
    }
    let output = output.to_lowercase();
    let found = answers
        .iter()
        .filter(|a| output.contains(&a.to_lowercase()))
        .count();
    found as f64 / answers.len() as f64
}

/// One sample: a tidy record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulerRecord {
    /// The task.
    pub task: String,
    /// The requested length.
    pub length: usize,
    /// The prompt's real length in tokens.
    pub tokens: usize,
    /// The haystack's seed.
    pub seed: u64,
    /// The sample's number, from 0.
    pub sample: usize,
    /// What a full answer holds.
    pub answers: Vec<String>,
    /// What the model wrote.
    pub output: String,
    /// The fraction of `answers` found in `output`.
    pub score: f64,
    /// Wall time of the sample, prompt included.
    pub seconds: f64,
    /// The process's peak resident memory during the sample, in MB (Linux only).
    pub peak_rss_mb: Option<f64>,
}

impl RulerRecord {
    /// Whether this record is the one of `task`, `length`, `seed` and `sample`.
    pub fn is(&self, task: &str, length: usize, seed: u64, sample: usize) -> bool {
        (self.task.as_str(), self.length, self.seed, self.sample) == (task, length, seed, sample)
    }
}

/// Every sample of `cfg` not `done` already, greedily, in order of length (shortest first),
/// then task, seed and sample; each record goes to `on_record` as it is made. Every prompt
/// is built and checked against the model's limits before the first runs.
///
/// # Errors
/// A bad setting, a prompt too short or too long for the model, `on_record`'s and the
/// model's own.
pub fn run(
    subject: &Subject,
    cfg: &RulerConfig,
    done: impl Fn(&str, usize, u64, usize) -> bool,
    mut on_tokens: impl FnMut(usize),
    mut on_record: impl FnMut(RulerRecord) -> Result<()>,
) -> Result<()> {
    cfg.validate()?;
    // A length whose cache could not fit is refused before any prompt is built (a
    // common-words list of a million tokens takes a while to lay out).
    for &length in &cfg.lengths {
        subject
            .model
            .check_cache(1, length + MAX_ANSWER)
            .with_context(|| format!("RULER prompts of {length} tokens"))?;
    }
    let mut todo = Vec::new();
    for &length in &cfg.lengths {
        for task in &cfg.tasks {
            for &seed in &cfg.seeds {
                for sample in 0..cfg.samples {
                    if done(task, length, seed, sample) {
                        continue;
                    }
                    let p = prompt(subject.encode, task, length, seed, sample)?;
                    subject
                        .model
                        .check_cache(1, p.ids.len() + p.max_new)
                        .with_context(|| format!("the {task} prompt of {length} tokens"))?;
                    todo.push((task.clone(), length, seed, sample, p));
                }
            }
        }
    }
    for (task, length, seed, sample, p) in todo {
        reset_peak_rss();
        let start = Instant::now();
        let output = subject.answer(&p.ids, p.max_new, &mut on_tokens)?;
        on_record(RulerRecord {
            score: score(&output, &p.answers),
            task,
            length,
            tokens: p.ids.len(),
            seed,
            sample,
            answers: p.answers,
            output,
            seconds: start.elapsed().as_secs_f64(),
            peak_rss_mb: peak_rss_mb(),
        })?;
    }
    Ok(())
}

/// Mean score by task and length over `records`: `(task, length, mean, sd, n)`, in the
/// order of `cfg`, the spread over seeds (each seed's mean over its samples).
pub fn table(cfg: &RulerConfig, records: &[RulerRecord]) -> Vec<(String, usize, f64, f64, usize)> {
    let mut rows = Vec::new();
    for task in &cfg.tasks {
        for &length in &cfg.lengths {
            let per_seed: Vec<f64> = cfg
                .seeds
                .iter()
                .filter_map(|&seed| {
                    let scores: Vec<f64> = records
                        .iter()
                        .filter(|r| &r.task == task && r.length == length && r.seed == seed)
                        .map(|r| r.score)
                        .collect();
                    (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64)
                })
                .collect();
            let (mean, sd) = posenc_train::results::mean_sd(&per_seed);
            rows.push((task.clone(), length, mean, sd, per_seed.len()));
        }
    }
    rows
}

/// One row of a RULER records file: a sample, with the model and scaling it ran with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulerRow {
    /// The model, as `--model` named it.
    pub model: String,
    /// `--rope-scaling` as given, if any.
    pub rope_scaling: Option<String>,
    /// `--self-extend`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_extend: Option<posenc_transformer::SelfExtend>,
    /// `--kv-cache`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<posenc_transformer::KvType>,
    /// The scaling in a few words ([`scaling_label`]): what claims compare.
    #[serde(default)]
    pub scaling: String,
    /// The sample.
    #[serde(flatten)]
    pub record: RulerRecord,
}

/// `none`, or a `--rope-scaling`'s type and factor (`yarn ×2`; the JSON itself where it
/// has neither), and self-extend's group and window (`self-extend 4/2048`), then the
/// cache's type if one was given (`yarn ×2, q8_0 cache`).
pub fn scaling_label(
    rope_scaling: Option<&str>,
    self_extend: Option<posenc_transformer::SelfExtend>,
    kv_cache: Option<posenc_transformer::KvType>,
) -> String {
    let scaling = rope_scaling.map(|json| {
        let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
        match (value["rope_type"].as_str(), value["factor"].as_f64()) {
            (Some(kind), Some(factor)) => format!("{kind} ×{factor}"),
            _ => json.to_string(),
        }
    });
    let extend = self_extend.map(|se| format!("self-extend {}/{}", se.group, se.window));
    let label = match (scaling, extend) {
        (None, None) => "none".into(),
        (Some(s), None) | (None, Some(s)) => s,
        (Some(s), Some(e)) => format!("{s} + {e}"),
    };
    match kv_cache {
        Some(kind) => format!("{label}, {kind} cache"),
        None => label,
    }
}

/// The rows of a RULER records file, each with its [`RulerRow::scaling`].
///
/// # Errors
/// A file that cannot be read or is not a list of RULER rows.
pub fn load_rows(path: &std::path::Path) -> Result<Vec<RulerRow>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rows: Vec<RulerRow> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a file of RULER records", path.display()))?;
    for row in &mut rows {
        row.scaling = scaling_label(row.rope_scaling.as_deref(), row.self_extend, row.kv_cache);
    }
    Ok(rows)
}

/// One model and scaling's results: its settings as found in the records, and
/// `(task, length, mean, sd, seeds)` rows ([`table`]).
pub struct Summary {
    /// The model.
    pub model: String,
    /// The scaling ([`scaling_label`]).
    pub scaling: String,
    /// The tasks, lengths, seeds and samples its records hold.
    pub cfg: RulerConfig,
    /// Mean score ± sd over seeds by task and length.
    pub table: Vec<(String, usize, f64, f64, usize)>,
}

/// The results of `rows`, one [`Summary`] per model and scaling, in the order they first
/// appear.
pub fn summaries(rows: &[RulerRow]) -> Vec<Summary> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in rows {
        if !groups.contains(&(r.model.as_str(), r.scaling.as_str())) {
            groups.push((&r.model, &r.scaling));
        }
    }
    groups
        .into_iter()
        .map(|(model, scaling)| {
            let records: Vec<RulerRecord> = rows
                .iter()
                .filter(|r| (r.model.as_str(), r.scaling.as_str()) == (model, scaling))
                .map(|r| r.record.clone())
                .collect();
            let present = |f: &dyn Fn(&RulerRecord) -> u64| {
                let mut v: Vec<u64> = records.iter().map(f).collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            let cfg = RulerConfig {
                tasks: TASKS
                    .iter()
                    .filter(|t| records.iter().any(|r| r.task == **t))
                    .map(|t| t.to_string())
                    .collect(),
                lengths: present(&|r| r.length as u64)
                    .into_iter()
                    .map(|l| l as usize)
                    .collect(),
                seeds: present(&|r| r.seed),
                samples: present(&|r| r.sample as u64).len(),
            };
            let table = table(&cfg, &records);
            Summary {
                model: model.to_string(),
                scaling: scaling.to_string(),
                cfg,
                table,
            }
        })
        .collect()
}

/// The tables of `rows`: one per model and scaling, mean score ± sd over seeds by task and
/// length (each seed's value the mean over its samples).
pub fn markdown(rows: &[RulerRow]) -> String {
    let mut s = String::new();
    for Summary {
        model,
        scaling,
        cfg,
        table,
    } in summaries(rows)
    {
        s += &format!(
            "### {model}, scaling {scaling}\n\nMean score ± sd over seeds {} ({} sample(s) each)\n\n| task |",
            cfg.seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            cfg.samples
        );
        for l in &cfg.lengths {
            s += &format!(" {l} |");
        }
        s += "\n|---|";
        s += &"---:|".repeat(cfg.lengths.len());
        s += "\n";
        for task in &cfg.tasks {
            s += &format!("| {task} |");
            for (_, _, mean, sd, n) in table.iter().filter(|r| &r.0 == task) {
                s += &match n {
                    0 => " |".to_string(),
                    _ => format!(" {mean:.2} ± {sd:.2} |"),
                };
            }
            s += "\n";
        }
        s += "\n";
    }
    s
}
