//! A language model's run directory: the same `RunDir` as translation's, with one
//! tokenizer.
//!
//! | file | holds |
//! |---|---|
//! | `config.json` | the model ([`LmConfig`]) |
//! | `tokenizer.json` | the tokenizer (`tokenizers`' format) |
//! | `model.safetensors` | the weights, for inference |
//! | `training.safetensors` | weights, AdamW moments and the [`LmState`], to resume from |
//! | `trainer.json` | the [`LmState`]: the training settings, step and validation history |
//! | `manifest.json` | the run's id and the hashes of the config and the tokenizer |
//!
//! Everything is checked before anything is written, every file is written atomically, a
//! lock keeps a second writer out, and a run continued ([`posenc_train::job::resume`]) is
//! bit-identical to one that never stopped. Its runs start as
//! `job::train::<LmTask>(cfg, &inputs, out, opts, device)`.

use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use posenc_error::{ensure, Context};
use posenc_train::error::Result;
use posenc_transformer::checkpoint::{self, CONFIG_FILE, WEIGHTS_FILE};
use posenc_transformer::{LanguageModel, LmConfig};
use tokenizers::Tokenizer;

use crate::task::{InitFrom, LmData, LmState, LmTask, LmTrainConfig};
use posenc_train::job::{self, Begun, Job, Opened};
use posenc_train::rundir::{self, FixedFiles, TOKENIZER, TRAINER_FILE};

/// What a language-model run is built from besides its config: its tokenizer and the token
/// streams it made of the text. A run continued is given the same again (its tokenizer is
/// the one it saved: [`saved`] reads both).
#[derive(Debug, Clone)]
pub struct LmInputs {
    /// The tokenizer, saved with the run.
    pub tokenizer: Tokenizer,
    /// The training and validation streams.
    pub data: LmData,
}

impl<'a> Job<'a> for LmTask<'a> {
    const KIND: &'static str = "lm";
    type Inputs = LmInputs;

    fn begin(cfg: LmTrainConfig, inputs: &'a LmInputs, device: &Device) -> Result<Begun<Self>> {
        let tokenizer = &inputs.tokenizer;
        ensure!(
            tokenizer.get_vocab_size(true) == cfg.model.vocab_size,
            "the tokenizer has {} tokens but the model's vocab_size is {}",
            tokenizer.get_vocab_size(true),
            cfg.model.vocab_size
        );
        let task = LmTask::new(&cfg, &inputs.data, device)?;
        let tokenizer_json = tokenizer
            .to_string(true)
            .map_err(posenc_train::Error::Tokenizer)
            .context("serialising the tokenizer")?;
        let fixed = FixedFiles::new(
            serde_json::to_string_pretty(&cfg.model)?.into_bytes(),
            vec![(TOKENIZER, tokenizer_json.into_bytes())],
        )?;
        Ok(Begun {
            task,
            config: cfg,
            fixed,
        })
    }

    fn reopen(
        dir: &Path,
        cfg: &LmTrainConfig,
        inputs: &'a LmInputs,
        device: &Device,
    ) -> Result<Self> {
        let (model, tokenizer) = read_fixed(dir)?;
        ensure!(
            model == cfg.model,
            "{} and {} disagree about the model",
            dir.join(CONFIG_FILE).display(),
            dir.join(TRAINER_FILE).display()
        );
        ensure!(
            tokenizer.get_vocab(true) == inputs.tokenizer.get_vocab(true),
            "the tokenizer given to continue the run in {} is not the one it saved in {TOKENIZER}",
            dir.display()
        );
        LmTask::new(cfg, &inputs.data, device)
    }

    /// Random from the seed, or the weights of the run it starts from, which must still be
    /// that run and fit the model exactly.
    fn initialize(varmap: &VarMap, cfg: &LmTrainConfig) -> Result<()> {
        initialize(varmap, cfg)
    }
}

