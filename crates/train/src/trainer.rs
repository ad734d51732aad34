//! Training: batches in a seeded order, label-smoothed loss, AdamW on the Noam schedule,
//! periodic validation, atomic checkpoints and exact resumption.
//!
//! An output directory holds the model for inference (`config.json`, `model.safetensors`,
//! `source.tokenizer.json`, `target.tokenizer.json`) and the state to resume from
//! (`training.safetensors`: weights, AdamW moments and the step, in one file so they can
//! never disagree; `trainer.json`: the run's config and validation history). Every file
//! is written to a temporary name and renamed, so killing the process at any moment
//! leaves the previous checkpoint loadable.
//!
//! The same seed gives the same run: the data, the initial weights and the order of
//! batches are functions of the seed (the batch at step `s` is a function of `(seed, s)`,
//! so resuming needs no generator state). Dropout draws from candle's CPU generator, which
//! cannot be seeded, so runs are bit-for-bit repeatable only with `dropout = 0` (the toy
//! default).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use indicatif::{ProgressBar, ProgressStyle};
use posenc::EncodingConfig;
use posenc_transformer::checkpoint::{self, write_atomic};
use posenc_transformer::{Config, Transformer};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::batch::{self, Batch, Example};
use crate::data::{self, DataConfig, Splits};
use crate::decode;
use crate::init::initialize;
use crate::loss::label_smoothed_nll;
use crate::metrics::exact_match;
use crate::optim::{AdamW, AdamWConfig};
use crate::schedule::Noam;
use crate::vocab::{Vocab, PAD_ID};

/// `source.tokenizer.json`.
pub const SOURCE_TOKENIZER: &str = "source.tokenizer.json";
/// `target.tokenizer.json`.
pub const TARGET_TOKENIZER: &str = "target.tokenizer.json";
/// `trainer.json`.
pub const TRAINER_FILE: &str = "trainer.json";
/// `training.safetensors`.
pub const STATE_FILE: &str = "training.safetensors";

/// Everything that defines a training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// The model (vocabulary sizes are set from the data).
    pub model: Config,
    /// The corpus.
    pub data: DataConfig,
    /// Seed of the initial weights and of the batch order.
    pub seed: u64,
    /// Optimizer steps.
    pub steps: usize,
    /// Sentences per batch.
    pub batch_size: usize,
    /// Noam schedule factor.
    pub lr_factor: f64,
    /// Noam warm-up steps.
    pub warmup: usize,
    /// Label smoothing ε.
    pub label_smoothing: f64,
    /// AdamW settings.
    pub adam: AdamWConfig,
    /// Validate every this many steps (and at the end).
    pub eval_every: usize,
    /// Validation sentences decoded for exact match.
    pub eval_sentences: usize,
    /// Save a checkpoint every this many steps (and at the end).
    pub save_every: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            model: Config {
                d_model: 64,
                heads: 4,
                d_ff: 256,
                encoder_layers: 2,
                decoder_layers: 2,
                dropout: 0.0,
                encoding: EncodingConfig::Sinusoidal { base: 10_000.0 },
                ..Config::default()
            },
            data: DataConfig::default(),
            seed: 42,
            steps: 2500,
            batch_size: 64,
            lr_factor: 2.0,
            warmup: 400,
            label_smoothing: 0.1,
            adam: AdamWConfig::default(),
            eval_every: 500,
            eval_sentences: 200,
            save_every: 500,
        }
    }
}

impl TrainConfig {
    /// Reads a config file (JSON); missing fields take their defaults.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    fn validate(&self) -> Result<()> {
        ensure!(self.steps > 0, "steps must be > 0");
        ensure!(self.batch_size > 0, "batch_size must be > 0");
        ensure!(
            self.data.train > 0,
            "the training set is empty (data.train = 0)"
        );
        ensure!(
            self.eval_every > 0 && self.save_every > 0,
            "eval_every and save_every must be > 0"
        );
        self.model.validate()?;
        Ok(())
    }
}

/// Training stopped because the loss stopped being finite (an encoding whose values grow
/// without bound can do this). The last checkpoint before it stays on disk.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("the loss diverged to {loss} at step {step}")]
pub struct Diverged {
    /// The step whose loss was not finite.
    pub step: usize,
    /// That loss.
    pub loss: f32,
}

