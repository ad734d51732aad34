//! Training: batches in a seeded order, label-smoothed loss, AdamW on the Noam schedule,
//! periodic validation, atomic checkpoints and exact resumption.
//!
//! An output directory is a [`RunDir`](posenc_train::rundir): the model for inference
//! (`config.json`, `model.safetensors`, the two tokenizers), the state to resume from
//! (`training.safetensors`: weights, AdamW moments and the trainer state, in one file so
//! they can never disagree), `trainer.json` (a readable copy of the run's config and
//! validation history) and `manifest.json`, which ties them together. Everything is
//! validated before anything is written; every file is written atomically, so killing the
//! process at any moment leaves the previous checkpoint loadable; a lock keeps a second
//! process out.
//!
//! The same seed gives the same run: the data, the initial weights and the order of
//! batches are functions of the seed (the batch at step `s` is a function of `(seed, s)`,
//! so resuming needs no generator state), and so are the dropout masks (each step seeds
//! [`posenc_transformer::dropout::seed`] with `(seed, s)`).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use posenc::Positions;
use posenc_error::ensure;
use posenc_train::error::Result;
use posenc_transformer::checkpoint::{self, CONFIG_FILE};
use posenc_transformer::{Config, Transformer};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::batch::{self, Batch, Example};
use crate::data::{self, DataConfig, Splits};
use crate::decode;
use crate::metrics::exact_match;
use crate::vocab::{Vocab, PAD_ID};
use posenc_train::fit::RunSchedule;
use posenc_train::fit::{StepLoss, Task};
use posenc_train::job::{self, Begun, Job, Opened};
use posenc_train::loss::label_smoothed_cross_entropy;
use posenc_train::optim::AdamWConfig;
use posenc_train::rundir::{self, FixedFiles};
use posenc_train::schedule::Noam;

pub use posenc_train::rundir::{SOURCE_TOKENIZER, STATE_FILE, TARGET_TOKENIZER, TRAINER_FILE};

/// Everything that defines a training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// The model (vocabulary sizes are set from the data).
    pub model: Config,
    /// The corpus.
    pub data: DataConfig,
    /// Seed (of the initial weights and the batch order), steps, sentences per batch, the
    /// Noam schedule's warm-up steps, AdamW, and how often to validate and save.
    #[serde(
        flatten,
        deserialize_with = "RunSchedule::or_defaults_of::<TrainConfig, _>"
    )]
    pub run: RunSchedule,
    /// Noam schedule factor.
    pub lr_factor: f64,
    /// Label smoothing ε.
    pub label_smoothing: f64,
    /// Validation sentences decoded for exact match.
    pub eval_sentences: usize,
    /// Randomized positions (`posenc_train::randomized`): train each batch's sources and targets
    /// at sorted random subsets of `0..range`. `None`: consecutive positions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub randomized_positions: Option<usize>,
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
                ..Config::default()
            },
            data: DataConfig::default(),
            run: RunSchedule {
                seed: 42,
                steps: 2500,
                batch_size: 64,
                warmup: 400,
                adam: AdamWConfig::default(),
                eval_every: 500,
                save_every: 500,
            },
            lr_factor: 2.0,
            label_smoothing: 0.1,
            eval_sentences: 200,
            randomized_positions: None,
        }
    }
}

impl TrainConfig {
    /// Reads a config file (JSON); missing fields take their defaults.
    pub fn load(path: &Path) -> Result<Self> {
        posenc_train::results::load_results(path)
    }

    /// Checks every value before anything is generated, allocated or written.
    pub fn validate(&self) -> Result<()> {
        self.run.validate()?;
        ensure!(
            self.eval_sentences > 0,
            "eval_sentences must be > 0 (validation decodes that many sentences)"
        );
        for (name, v) in [
            ("lr_factor", self.lr_factor),
            ("label_smoothing", self.label_smoothing),
        ] {
            ensure!(
                v.is_finite() && v >= 0.0,
                "{name} must be a finite number ≥ 0, got {v}"
            );
        }
        ensure!(
            self.label_smoothing < 1.0,
            "label_smoothing must be < 1, got {}",
            self.label_smoothing
        );
        if let Some(range) = self.randomized_positions {
            posenc_train::randomized::check(range, 1, None)?;
        }
        self.data.validate()?;
        self.model.validate()?;
        Ok(())
    }

