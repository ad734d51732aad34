//! Training a [`LanguageModel`] on a token stream: random windows, AdamW with nanoGPT's
//! schedule ([`posenc_train::schedule::Cosine`]: linear warm-up, cosine decay to a floor),
//! cross-entropy of every next token, through the one training loop ([`posenc_train::fit`]).
//!
//! [`evaluate`] measures the loss over windows of any length, position by position, which
//! is how the encodings' behaviour past the trained context is measured.
//!
//! The same seed gives the same run: the weights are a function of the seed and the windows
//! of step `s` a function of `(seed, s)`, so a resumed run ([`crate::run`]) is
//! bit-identical to one that never stopped, dropout included (its masks are drawn from
//! `(seed, s)` too: [`posenc_transformer::dropout::seed`]).

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use posenc::Positions;
use posenc_error::ensure;
use posenc_train::error::Result;
use posenc_transformer::{LanguageModel, LmConfig, Streaming};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::text_tokenizer::TextTokenizer;
use posenc_train::fit::RunSchedule;
use posenc_train::fit::{StepLoss, Task, Trainer};
use posenc_train::loss::label_smoothed_cross_entropy;
use posenc_train::optim::AdamWConfig;

/// The settings of one run. The defaults are nanoGPT's documented CPU run on
/// `shakespeare_char` (4 layers, 4 heads, width 128, context 64, batch 12, 2 000 steps,
/// lr 1e-3 → 1e-4, warm-up 100, β₂ 0.99, dropout 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LmTrainConfig {
    /// The model (its `context` is the training window).
    pub model: LmConfig,
    /// How text becomes tokens.
    pub tokenizer: TextTokenizer,
    /// Seed (of the weights and the windows drawn), steps, windows per step, linear
    /// warm-up steps, AdamW, and how often to validate and save.
    #[serde(
        flatten,
        deserialize_with = "RunSchedule::or_defaults_of::<LmTrainConfig, _>"
    )]
    pub run: RunSchedule,
    /// Peak learning rate.
    pub lr: f64,
    /// The floor the cosine decays to.
    pub min_lr: f64,
    /// Validation windows of `context` tokens.
    pub eval_windows: usize,
    /// Randomized positions (`posenc_train::randomized`): train each step's windows at a sorted
    /// random subset of `0..range` instead of `0..context`. `None`: consecutive positions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub randomized_positions: Option<usize>,
    /// Start from a trained run's weights instead of random ones (`lm train --from`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_from: Option<InitFrom>,
    /// Train on this text instead of the Shakespeare corpus (`lm train --text`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<crate::corpus::TextSource>,
}

/// The trained run a new one starts from: where it is, and which run it must be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitFrom {
    /// Its directory.
    pub path: std::path::PathBuf,
    /// Its run id: a different run found there later is refused, not used.
    pub run: String,
}

impl Default for LmTrainConfig {
    fn default() -> Self {
        Self {
            model: LmConfig::default(),
            tokenizer: TextTokenizer::Char,
            run: RunSchedule {
                seed: 1337,
                steps: 2000,
                batch_size: 12,
                warmup: 100,
                adam: AdamWConfig::nanogpt(),
                eval_every: 250,
                save_every: 500,
            },
            lr: 1e-3,
            min_lr: 1e-4,
            eval_windows: 100,
            randomized_positions: None,
            init_from: None,
            text: None,
        }
    }
}

impl LmTrainConfig {
    /// The learning rate at step `t` (0-based).
    pub fn lr(&self, t: usize) -> f64 {
        self.schedule().lr(t)
    }

    fn schedule(&self) -> posenc_train::schedule::Cosine {
        posenc_train::schedule::Cosine {
            lr: self.lr,
            min_lr: self.min_lr,
            warmup: self.run.warmup,
            steps: self.run.steps,
        }
    }

    /// Checks the settings, and that a step's attention scores fit in memory.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        self.run.validate()?;
        posenc_train::memory::fits_in_memory(
            self.run.batch_size,
            self.model.heads,
            self.model.context,
            "context",
        )?;
        ensure!(self.eval_windows > 0, "eval_windows must be at least 1");
        posenc::limits::check("eval_windows", self.eval_windows, EVAL_WINDOWS_LIMIT)?;
        if let Some(range) = self.randomized_positions {
            posenc_train::randomized::check(range, self.model.context, None)?;
        }
        self.schedule().validate()
    }
}