/// One validation record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Step.
    pub step: usize,
    /// Mean training loss since the previous record.
    pub train_loss: f64,
    /// Validation loss (label-smoothed, as trained).
    pub valid_loss: f64,
    /// Exact match of greedy translations of the first `eval_sentences` validation pairs.
    pub valid_exact: f64,
    /// Seconds since the run began.
    pub elapsed_s: f64,
}

/// `trainer.json`: the run's config and progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainerState {
    /// The run's config.
    pub config: TrainConfig,
    /// Steps done.
    pub step: usize,
    /// Validation history.
    pub history: Vec<Record>,
    /// Training seconds so far, over every resumption.
    pub elapsed_s: f64,
    /// Source and target tokens trained on so far.
    pub tokens: usize,
}

impl TrainerState {
    /// Reads `trainer.json` from a run directory.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(TRAINER_FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Training throughput in tokens per second.
    pub fn tokens_per_second(&self) -> f64 {
        self.tokens as f64 / self.elapsed_s.max(1e-9)
    }
}

/// How to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// No progress bar or log lines.
    pub quiet: bool,
}

/// Examples in a seeded order: the batch of step `s` depends only on `(seed, s)`.
struct Order {
    seed: u64,
    n: usize,
    epoch: Option<(usize, Vec<usize>)>,
}

impl Order {
    fn batch(&mut self, step: usize, size: usize) -> Vec<usize> {
        ((step - 1) * size..step * size)
            .map(|i| {
                let epoch = i / self.n;
                if self.epoch.as_ref().is_none_or(|(e, _)| *e != epoch) {
                    let mut perm: Vec<usize> = (0..self.n).collect();
                    let mut rng = ChaCha8Rng::seed_from_u64(
                        self.seed ^ (epoch as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    );
                    perm.shuffle(&mut rng);
                    self.epoch = Some((epoch, perm));
                }
                self.epoch.as_ref().map_or(0, |(_, p)| p[i % self.n])
            })
            .collect()
    }
}

/// The loss of one batch.
pub fn batch_loss(model: &Transformer, b: &Batch, smoothing: f64, train: bool) -> Result<Tensor> {
    let logp = model.forward(
        &b.src,
        &b.tgt_in,
        Some(&b.src_mask),
        Some(&b.tgt_mask),
        train,
    )?;
    let vocab = logp.dim(D::Minus1)?;
    label_smoothed_nll(
        &logp.reshape(((), vocab))?,
        &b.tgt_out.flatten_all()?,
        smoothing,
        PAD_ID,
    )
}

fn save_state(dir: &Path, varmap: &VarMap, opt: &AdamW, step: usize) -> Result<()> {
    let mut tensors: HashMap<String, Tensor> = opt.state();
    for (name, var) in varmap
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned VarMap"))?
        .iter()
    {
        tensors.insert(format!("model.{name}"), var.as_tensor().clone());
    }
    let meta = HashMap::from([("step".to_string(), step.to_string())]);
    write_atomic(&dir.join(STATE_FILE), |tmp| {
        safetensors::serialize_to_file(
            tensors.iter().map(|(k, v)| (k.as_str(), v)),
            Some(meta),
            tmp,
        )
        .map_err(|e| candle_core::Error::Msg(format!("writing {}: {e}", tmp.display())).into())
    })?;
    Ok(())
}

fn load_state(dir: &Path, varmap: &VarMap, opt: &mut AdamW, device: &Device) -> Result<usize> {
    let path = dir.join(STATE_FILE);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not a safetensors file ({e})", path.display()))?;
    let step: usize = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("step"))
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{} has no step", path.display()))?;
    let tensors = candle_core::safetensors::load_buffer(&bytes, device)?;
    for (name, var) in varmap
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned VarMap"))?
        .iter()
    {
        let t = tensors
            .get(&format!("model.{name}"))
            .with_context(|| format!("{} lacks the weight `{name}`", path.display()))?;
        var.set(t).with_context(|| format!("restoring `{name}`"))?;
    }
    opt.restore(&tensors, step)?;
    Ok(step)
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    write_atomic(path, |tmp| {
        std::fs::write(tmp, &text).map_err(|source| posenc_transformer::Error::Io {
            path: tmp.to_path_buf(),
            source,
        })
    })?;
    Ok(())
}