    /// The top-level fields (and `model.…`, `data.…` fields) in which `self` and `other`
    /// differ, ignoring the step budget and the vocabulary sizes (set from the data).
    pub fn differences(&self, other: &Self) -> Vec<String> {
        let comparable = |c: &Self| {
            let mut c = c.clone();
            (c.model.src_vocab_size, c.model.tgt_vocab_size) = (0, 0);
            c
        };
        posenc_train::results::differences(&comparable(self), &comparable(other))
    }
}

pub use posenc_train::fit::{Diverged, RunOptions};

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

impl posenc_train::fit::Validation for Record {
    fn step(&self) -> usize {
        self.step
    }
    fn summary(&self) -> String {
        format!(
            "train loss {:.4}  valid loss {:.4}  valid exact {:.1}%",
            self.train_loss,
            self.valid_loss,
            100.0 * self.valid_exact
        )
    }
    fn scalars(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("train/loss_mean", self.train_loss),
            ("valid/loss", self.valid_loss),
            ("valid/exact", self.valid_exact),
        ]
    }
}

posenc_train::settings!(TrainConfig, |cfg, step| Noam {
    factor: cfg.lr_factor,
    d_model: cfg.model.d_model,
    warmup: cfg.run.warmup,
}
.lr(step));

/// `trainer.json`: the run's config and progress.
pub type TrainerState = posenc_train::fit::RunState<TrainConfig, Record>;

/// Positions at `list`, or from 0 for an empty one.
fn listed(list: &[u32]) -> Positions<'_> {
    if list.is_empty() {
        Positions::From(0)
    } else {
        Positions::At(list)
    }
}

/// Mixed into the seed of the generator that draws randomized positions, so it is not the
/// one that orders the batches.
const RANDOMIZED_STREAM: u64 = 0x005E_ED0F_9051_7105;

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

/// The label-smoothed loss of one batch, fused with the generator's log-softmax.
pub(crate) fn batch_loss(model: &Transformer, b: &Batch, smoothing: f64) -> Result<Tensor> {
    let from_0 = Positions::From(0);
    batch_loss_at(model, b, smoothing, (from_0, from_0))
}

/// [`batch_loss`] with the sources and targets at positions `at`.
pub(crate) fn batch_loss_at(
    model: &Transformer,
    b: &Batch,
    smoothing: f64,
    at: (Positions, Positions),
) -> Result<Tensor> {
    let logits = model.logits_at(
        &b.src,
        &b.tgt_in,
        (Some(&b.src_mask), Some(&b.tgt_mask)),
        at,
    )?;
    let vocab = logits.dim(D::Minus1)?;
    label_smoothed_cross_entropy(
        &logits.reshape(((), vocab))?,
        &b.tgt_out.flatten_all()?,
        smoothing,
        PAD_ID,
    )
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
        let loss: f32 = batch_loss(model, &b, smoothing)?.to_scalar()?;
        total += f64::from(loss) * b.tokens as f64;
        count += b.tokens;
    }
    let n = n.min(examples.len());
    let sources: Vec<Vec<u32>> = examples[..n].iter().map(|(s, _)| s.clone()).collect();
    let max_len = validation_decode_len(examples);
    let hyps: Vec<String> = decode::greedy(model, &sources, max_len)?
        .iter()
        .map(|ids| tgt.decode(ids))
        .collect();
    Ok((total / count.max(1) as f64, exact_match(&hyps, &refs[..n])))
}

/// A config as it trains: checked, its corpus generated and both vocabularies trained on
/// the training split, their sizes set in the model.
pub struct Resolved {
    /// The config, the model's vocabulary sizes set from the data.
    pub config: TrainConfig,
    /// The corpus.
    pub splits: data::Splits,
    /// The source (English) vocabulary.
    pub src: Vocab,
    /// The target (Kotoba) vocabulary.
    pub tgt: Vocab,
}