/// The most windows one evaluation takes.
const EVAL_WINDOWS_LIMIT: usize = 1 << 20;

/// `count` windows of `len + 1` tokens starting at random offsets of `stream`: the inputs
/// `(count, len)` and the next tokens `(count · len)`, on `device`.
pub fn random_windows(
    stream: &[u32],
    len: usize,
    count: usize,
    rng: &mut impl Rng,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    ensure!(
        stream.len() > len + 1,
        "a stream of {} tokens has no window of {} + 1",
        stream.len(),
        len
    );
    let starts: Vec<usize> = (0..count)
        .map(|_| rng.random_range(0..stream.len() - len - 1))
        .collect();
    windows(stream, len, &starts, device)
}

fn windows(
    stream: &[u32],
    len: usize,
    starts: &[usize],
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let inputs: Vec<u32> = starts
        .iter()
        .flat_map(|&s| stream[s..s + len].iter().copied())
        .collect();
    let targets: Vec<u32> = starts
        .iter()
        .flat_map(|&s| stream[s + 1..s + len + 1].iter().copied())
        .collect();
    Ok((
        Tensor::from_vec(inputs, (starts.len(), len), device)?,
        Tensor::from_vec(targets, starts.len() * len, device)?,
    ))
}

/// Mean cross-entropy of the next token at every position of `inputs (batch, len)`, the
/// tokens sitting at positions `at`.
pub fn loss(
    model: &LanguageModel,
    inputs: &Tensor,
    targets: &Tensor,
    at: Positions,
) -> Result<Tensor> {
    let logits = model.logits_at(inputs, at)?;
    let (b, t, v) = logits.dims3()?;
    // No token is padding in a stream: u32::MAX matches none.
    label_smoothed_cross_entropy(&logits.reshape((b * t, v))?, targets, 0.0, u32::MAX)
}

/// Windows evaluated in one forward.
const EVAL_BATCH: usize = 8;

/// The most bytes of key/value cache a batch of long evaluation windows may take (a 32k
/// window of SmolLM2-135M takes 1.5 GB alone, and goes one at a time).
const LONG_EVAL_BYTES: u128 = 2 << 30;

/// The next-token loss over windows of one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthEval {
    /// The window length.
    pub len: usize,
    /// How many windows were evaluated.
    pub windows: usize,
    /// Mean loss (nats per token) over every position.
    pub loss: f64,
    /// Mean loss over the positions at or past `trained` (none if the window is no longer).
    pub tail_loss: Option<f64>,
    /// Mean loss at each position `0..len`, over the windows.
    pub by_position: Vec<f64>,
    /// Where each window starts in the token stream (empty in records written before it
    /// was kept).
    #[serde(default)]
    pub starts: Vec<usize>,
    /// Each window's mean loss, in the order of `starts`: how much the text, not the
    /// model, moves `loss` (empty in records written before it was kept).
    #[serde(default)]
    pub window_losses: Vec<f64>,
    /// Each window's mean loss over the positions at or past `trained`, in the order of
    /// `starts` (empty where the window is no longer, or in older records).
    #[serde(default)]
    pub window_tail_losses: Vec<f64>,
}

impl LengthEval {
    /// Perplexity: `exp(loss)`.
    pub fn perplexity(&self) -> f64 {
        self.loss.exp()
    }

    /// The sample standard deviation of [`LengthEval::window_losses`]: none with fewer
    /// than two windows.
    pub fn window_sd(&self) -> Option<f64> {
        sample_sd(&self.window_losses)
    }

    /// The sample standard deviation of [`LengthEval::window_tail_losses`]: none with
    /// fewer than two windows, or no tail.
    pub fn window_tail_sd(&self) -> Option<f64> {
        sample_sd(&self.window_tail_losses)
    }