/// Validation loss over every validation pair and greedy exact match over the first `n`.
pub fn validate(
    model: &Transformer,
    examples: &[Example],
    refs: &[String],
    tgt: &Vocab,
    smoothing: f64,
    n: usize,
) -> Result<(f64, f64)> {
    let device = model.device();
    let (mut total, mut count) = (0.0, 0usize);
    for chunk in examples.chunks(128) {
        let b = Batch::new(&chunk.iter().collect::<Vec<_>>(), &device)?;
        let loss: f32 = batch_loss(model, &b, smoothing, false)?.to_scalar()?;
        total += f64::from(loss) * b.tokens as f64;
        count += b.tokens;
    }
    let n = n.min(examples.len());
    let sources: Vec<Vec<u32>> = examples[..n].iter().map(|(s, _)| s.clone()).collect();
    let max_len = examples.iter().map(|(_, t)| t.len()).max().unwrap_or(0) * 2 + 8;
    let hyps: Vec<String> = decode::greedy(model, &sources, max_len)?
        .iter()
        .map(|ids| tgt.decode(ids))
        .collect();
    Ok((total / count.max(1) as f64, exact_match(&hyps, &refs[..n])))
}

/// Trains a new model into `out` (created if needed); returns the final state.
pub fn train(cfg: TrainConfig, out: &Path, opts: RunOptions) -> Result<TrainerState> {
    cfg.validate()?;
    let splits = data::generate(&cfg.data);
    let src = Vocab::train(splits.train.iter().map(|p| p.src.as_str()))?;
    let tgt = Vocab::train(splits.train.iter().map(|p| p.tgt.as_str()))?;
    let mut cfg = cfg;
    cfg.model.src_vocab_size = src.len();
    cfg.model.tgt_vocab_size = tgt.len();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    src.save(&out.join(SOURCE_TOKENIZER))?;
    tgt.save(&out.join(TARGET_TOKENIZER))?;
    let state = TrainerState {
        config: cfg,
        step: 0,
        history: Vec::new(),
        elapsed_s: 0.0,
        tokens: 0,
    };
    run(state, &src, &tgt, out, false, opts)
}

/// Continues the run saved in `out` with its own config, up to `steps` (default: the
/// run's own) steps in all.
pub fn resume(out: &Path, steps: Option<usize>, opts: RunOptions) -> Result<TrainerState> {
    let mut state = TrainerState::load(out)
        .context("--resume needs a run directory written by `posenc train`")?;
    if let Some(steps) = steps {
        state.config.steps = steps;
    }
    let src = Vocab::load(&out.join(SOURCE_TOKENIZER))?;
    let tgt = Vocab::load(&out.join(TARGET_TOKENIZER))?;
    run(state, &src, &tgt, out, true, opts)
}