/// `cfg` as it trains ([`Resolved`]): what `kotoba train --print-config` prints.
///
/// # Errors
/// A bad setting, or a corpus that cannot be generated.
pub fn resolve(mut cfg: TrainConfig) -> Result<Resolved> {
    cfg.validate()?;
    let splits = data::generate(&cfg.data)?;
    let src = Vocab::train(splits.train.iter().map(|p| p.src.as_str()))?;
    let tgt = Vocab::train(splits.train.iter().map(|p| p.tgt.as_str()))?;
    cfg.model.src_vocab_size = src.len();
    cfg.model.tgt_vocab_size = tgt.len();
    Ok(Resolved {
        config: cfg,
        splits,
        src,
        tgt,
    })
}

impl Job<'_> for Translation {
    const KIND: &'static str = "kotoba";
    type Inputs = ();

    /// Generates the corpus, trains both vocabularies on its training split (setting the
    /// model's vocabulary sizes) and builds the model.
    fn begin(cfg: TrainConfig, (): &(), device: &Device) -> Result<Begun<Self>> {
        let Resolved {
            config: cfg,
            splits,
            src,
            tgt,
        } = resolve(cfg)?;
        let task = Translation::new(&cfg, &splits, &src, &tgt, device)?;
        let fixed = FixedFiles::new(
            serde_json::to_string_pretty(&cfg.model)?.into_bytes(),
            vec![
                (SOURCE_TOKENIZER, src.to_json()?.into_bytes()),
                (TARGET_TOKENIZER, tgt.to_json()?.into_bytes()),
            ],
        )?;
        Ok(Begun {
            task,
            config: cfg,
            fixed,
        })
    }

    /// The run's vocabularies, from its files, and its corpus generated again.
    fn reopen(dir: &Path, cfg: &TrainConfig, (): &(), device: &Device) -> Result<Self> {
        cfg.validate()?;
        let src = Vocab::load(&dir.join(SOURCE_TOKENIZER))?;
        let tgt = Vocab::load(&dir.join(TARGET_TOKENIZER))?;
        ensure!(
            (src.len(), tgt.len()) == (cfg.model.src_vocab_size, cfg.model.tgt_vocab_size),
            "the tokenizers in {} do not match the run's vocabulary sizes",
            dir.display()
        );
        let splits = data::generate(&cfg.data)?;
        Translation::new(cfg, &splits, &src, &tgt, device)
    }
}

/// The translation task: a model and its encoded data, built and checked before anything
/// is written. Its runs start, continue and open through [`posenc_train::job`]:
/// `job::train::<Translation>(cfg, &(), out, opts, device)`.
pub struct Translation {
    varmap: VarMap,
    model: Transformer,
    train_examples: Vec<Example>,
    valid_examples: Vec<Example>,
    valid_refs: Vec<String>,
    tgt: Vocab,
    order: Order,
}

impl Translation {
    fn new(
        cfg: &TrainConfig,
        splits: &Splits,
        src: &Vocab,
        tgt: &Vocab,
        device: &Device,
    ) -> Result<Self> {
        let train_examples = batch::encode(&splits.train, src, tgt)?;
        let valid_examples = batch::encode(&splits.valid, src, tgt)?;
        let valid_refs: Vec<String> = splits.valid.iter().map(|p| p.tgt.clone()).collect();
        let varmap = VarMap::new();
        let model = Transformer::new(
            &cfg.model,
            VarBuilder::from_varmap(&varmap, DType::F32, device),
        )?;
        check_positions(
            &model,
            &train_examples,
            &valid_examples,
            cfg.randomized_positions,
        )?;
        let order = Order {
            seed: cfg.run.seed,
            n: train_examples.len(),
            epoch: None,
        };
        Ok(Self {
            varmap,
            model,
            train_examples,
            valid_examples,
            valid_refs,
            tgt: tgt.clone(),
            order,
        })
    }
}

impl Task for Translation {
    type Config = TrainConfig;
    type Record = Record;

    fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    fn loss(&mut self, cfg: &TrainConfig, step: usize) -> Result<StepLoss> {
        let idx = self.order.batch(step, cfg.run.batch_size);
        let examples: Vec<&Example> = idx.iter().map(|&i| &self.train_examples[i]).collect();
        let b = Batch::new(&examples, &self.model.device())?;
        let (src_at, tgt_at) = match cfg.randomized_positions {
            Some(range) => {
                let mut rng = ChaCha8Rng::seed_from_u64(cfg.run.seed ^ RANDOMIZED_STREAM);
                rng.set_stream(step as u64);
                (
                    posenc_train::randomized::draw(&mut rng, b.src.dim(1)?, range)?,
                    posenc_train::randomized::draw(&mut rng, b.tgt_in.dim(1)?, range)?,
                )
            }
            None => (Vec::new(), Vec::new()),
        };
        let loss = batch_loss_at(
            &self.model,
            &b,
            cfg.label_smoothing,
            (listed(&src_at), listed(&tgt_at)),
        )?;
        Ok(StepLoss {
            loss,
            tokens: b.src.elem_count() + b.tgt_in.elem_count(),
        })
    }

    fn validate(
        &mut self,
        cfg: &TrainConfig,
        step: usize,
        train_loss: f64,
        elapsed_s: f64,
    ) -> Result<Option<Record>> {
        let view = Transformer::frozen(&cfg.model, &self.varmap, &self.model.device())?;
        let (valid_loss, valid_exact) = validate(
            &view,
            &self.valid_examples,
            &self.valid_refs,
            &self.tgt,
            cfg.label_smoothing,
            cfg.eval_sentences,
        )?;
        Ok(Some(Record {
            step,
            train_loss,
            valid_loss,
            valid_exact,
            elapsed_s,
        }))
    }
}

/// Checks that an encoding with a fixed number of positions (`learned`) has room for every
/// source, every teacher-forced target and the longest validation decode.
fn check_positions(
    model: &Transformer,
    train: &[Example],
    valid: &[Example],
    randomized: Option<usize>,
) -> Result<()> {
    let longest = |f: fn(&Example) -> usize| train.iter().chain(valid).map(f).max().unwrap_or(0);
    let (src_max, tgt_max) = model.max_positions();
    if let Some(range) = randomized {
        for max in [src_max, tgt_max] {
            posenc_train::randomized::check(
                range,
                longest(|(s, t)| s.len().max(t.len() + 1)),
                max,
            )?;
        }
    }
    let src_needed = longest(|(s, _)| s.len());
    let tgt_needed = longest(|(_, t)| t.len() + 1).max(validation_decode_len(valid) + 1);
    for (max, needed, what) in [
        (src_max, src_needed, "the longest source sentence has"),
        (
            tgt_max,
            tgt_needed,
            "validation decodes up to (twice the longest target, plus 8)",
        ),
    ] {
        if let Some(max) = max.filter(|&m| needed > m) {
            posenc_error::bail!(
                "the encoding has max_positions = {max}, but {what} {needed} positions: raise max_positions to at least {needed}"
            );
        }
    }
    Ok(())
}

/// The longest output validation decodes: twice the longest target, plus 8.
fn validation_decode_len(examples: &[Example]) -> usize {
    examples.iter().map(|(_, t)| t.len()).max().unwrap_or(0) * 2 + 8
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
    /// The run that produced it.
    pub state: TrainerState,
}

