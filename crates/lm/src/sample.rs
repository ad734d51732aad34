//! Generating text from a [`LanguageModel`]: seeded sampling with a repetition penalty,
//! temperature, top-k, top-p (nucleus sampling, Holtzman et al. 2020) and min-p (Nguyen et
//! al. 2024); temperature 0 is greedy. The steps run in transformers' order:
//!
//! ```text
//! l_i ← l_i / r  (l_i > 0),  l_i · r  (l_i < 0)   for each token i among the last n read (repeat penalty r)
//! p_i ∝ exp(l_i / T)                               over the k most likely tokens (top-k),
//!                                                    then the fewest of them whose mass reaches p (top-p),
//!                                                    then those with p_i ≥ min_p · max p (min-p)
//! ```
//!
//! (llama.cpp applies its temperature last, after min-p, so its min-p sees `T = 1`.)
//!
//! Generation runs the prompt once and then one token at a time with the key/value cache,
//! so each new token costs one position, not the whole sequence.

use std::collections::VecDeque;

use candle_core::Tensor;
use posenc_error::ensure;
use posenc_train::error::Result;
use posenc_transformer::LanguageModel;
use posenc_transformer::{StackCache, Streaming};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// How to pick each next token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sampling {
    /// Divides the scores before the softmax: 0 picks the most likely token (greedy),
    /// 1 samples the model's distribution, more flattens it.
    pub temperature: f64,
    /// Sample among the `k` most likely tokens only.
    pub top_k: Option<usize>,
    /// Sample among the fewest most likely tokens whose probabilities add up to `p`.
    pub top_p: Option<f64>,
    /// Sample among the tokens at least this fraction as likely as the most likely one.
    pub min_p: Option<f64>,
    /// Makes the tokens among the last [`Sampling::repeat_last_n`] read less likely (CTRL's
    /// penalty, Keskar et al. 2019): a positive score is divided by it, a negative one
    /// multiplied. 1 is off; greedy decoding takes it too.
    pub repeat_penalty: f64,
    /// How many of the latest tokens, prompt included, the penalty looks at (0: none).
    pub repeat_last_n: usize,
    /// Seed of the draws: the same seed gives the same text.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl Sampling {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Checks every setting is in its domain.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.temperature.is_finite() && self.temperature >= 0.0,
            "temperature must be a finite number ≥ 0, got {}",
            self.temperature
        );
        ensure!(self.top_k != Some(0), "top-k must be at least 1, got 0");
        if let Some(p) = self.top_p {
            ensure!(p > 0.0 && p <= 1.0, "top-p must be in (0, 1], got {p}");
        }
        if let Some(p) = self.min_p {
            ensure!((0.0..=1.0).contains(&p), "min-p must be in [0, 1], got {p}");
        }
        ensure!(
            self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0,
            "the repeat penalty must be a finite number > 0 (1 is off), got {}",
            self.repeat_penalty
        );
        posenc::limits::check(
            "repeat-last-n",
            self.repeat_last_n,
            posenc::limits::MAX_POSITIONS,
        )?;
        Ok(())
    }

    fn penalizes(&self) -> bool {
        self.repeat_penalty != 1.0 && self.repeat_last_n > 0
    }
}

/// Draws tokens from score rows by a [`Sampling`].
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: Sampling,
    rng: ChaCha8Rng,
    /// The latest tokens read, for the repeat penalty (empty when it is off).
    recent: VecDeque<u32>,
}