    /// The mean loss over the positions of each octave of the trained context `trained` = L:
    /// `[0, L/2)`, `[L/2, L)`, `[L, 2L)`, `[2L, 4L)`, … as far as the window reaches (the
    /// last one cut at its end). Positions past L in one octave face the same distances
    /// whatever the window's length, so windows of several lengths over one text compare
    /// octave by octave; a window's mean does not, as its early, high-loss positions weigh
    /// less the longer it is.
    pub fn by_octave(&self, trained: usize) -> Vec<PositionBucket> {
        let mut edges = vec![0];
        let mut edge = (trained / 2).max(1);
        while edge < self.len {
            if edge > *edges.last().unwrap_or(&0) {
                edges.push(edge);
            }
            edge = if edge < trained { trained } else { edge * 2 };
        }
        edges.push(self.len);
        edges
            .windows(2)
            .map(|w| PositionBucket {
                from: w[0],
                to: w[1],
                loss: self.by_position[w[0]..w[1]].iter().sum::<f64>() / (w[1] - w[0]) as f64,
            })
            .collect()
    }
}

fn sample_sd(xs: &[f64]) -> Option<f64> {
    (xs.len() >= 2).then(|| posenc_train::results::mean_sd(xs).1)
}

/// The mean loss over the positions `from..to` of a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PositionBucket {
    /// The first position.
    pub from: usize,
    /// One past the last position.
    pub to: usize,
    /// Mean loss (nats per token) over these positions.
    pub loss: f64,
}

/// The next-token loss over up to `max_windows` non-overlapping windows of `len` tokens,
/// spread evenly over `stream`, position by position. `trained` is the context the model
/// was trained on: [`LengthEval::tail_loss`] averages the positions past it, which is where
/// extrapolation shows.
///
/// # Errors
/// A stream shorter than one window, no windows, a window whose attention scores would not
/// fit in memory, or positions past a learned encoding's table.
pub fn evaluate(
    model: &LanguageModel,
    stream: &[u32],
    len: usize,
    max_windows: usize,
    trained: usize,
) -> Result<LengthEval> {
    evaluate_observed(model, stream, len, max_windows, trained, None, |_| {})
}

/// As [`evaluate`], also calling `on_tokens(n)` each time `n` more tokens have been
/// scored: a progress bar for long windows.
///
/// With `streaming`, each window is read a token at a time through a rolling key/value
/// cache ([`Streaming`]: its first tokens as sinks and the most recent ones, each at its
/// place within the cache), as StreamingLLM evaluates: memory stays at the cache's window
/// however long the window read.
///
/// # Errors
/// As [`evaluate`]; a streaming window past a learned encoding's table.
pub fn evaluate_observed(
    model: &LanguageModel,
    stream: &[u32],
    len: usize,
    max_windows: usize,
    trained: usize,
    streaming: Option<Streaming>,
    mut on_tokens: impl FnMut(usize),
) -> Result<LengthEval> {
    ensure!(max_windows > 0, "evaluate at least one window");
    posenc::limits::check("windows", max_windows, EVAL_WINDOWS_LIMIT)?;
    ensure!(
        len > 0,
        "a window must hold at least one token, got length 0"
    );
    let long = len > model.prefill_chunk();
    // Long windows go as many at a time as keep their caches within LONG_EVAL_BYTES.
    let batch = match (streaming, long) {
        (Some(s), _) => {
            model.check_cache(1, s.window())?;
            let each = model.cache_bytes(1, s.window()).max(1);
            (LONG_EVAL_BYTES / each).clamp(1, EVAL_BATCH as u128) as usize
        }
        (None, true) => {
            model.check_cache(1, len)?;
            (LONG_EVAL_BYTES / model.cache_bytes(1, len).max(1)).clamp(1, EVAL_BATCH as u128)
                as usize
        }
        (None, false) => {
            posenc_train::memory::fits_in_memory(
                EVAL_BATCH,
                model.config().heads,
                len,
                "the window length",
            )?;
            EVAL_BATCH
        }
    };
    let slots = stream.len().saturating_sub(1) / len;
    ensure!(
        slots > 0,
        "a stream of {} tokens has no window of {len} + 1",
        stream.len()
    );
    let count = max_windows.min(slots);
    let starts: Vec<usize> = (0..count).map(|i| i * slots / count * len).collect();
    let mut sums = vec![0.0f64; len];
    let mut per_window = Vec::with_capacity(count);
    let mut per_tail = Vec::new();
    for chunk in starts.chunks(batch) {
        let (x, y) = windows(stream, len, chunk, &model.device())?;
        let y = y.reshape((chunk.len(), len))?;
        let nll = match streaming {
            Some(s) => streamed_losses(model, &x, &y, s, &mut on_tokens)?,
            None => window_losses(model, &x, &y, &mut on_tokens)?,
        };
        for (s, v) in sums.iter_mut().zip(nll.sum(0)?.to_vec1::<f64>()?) {
            *s += v;
        }
        per_window.extend(nll.mean(1)?.to_vec1::<f64>()?);
        if len > trained {
            per_tail.extend(
                nll.narrow(1, trained, len - trained)?
                    .mean(1)?
                    .to_vec1::<f64>()?,
            );
        }
    }
    let by_position: Vec<f64> = sums.iter().map(|s| s / count as f64).collect();
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    Ok(LengthEval {
        len,
        windows: count,
        loss: mean(&by_position),
        tail_loss: (len > trained).then(|| mean(&by_position[trained..])),
        by_position,
        starts,
        window_losses: per_window,
        window_tail_losses: per_tail,
    })
}