impl Translator {
    /// Loads a model directory that a run of [`Translation`] wrote onto `device`, after checking that its
    /// files belong together (`rundir::verify`) and its weights are complete and finite.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let Opened { manifest, .. } = job::open(dir, Translation::KIND)?;
        let state: TrainerState = rundir::read_trainer_of(dir, &manifest)?;
        let loaded = checkpoint::load(dir, device)?;
        ensure!(
            loaded.config == state.config.model,
            "{} and {} disagree about the model",
            dir.join(CONFIG_FILE).display(),
            dir.join(TRAINER_FILE).display()
        );
        let src = Vocab::load(&dir.join(SOURCE_TOKENIZER))?;
        let tgt = Vocab::load(&dir.join(TARGET_TOKENIZER))?;
        ensure!(
            (src.len(), tgt.len()) == (loaded.config.src_vocab_size, loaded.config.tgt_vocab_size),
            "the tokenizers in {} do not fit the model's vocabulary sizes",
            dir.display()
        );
        Ok(Self {
            model: Transformer::frozen(&loaded.config, &loaded.varmap, device)?,
            src,
            tgt,
            state,
        })
    }

    /// Translates English sentences (line numbers in errors count from 1). Input is
    /// [normalised](crate::vocab::normalize) first (lower case, no punctuation); an empty
    /// sentence translates to the empty sentence, and a line of several
    /// ([`sentences`](crate::vocab::sentences): `the dog runs. the cat sleeps`) to each one's
    /// translation, joined by `. `.
    ///
    /// # Errors
    /// An [`UnknownWord`](crate::vocab::UnknownWord) (special tokens included) names the
    /// word and line; a bad [`DecodeConfig`](decode::DecodeConfig) names the value.
    pub fn translate(
        &self,
        sentences: &[String],
        cfg: &decode::DecodeConfig,
    ) -> Result<Vec<String>> {
        cfg.validate(&self.model)?;
        // Each line's sentences ([`crate::vocab::sentences`]) are translated apart, and
        // joined again: the model was trained on one sentence at a time.
        let mut parts = Vec::new();
        for (i, line) in sentences.iter().enumerate() {
            for part in crate::vocab::sentences(line) {
                parts.push((i, part));
            }
        }
        let sources: Vec<Vec<u32>> = parts
            .iter()
            .map(|&(i, s)| Ok(self.src.encode(&crate::vocab::normalize(s), i + 1)?))
            .collect::<Result<_>>()?;
        let mut out = vec![String::new(); sources.len()];
        let to_decode: Vec<usize> = (0..sources.len())
            .filter(|&i| !sources[i].is_empty())
            .collect();
        for chunk in to_decode.chunks(256) {
            let rows: Vec<Vec<u32>> = chunk
                .iter()
                .map(|&i| {
                    let mut ids = sources[i].clone();
                    ids.push(crate::vocab::EOS_ID);
                    ids
                })
                .collect();
            for (&i, ids) in chunk
                .iter()
                .zip(decode::translate(&self.model, &rows, cfg)?)
            {
                out[i] = self.tgt.decode(&ids);
            }
        }
        let mut lines = vec![Vec::new(); sentences.len()];
        for ((line, _), translation) in parts.iter().zip(out) {
            lines[*line].push(translation);
        }
        Ok(lines.into_iter().map(|l| l.join(". ")).collect())
    }

    /// Each sentence's translation, or why it has none (a word outside the vocabulary),
    /// in the input's order: one bad sentence costs only its own line. The good ones are
    /// translated together, as [`Translator::translate`] does.
    ///
    /// # Errors
    /// A bad [`DecodeConfig`](decode::DecodeConfig), or the model failing to run; a bad
    /// sentence is not an error of the call but its own entry.
    pub fn translate_each(
        &self,
        sentences: &[String],
        cfg: &decode::DecodeConfig,
    ) -> Result<Vec<std::result::Result<String, crate::vocab::UnknownWord>>> {
        let mut good = Vec::new();
        let checked: Vec<_> = sentences
            .iter()
            .enumerate()
            .map(|(i, s)| {
                self.src
                    .encode(&crate::vocab::normalize(s), i + 1)
                    .map(|_| {
                        good.push(s.clone());
                        good.len() - 1
                    })
            })
            .collect();
        let done = self.translate(&good, cfg)?;
        Ok(checked
            .into_iter()
            .map(|c| c.map(|j| done[j].clone()))
            .collect())
    }
}

/// Where `posenc kotoba translate` looks by default: the model shipped in the repository.
pub fn shipped_model() -> PathBuf {
    posenc_io::checkout().join("models/kotoba")
}