/// The step-0 weights of `cfg`: random from its seed, or the weights of the run it starts
/// from, which must still be that run and fit the model exactly.
fn initialize(varmap: &VarMap, cfg: &LmTrainConfig) -> Result<()> {
    let Some(from) = &cfg.init_from else {
        return posenc_train::init::initialize(varmap, cfg.run.seed);
    };
    let manifest = rundir::verify(&from.path)?;
    ensure!(
        manifest.run == from.run,
        "this run starts from run {} in {}, which now holds run {}",
        from.run,
        from.path.display(),
        manifest.run
    );
    let weights = from.path.join(WEIGHTS_FILE);
    rundir::check_weights(&weights, &manifest.run)?;
    checkpoint::load_into(varmap, &weights).with_context(|| {
        format!(
            "starting from {}: its weights must fit the new model exactly (an encoding with \
             other parameters, or another size, does not)",
            from.path.display()
        )
    })?;
    Ok(())
}

/// Settings for a new run that starts from the trained run in `dir` (`lm train --from`):
/// `base` with the source's model, tokenizer settings, text (unless `base` names one) and
/// [`InitFrom`], and its tokenizer.
///
/// # Errors
/// A directory that is not a complete language model run.
pub fn from_run(dir: &Path, base: LmTrainConfig) -> Result<(LmTrainConfig, Tokenizer)> {
    let manifest = rundir::verify(dir)?;
    let source: LmState = rundir::last_state(dir, &manifest)?;
    let (model, tokenizer) = read_fixed(dir)?;
    let path = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let cfg = LmTrainConfig {
        model,
        tokenizer: source.config.tokenizer,
        text: base.text.clone().or(source.config.text),
        init_from: Some(InitFrom {
            path,
            run: manifest.run,
        }),
        ..base
    };
    Ok((cfg, tokenizer))
}

/// The settings of the run in `dir`, from its last checkpoint.
///
/// # Errors
/// If `dir` holds no complete language model run.
pub fn state(dir: &Path) -> Result<LmState> {
    let manifest = rundir::verify(dir)?;
    job::check_kind(dir, &manifest, LmTask::KIND)?;
    rundir::last_state(dir, &manifest)
}

/// The settings of the run in `dir` and the tokenizer it saved: what its [`LmInputs`] are
/// made again from, to continue it.
///
/// # Errors
/// If `dir` holds no complete language model run.
pub fn saved(dir: &Path) -> Result<(LmTrainConfig, Tokenizer)> {
    let config = state(dir)?.config;
    let (_, tokenizer) = read_fixed(dir)?;
    Ok((config, tokenizer))
}

/// `config.json` and `tokenizer.json`, checked against each other.
fn read_fixed(dir: &Path) -> Result<(LmConfig, Tokenizer)> {
    let path = dir.join(CONFIG_FILE);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let cfg: LmConfig = serde_json::from_str(&text).with_context(|| {
        format!(
            "parsing {} (is {} a language model run?)",
            path.display(),
            dir.display()
        )
    })?;
    cfg.validate()
        .with_context(|| format!("checking {}", path.display()))?;
    let path = dir.join(TOKENIZER);
    let tokenizer = Tokenizer::from_file(&path)
        .map_err(posenc_train::Error::Tokenizer)
        .with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        tokenizer.get_vocab_size(true) == cfg.vocab_size,
        "{} has {} tokens but {CONFIG_FILE} says vocab_size = {}",
        path.display(),
        tokenizer.get_vocab_size(true),
        cfg.vocab_size
    );
    Ok((cfg, tokenizer))
}

/// Where `posenc lm generate` and `lm eval` look by default: the character model shipped
/// in the repository (ALiBi, so it keeps its quality past the 64 characters it trained on).
pub fn shipped_model() -> std::path::PathBuf {
    posenc_io::checkout().join("models/shakespeare-alibi")
}

/// A saved model, loaded for inference.
pub struct Saved {
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The model, weights checked against the config.
    pub model: LanguageModel,
}

/// Loads the model in `dir` (its last checkpoint) onto `device`; every problem names its
/// file.
///
/// # Errors
/// A directory that is not a complete run, files from different runs, a tokenizer that
/// does not fit the config, or missing, mis-shaped or non-finite weights.
pub fn load(dir: &Path, device: &Device) -> Result<Saved> {
    let Opened { weights, .. } = job::open(dir, LmTask::KIND)?;
    let (cfg, tokenizer) = read_fixed(dir)?;
    let varmap = VarMap::new();
    LanguageModel::new(&cfg, VarBuilder::from_varmap(&varmap, DType::F32, device))?;
    checkpoint::load_into(&varmap, &weights)?;
    let model = LanguageModel::frozen(&cfg, &varmap, device)?;
    Ok(Saved { tokenizer, model })
}