/// The next-token losses of windows `x (batch, n)` against their next tokens `y (batch, n)`:
/// `(batch, n)` in f64. Windows past [`LanguageModel::prefill_chunk`] go chunk by chunk through the
/// key/value cache, memory linear in the length, as a generation reads its prompt;
/// `on_tokens` sees each chunk's token count.
fn window_losses(
    model: &LanguageModel,
    x: &Tensor,
    y: &Tensor,
    on_tokens: &mut impl FnMut(usize),
) -> Result<Tensor> {
    let (b, n) = x.dims2()?;
    let size = model.prefill_chunk();
    if n <= size {
        let nll = nll(&model.logits(x)?, y)?;
        on_tokens(b * n);
        return Ok(nll);
    }
    let mut cache = model.cache(n);
    cache.read_until(n);
    let mut parts = Vec::new();
    for start in (0..n).step_by(size) {
        let k = size.min(n - start);
        let logits = model.logits_cached(&x.narrow(1, start, k)?, &mut cache)?;
        parts.push(nll(&logits, &y.narrow(1, start, k)?)?);
        on_tokens(b * k);
    }
    Ok(Tensor::cat(&parts, 1)?)
}

/// The next-token losses of windows `x (batch, n)` against `y (batch, n)` read a token at
/// a time through a rolling cache ([`Streaming`]); `on_tokens` sees each step's count.
fn streamed_losses(
    model: &LanguageModel,
    x: &Tensor,
    y: &Tensor,
    streaming: Streaming,
    on_tokens: &mut impl FnMut(usize),
) -> Result<Tensor> {
    let (b, n) = x.dims2()?;
    let mut cache = model.rolling_cache(streaming)?;
    let mut parts = Vec::with_capacity(n);
    for t in 0..n {
        let logits = model.logits_cached(&x.narrow(1, t, 1)?, &mut cache)?;
        parts.push(nll(&logits, &y.narrow(1, t, 1)?)?);
        on_tokens(b);
    }
    Ok(Tensor::cat(&parts, 1)?)
}

/// The negative log-likelihood of `targets (batch, n)` under `logits (batch, n, vocab)`:
/// `(batch, n)` in f64.
fn nll(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logp = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    Ok(logp
        .gather(&targets.unsqueeze(D::Minus1)?.contiguous()?, D::Minus1)?
        .squeeze(D::Minus1)?
        .neg()?
        .to_dtype(DType::F64)?)
}

/// Perplexity with a sliding window (`lm eval --stride`, as in transformers' perplexity
/// guide): windows of `len` tokens start every `stride` tokens, and each scores only the
/// tokens no earlier window scored, so every token of the stream is scored once, with up
/// to `len − stride` tokens of context before it even at a window's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StridedEval {
    /// The window length.
    pub len: usize,
    /// How far each window starts after the previous.
    pub stride: usize,
    /// Windows run.
    pub windows: usize,
    /// Tokens scored (every token of the stream after the first).
    pub tokens: usize,
    /// Mean loss over them, nats per token.
    pub loss: f64,
}

impl StridedEval {
    /// Perplexity: `exp(loss)`.
    pub fn perplexity(&self) -> f64 {
        self.loss.exp()
    }
}