fn run(
    mut state: TrainerState,
    src_vocab: &Vocab,
    tgt_vocab: &Vocab,
    out: &Path,
    resuming: bool,
    opts: RunOptions,
) -> Result<TrainerState> {
    let device = Device::Cpu;
    let cfg = state.config.clone();
    let splits: Splits = data::generate(&cfg.data);
    let train_examples = batch::encode(&splits.train, src_vocab, tgt_vocab)?;
    let valid_examples = batch::encode(&splits.valid, src_vocab, tgt_vocab)?;
    let valid_refs: Vec<String> = splits.valid.iter().map(|p| p.tgt.clone()).collect();

    let varmap = VarMap::new();
    let model = Transformer::new(
        &cfg.model,
        VarBuilder::from_varmap(&varmap, DType::F32, &device),
    )?;
    let mut opt = AdamW::new(&varmap, cfg.adam)?;
    if resuming {
        state.step = load_state(out, &varmap, &mut opt, &device)?;
        state.history.retain(|r| r.step <= state.step);
    } else {
        initialize(&varmap, cfg.seed)?;
    }
    let schedule = Noam {
        factor: cfg.lr_factor,
        d_model: cfg.model.d_model,
        warmup: cfg.warmup,
    };
    let mut order = Order {
        seed: cfg.seed,
        n: train_examples.len(),
        epoch: None,
    };

    let bar = if opts.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(cfg.steps as u64)
    };
    bar.set_style(ProgressStyle::with_template(
        "{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
    )?);
    bar.set_position(state.step as u64);
    let started = Instant::now();
    let elapsed_before = state.elapsed_s;
    let (mut loss_sum, mut loss_n) = (0.0, 0usize);
    let save = |state: &TrainerState, opt: &AdamW| -> Result<()> {
        save_state(out, &varmap, opt, state.step)?;
        checkpoint::save(out, &state.config.model, &varmap)?;
        write_json(&out.join(TRAINER_FILE), state)
    };
    while state.step < cfg.steps {
        let step = state.step + 1;
        let idx = order.batch(step, cfg.batch_size);
        let examples: Vec<&Example> = idx.iter().map(|&i| &train_examples[i]).collect();
        let b = Batch::new(&examples, &device)?;
        let loss = batch_loss(&model, &b, cfg.label_smoothing, true)?;
        let lr = schedule.lr(step);
        opt.step(&loss.backward()?, lr)?;
        let loss: f32 = loss.to_scalar()?;
        if !loss.is_finite() {
            return Err(Diverged { step, loss }.into());
        }
        loss_sum += f64::from(loss);
        loss_n += 1;
        state.step = step;
        state.tokens += b.src.elem_count() + b.tgt_in.elem_count();
        state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();
        bar.set_position(step as u64);
        bar.set_message(format!(
            "loss {loss:.3}  lr {lr:.2e}  {:.0} tok/s",
            state.tokens_per_second()
        ));
        if step.is_multiple_of(cfg.eval_every) || step == cfg.steps {
            let view = Transformer::frozen(&cfg.model, &varmap, &device)?;
            let (valid_loss, valid_exact) = validate(
                &view,
                &valid_examples,
                &valid_refs,
                tgt_vocab,
                cfg.label_smoothing,
                cfg.eval_sentences,
            )?;
            let record = Record {
                step,
                train_loss: loss_sum / loss_n.max(1) as f64,
                valid_loss,
                valid_exact,
                elapsed_s: elapsed_before + started.elapsed().as_secs_f64(),
            };
            (loss_sum, loss_n) = (0.0, 0);
            if !opts.quiet {
                let line = format!(
                    "step {step:>6}  train loss {:.4}  valid loss {:.4}  valid exact {:.1}%",
                    record.train_loss,
                    record.valid_loss,
                    100.0 * record.valid_exact
                );
                if bar.is_hidden() {
                    eprintln!("{line}");
                } else {
                    bar.println(line);
                }
            }
            state.history.push(record);
        }
        if step.is_multiple_of(cfg.save_every) || step == cfg.steps {
            save(&state, &opt)?;
        }
    }
    bar.finish_and_clear();
    if state.history.is_empty() || !out.join(TRAINER_FILE).exists() {
        save(&state, &opt)?;
    }
    Ok(state)
}

/// A trained model with its vocabularies, ready to translate.
#[derive(Debug)]
pub struct Translator {
    /// The model (fused inference path).
    pub model: Transformer,
    /// English vocabulary.
    pub src: Vocab,
    /// Kotoba vocabulary.
    pub tgt: Vocab,
    /// The run that produced it, if known.
    pub state: Option<TrainerState>,
}

impl Translator {
    /// Loads a model directory written by [`train`].
    pub fn load(dir: &Path) -> Result<Self> {
        ensure!(
            dir.is_dir(),
            "model directory {} does not exist",
            dir.display()
        );
        let device = Device::Cpu;
        let loaded = checkpoint::load(dir, &device)?;
        Ok(Self {
            model: Transformer::frozen(&loaded.config, &loaded.varmap, &device)?,
            src: Vocab::load(&dir.join(SOURCE_TOKENIZER))?,
            tgt: Vocab::load(&dir.join(TARGET_TOKENIZER))?,
            state: TrainerState::load(dir).ok(),
        })
    }

    /// Translates English sentences (line numbers in errors count from 1).
    pub fn translate(
        &self,
        sentences: &[String],
        cfg: &decode::DecodeConfig,
    ) -> Result<Vec<String>> {
        let sources: Vec<Vec<u32>> = sentences
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut ids = self.src.encode(s, i + 1)?;
                ids.push(crate::vocab::EOS_ID);
                Ok(ids)
            })
            .collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(sources.len());
        for chunk in sources.chunks(256) {
            out.extend(
                decode::translate(&self.model, chunk, cfg)?
                    .iter()
                    .map(|ids| self.tgt.decode(ids)),
            );
        }
        Ok(out)
    }
}

/// Where `posenc translate` looks by default: the model shipped in the repository.
pub fn shipped_model() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/kotoba"))
}