impl Sampler {
    /// A sampler seeded by `cfg.seed`.
    pub fn new(cfg: Sampling) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            recent: VecDeque::new(),
        })
    }

    /// Notes tokens read (the prompt's), for the repeat penalty; [`Sampler::pick`] notes
    /// its own picks.
    pub fn read(&mut self, tokens: &[u32]) {
        if !self.cfg.penalizes() {
            return;
        }
        let n = self.cfg.repeat_last_n;
        self.recent
            .extend(&tokens[tokens.len().saturating_sub(n)..]);
        let over = self.recent.len().saturating_sub(n);
        self.recent.drain(..over);
    }

    /// The scores with the repeat penalty applied to the tokens read lately (in f32, as
    /// transformers' processor computes it).
    fn penalized<'a>(&self, logits: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        if self.recent.is_empty() {
            return logits.into();
        }
        let r = self.cfg.repeat_penalty as f32;
        let mut scores = logits.to_vec();
        let mut seen = vec![false; scores.len()];
        for &token in &self.recent {
            let Some(score) = scores.get_mut(token as usize) else {
                continue;
            };
            if !std::mem::replace(&mut seen[token as usize], true) {
                *score = if *score < 0.0 { *score * r } else { *score / r };
            }
        }
        scores.into()
    }

    /// The tokens the next draw chooses among, most likely first, with their
    /// probabilities (which add up to 1). Greedy: the most likely token alone.
    pub fn distribution(&self, logits: &[f32]) -> Vec<(u32, f64)> {
        let logits = self.penalized(logits);
        let (order, probs) = self.candidates(&logits);
        let total: f64 = probs.iter().sum();
        order
            .iter()
            .zip(&probs)
            .map(|(&i, &p)| (i as u32, p / total))
            .collect()
    }

    /// The token picked from one row of scores (logits).
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let logits = self.penalized(logits);
        let (order, probs) = self.candidates(&logits);
        // Greedy draws nothing; sampling always draws, so a seed's stream of draws is the
        // same whatever the cuts leave.
        let token = match self.cfg.temperature == 0.0 || logits.len() <= 1 {
            true => order[0] as u32,
            false => self.draw(&order, &probs),
        };
        self.read(&[token]);
        token
    }

    /// The candidates (most likely first) and their weights, not yet normalised after the
    /// last cut.
    fn candidates(&self, logits: &[f32]) -> (Vec<usize>, Vec<f64>) {
        // Most likely first; ties to the lower id, so greedy is argmax's first maximum.
        let before = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        if self.cfg.temperature == 0.0 || logits.len() <= 1 {
            return (
                vec![(0..logits.len()).min_by(before).unwrap_or(0)],
                vec![1.0],
            );
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // The k best in order: a selection first, so that a large vocabulary is not sorted
        // whole for a small k (the order is total, so the result is the same).
        let k = self.cfg.top_k.unwrap_or(order.len()).clamp(1, order.len());
        if k < order.len() {
            order.select_nth_unstable_by(k - 1, before);
            order.truncate(k);
        }
        order.sort_by(before);
        let top = f64::from(logits[order[0]]);
        let mut probs: Vec<f64> = order
            .iter()
            .map(|&i| ((f64::from(logits[i]) - top) / self.cfg.temperature).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        if let Some(top_p) = self.cfg.top_p {
            let mut mass = 0.0;
            let keep = probs
                .iter()
                .position(|p| {
                    mass += p;
                    mass >= top_p
                })
                .map_or(probs.len(), |i| i + 1);
            probs.truncate(keep);
            order.truncate(keep);
        }
        if let Some(min_p) = self.cfg.min_p {
            // Relative to the most likely, so the cuts before leave it unchanged.
            let floor = min_p * probs[0];
            let keep = probs.iter().take_while(|&&p| p >= floor).count().max(1);
            probs.truncate(keep);
            order.truncate(keep);
        }
        (order, probs)
    }

    fn draw(&mut self, order: &[usize], probs: &[f64]) -> u32 {
        let total: f64 = probs.iter().sum();
        let mut u = self.rng.random::<f64>() * total;
        for (&i, &p) in order.iter().zip(probs) {
            if u < p {
                return i as u32;
            }
            u -= p;
        }
        order[probs.len() - 1] as u32
    }
}

/// `max_new` tokens generated after `prompt` (not repeated in the result).
///
/// # Errors
/// An empty prompt, bad settings, a token outside the vocabulary, or positions past a
/// learned encoding's table.
pub fn generate(
    model: &LanguageModel,
    prompt: &[u32],
    max_new: usize,
    sampling: Sampling,
) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    generate_with(model, prompt, max_new, sampling, |token| {
        out.push(token);
        Ok(true)
    })?;
    Ok(out)
}

/// Generates after `prompt`, handing each token to `on_token` as soon as it is drawn (to
/// stream it); stops after `max_new` tokens or when `on_token` returns `false` (at an
/// end-of-sequence token, say).
///
/// # Errors
/// As [`generate`]; a prompt and generation whose key/value cache would pass
/// [`posenc_transformer::lm::MAX_CACHE_BYTES`], refused before anything runs; and any
/// error of `on_token`, which stops generation.
pub(crate) fn generate_with(
    model: &LanguageModel,
    prompt: &[u32],
    max_new: usize,
    sampling: Sampling,
    on_token: impl FnMut(u32) -> Result<bool>,
) -> Result<()> {
    generate_observed(model, prompt, max_new, sampling, None, |_| {}, on_token)
}

/// What a generation keeps of its sequence once it is longer than a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Every token is drawn from the last `n` tokens only (nanoGPT's crop at
    /// `block_size`): the prompt is cropped to them, and once the sequence fills them, they
    /// are read again from position 0 for each new token.
    Crop(usize),
    /// The key/value cache rolls ([`Streaming`]): it keeps the first tokens as sinks and
    /// the most recent ones, each at its place within the cache, so each new token costs
    /// one position and memory stays flat, however long the generation (StreamingLLM).
    Roll(Streaming),
}