/// The sliding-window evaluation of `stream` ([`StridedEval`]); `on_tokens(n)` sees each
/// `n` tokens read.
///
/// # Errors
/// A stride of 0 or past `len`, a stream shorter than one window, a window too long to fit.
pub fn evaluate_strided(
    model: &LanguageModel,
    stream: &[u32],
    len: usize,
    stride: usize,
    mut on_tokens: impl FnMut(usize),
) -> Result<StridedEval> {
    ensure!(
        stride > 0 && stride <= len,
        "the stride must be between 1 and the window length {len}, got {stride}"
    );
    ensure!(
        stream.len() > len,
        "a stream of {} tokens has no window of {len} + 1",
        stream.len()
    );
    let batch = match len > model.prefill_chunk() {
        true => {
            model.check_cache(1, len)?;
            1
        }
        false => {
            posenc_train::memory::fits_in_memory(
                EVAL_BATCH,
                model.config().heads,
                len,
                "the window length",
            )?;
            EVAL_BATCH
        }
    };
    // Windows start every `stride` tokens until one reaches the stream's end (that last
    // one may be shorter), as the guide's loop over `begin` does.
    let mut starts = vec![0];
    while starts[starts.len() - 1] + len + 1 < stream.len() {
        starts.push(starts[starts.len() - 1] + stride);
    }
    posenc::limits::check("windows", starts.len(), EVAL_WINDOWS_LIMIT)?;
    let (mut total, mut tokens, mut scored_to) = (0.0f64, 0usize, 0usize);
    let (full, last) = starts.split_at(starts.len() - 1);
    let short = stream.len() - 1 - last[0];
    let groups = full
        .chunks(batch)
        .map(|c| (c, len))
        .chain([(last, short.min(len))]);
    for (chunk, n) in groups {
        let (x, y) = windows(stream, n, chunk, &model.device())?;
        let y = y.reshape((chunk.len(), n))?;
        let rows = window_losses(model, &x, &y, &mut on_tokens)?.to_vec2::<f64>()?;
        for (&start, row) in chunk.iter().zip(rows) {
            // Position i predicts token start + 1 + i: score the ones past what was scored.
            let first = scored_to.saturating_sub(start);
            total += row[first..].iter().sum::<f64>();
            tokens += n - first;
            scored_to = start + n;
        }
    }
    Ok(StridedEval {
        len,
        stride,
        windows: starts.len(),
        tokens,
        loss: total / tokens as f64,
    })
}

/// One validation record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmRecord {
    /// Step.
    pub step: usize,
    /// Mean training loss since the previous record.
    pub train_loss: f64,
    /// Validation loss over windows of the trained context.
    pub valid_loss: f64,
    /// Seconds since the run began.
    pub elapsed_s: f64,
}

impl posenc_train::fit::Validation for LmRecord {
    fn step(&self) -> usize {
        self.step
    }
    fn summary(&self) -> String {
        format!(
            "train loss {:.4}  valid loss {:.4}",
            self.train_loss, self.valid_loss
        )
    }
    fn scalars(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("train/loss_mean", self.train_loss),
            ("valid/loss", self.valid_loss),
        ]
    }
}

posenc_train::settings!(LmTrainConfig, |cfg, step| cfg.lr(step - 1));

/// The state of a run: its config and progress (`trainer.json`, and the header of every
/// checkpoint).
pub type LmState = posenc_train::fit::RunState<LmTrainConfig, LmRecord>;

/// The last validation loss of a run.
pub fn valid_loss(state: &LmState) -> Option<f64> {
    state.history.last().map(|r| r.valid_loss)
}

/// The token streams a run trains and validates on.
#[derive(Debug, Clone, Default)]
pub struct LmData {
    /// Training stream.
    pub train: Vec<u32>,
    /// Validation stream (empty: no validation).
    pub valid: Vec<u32>,
}

impl LmData {
    /// The train and valid works of `corpus`, tokenized.
    ///
    /// # Errors
    /// A tokenizer that fails on the text.
    pub fn from_corpus(
        corpus: &crate::corpus::Corpus,
        tokenizer: &tokenizers::Tokenizer,
    ) -> Result<Self> {
        use crate::corpus::Corpus;
        use crate::text_tokenizer::encode;
        Ok(Self {
            train: encode(tokenizer, &Corpus::stream(&corpus.train))?,
            valid: encode(tokenizer, &Corpus::stream(&corpus.valid))?,
        })
    }
}

/// The language-model task: a model and its token streams, built and checked before
/// anything is written. Its runs start, continue and open through [`posenc_train::job`],
/// from [`crate::run::LmInputs`].
pub struct LmTask<'a> {
    pub(crate) varmap: VarMap,
    model: LanguageModel,
    data: &'a LmData,
}

impl<'a> LmTask<'a> {
    /// A fresh model of `cfg` on `device` (weights not yet initialised or restored).
    pub(crate) fn new(cfg: &LmTrainConfig, data: &'a LmData, device: &Device) -> Result<Self> {
        cfg.validate()?;
        ensure!(
            data.train.len() > cfg.model.context + 1,
            "the training stream ({} tokens) is shorter than one window of context {} + 1",
            data.train.len(),
            cfg.model.context
        );
        let varmap = VarMap::new();
        let model = LanguageModel::new(
            &cfg.model,
            VarBuilder::from_varmap(&varmap, DType::F32, device),
        )?;
        if let Some(max) = model.max_positions() {
            ensure!(
                max >= cfg.model.context,
                "the encoding has max_positions = {max} but the context is {}",
                cfg.model.context
            );
        }
        if let Some(range) = cfg.randomized_positions {
            posenc_train::randomized::check(range, cfg.model.context, model.max_positions())?;
        }
        Ok(Self {
            varmap,
            model,
            data,
        })
    }
}

impl Task for LmTask<'_> {
    type Config = LmTrainConfig;
    type Record = LmRecord;

    fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// Random windows of the training stream, drawn (with the randomized positions, if
    /// any) from the generator of stream `step − 1`.
    fn loss(&mut self, cfg: &LmTrainConfig, step: usize) -> Result<StepLoss> {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.run.seed);
        rng.set_stream(step as u64 - 1);
        let (x, y) = random_windows(
            &self.data.train,
            cfg.model.context,
            cfg.run.batch_size,
            &mut rng,
            &self.model.device(),
        )?;
        let positions = cfg
            .randomized_positions
            .map(|range| posenc_train::randomized::draw(&mut rng, cfg.model.context, range))
            .transpose()?;
        let at = positions
            .as_deref()
            .map_or(Positions::From(0), Positions::At);
        Ok(StepLoss {
            loss: loss(&self.model, &x, &y, at)?,
            tokens: x.elem_count(),
        })
    }

    /// The loss over validation windows of the trained context (`None` without a
    /// validation stream).
    fn validate(
        &mut self,
        cfg: &LmTrainConfig,
        step: usize,
        train_loss: f64,
        elapsed_s: f64,
    ) -> Result<Option<LmRecord>> {
        if self.data.valid.is_empty() {
            return Ok(None);
        }
        let view = LanguageModel::frozen(&cfg.model, &self.varmap, &self.model.device())?;
        let valid = evaluate(
            &view,
            &self.data.valid,
            cfg.model.context,
            cfg.eval_windows,
            cfg.model.context,
        )?;
        Ok(Some(LmRecord {
            step,
            train_loss,
            valid_loss: valid.loss,
            elapsed_s,
        }))
    }
}

/// A model trained in memory, and what training saw.
pub struct LmRun {
    /// The trained model, its weights detached from `varmap` (for inference).
    pub model: LanguageModel,
    /// Its weights.
    pub varmap: VarMap,
    /// The run's progress and validation history.
    pub state: LmState,
    /// Training loss at every step.
    pub losses: Vec<f64>,
}

/// Trains a fresh model in memory on `device` (nothing is written; [`posenc_train::job::train`]
/// trains into a run directory), calling `progress(state, loss)` after every step.
///
/// # Errors
/// Bad settings, a stream shorter than one window, or a loss that is not finite.
pub fn train_lm(
    cfg: &LmTrainConfig,
    data: &LmData,
    device: &Device,
    mut progress: impl FnMut(&LmState, f64),
) -> Result<LmRun> {
    let task = LmTask::new(cfg, data, device)?;
    posenc_train::init::initialize(&task.varmap, cfg.run.seed)?;
    let varmap = task.varmap.clone();
    let mut state = LmState::new(String::new(), cfg.clone());
    let mut losses = Vec::with_capacity(cfg.run.steps);
    Trainer::new(task, cfg)?.run_in_memory(&mut state, |s, stepped| {
        losses.push(stepped.loss);
        progress(s, stepped.loss);
    })?;
    let model = LanguageModel::frozen(&cfg.model, &varmap, device)?;
    Ok(LmRun {
        model,
        varmap,
        state,
        losses,
    })
}