/// As `generate_with`, also calling `on_prompt(n)` each time `n` more tokens of the
/// prompt have been read ([`LanguageModel::prefill_chunk`] at a time): a progress bar for
/// long prompts. With a `window`, the sequence is cropped or the cache rolls ([`Window`]).
///
/// # Errors
/// As `generate_with`; a window of 0.
pub fn generate_observed(
    model: &LanguageModel,
    prompt: &[u32],
    max_new: usize,
    sampling: Sampling,
    window: Option<Window>,
    mut on_prompt: impl FnMut(usize),
    mut on_token: impl FnMut(u32) -> Result<bool>,
) -> Result<()> {
    ensure!(
        !prompt.is_empty(),
        "the prompt is empty: give at least one token"
    );
    ensure!(
        window != Some(Window::Crop(0)),
        "the window must hold at least one token"
    );
    posenc::limits::check("tokens", max_new, posenc::limits::MAX_POSITIONS)?;
    let (window, rolling) = match window {
        Some(Window::Crop(n)) => (n, None),
        Some(Window::Roll(s)) => (usize::MAX, Some(s)),
        None => (usize::MAX, None),
    };
    // The cache holds the prompt and every token fed back (the last one drawn is not).
    let positions = (prompt.len() + max_new.saturating_sub(1)).min(window);
    let mut cache = match rolling {
        Some(s) => model.rolling_cache(s)?,
        None => {
            model.check_cache(1, positions)?;
            model.cache(positions)
        }
    };
    let mut sampler = Sampler::new(sampling)?;
    if max_new == 0 {
        return Ok(());
    }
    let mut seen = prompt[prompt.len().saturating_sub(window)..].to_vec();
    sampler.read(&seen);
    let mut logits = read(model, &seen, &mut cache, &mut on_prompt)?;
    for i in 0..max_new {
        let token = sampler.pick(&logits.get(0)?.to_vec1::<f32>()?);
        if !on_token(token)? || i + 1 == max_new {
            break;
        }
        if window != usize::MAX {
            seen.push(token);
        }
        logits = if cache.len() < window {
            let next = Tensor::new(&[token], &model.device())?.unsqueeze(0)?;
            model.step(&next, &mut cache)?
        } else {
            // The window is full: the last `window` tokens again, from position 0.
            seen.drain(..seen.len() - window);
            cache = model.cache(window);
            read(model, &seen, &mut cache, |_| {})?
        };
    }
    Ok(())
}

/// Reads `ids` into `cache` a chunk at a time (`on_chunk` sees each chunk's length);
/// returns the scores after the last.
fn read(
    model: &LanguageModel,
    ids: &[u32],
    cache: &mut StackCache,
    mut on_chunk: impl FnMut(usize),
) -> Result<Tensor> {
    // One sequence, read in chunks for the progress hook's sake.
    cache.read_until(cache.len() + ids.len());
    let mut logits = None;
    for chunk in ids.chunks(model.prefill_chunk()) {
        let x = Tensor::new(chunk, &model.device())?.unsqueeze(0)?;
        logits = Some(model.step(&x, cache)?);
        on_chunk(chunk.len());
    }
    Ok(logits.ok_or_else(|| posenc_error::invalid!("nothing to read: the prompt is empty"))?)
}

/// About how many seconds `model` takes to read a prompt of `tokens`, on this machine: a
/// probe of up to 128 tokens is read and timed (after a short pass that touches every
/// weight), and the time scaled by the operations each read needs,
///
/// ```text
/// ops(n) = 2 · P · n + 2 · layers · d_model · n²
/// ```
///
/// (`P` the stack's weights, each multiplied once per token; the second term attention's
/// scores and weighted sums, each query against every earlier position). An estimate to
/// warn with, not a benchmark: it is right within a small factor.
///
/// # Errors
/// A failed forward pass, or `tokens` of 0.
pub fn estimate_read_seconds(model: &LanguageModel, tokens: usize) -> Result<f64> {
    ensure!(tokens > 0, "nothing to read: the prompt is empty");
    let cfg = model.config();
    let ops = |n: usize| {
        let n = n as f64;
        let weights = cfg.block().stack_parameters(cfg.layers) as f64;
        2.0 * weights * n + 2.0 * (cfg.layers * cfg.d_model) as f64 * n * n
    };
    let pass = |n: usize| -> Result<f64> {
        let mut cache = model.cache(n);
        let start = std::time::Instant::now();
        read(model, &vec![0; n], &mut cache, |_| {})?;
        Ok(start.elapsed().as_secs_f64())
    };
    let probe = tokens.min(128);
    pass(probe.min(8))?;
    let seconds = pass(probe)?;
    Ok(seconds * ops(tokens) / ops(probe))
}
