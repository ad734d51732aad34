//! A trained language model on disk: `config.json` (the [`LmTrainConfig`]),
//! `tokenizer.json` and `model.safetensors`, each written atomically into a directory that
//! must be new or empty, so no earlier run is ever overwritten.
//!
//! (Run directories with a manifest, a lock and bit-identical resume, as the translation
//! trainer's [`crate::rundir`], are the next step.)

use std::path::{Path, PathBuf};

use anyhow::{anyhow, ensure, Context, Result};
use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use posenc_transformer::checkpoint::{self, write_atomic};
use posenc_transformer::LanguageModel;
use tokenizers::Tokenizer;

use crate::lm_train::{LmRun, LmTrainConfig};

/// The run's settings.
pub const CONFIG: &str = "config.json";
/// The tokenizer.
pub const TOKENIZER: &str = "tokenizer.json";
/// The weights.
pub const WEIGHTS: &str = "model.safetensors";

/// Checks that `dir` can take a new run: it does not exist or is an empty directory.
pub fn check_new(dir: &Path) -> Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => ensure!(
            entries.next().is_none(),
            "{} is not empty: a language model run goes into a new directory, so no earlier run is overwritten",
            dir.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow!(e).context(format!("{} is not a directory", dir.display()))),
    }
    Ok(())
}

/// Writes the run into `dir` (new or empty), every file atomically.
pub fn save(dir: &Path, cfg: &LmTrainConfig, tokenizer: &Tokenizer, run: &LmRun) -> Result<()> {
    check_new(dir)?;
    let config = serde_json::to_string_pretty(cfg)?;
    let tokenizer = tokenizer
        .to_string(true)
        .map_err(|e| anyhow!(e))
        .context("serialising the tokenizer")?;
    let weights_path = dir.join(WEIGHTS);
    let weights = checkpoint::serialize(
        &checkpoint::variables(&run.varmap),
        Default::default(),
        &weights_path,
    )?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_atomic(&dir.join(TOKENIZER), tokenizer.as_bytes())?;
    write_atomic(&weights_path, &weights)?;
    // Last: a directory with a config holds a whole run.
    write_atomic(&dir.join(CONFIG), config.as_bytes())?;
    Ok(())
}

/// A saved run, loaded for inference.
pub struct Saved {
    /// The settings it was trained with.
    pub cfg: LmTrainConfig,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The model, weights checked against the config.
    pub model: LanguageModel,
}

fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Loads the run in `dir`; every problem names its file.
pub fn load(dir: &Path) -> Result<Saved> {
    let path = file(dir, CONFIG);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is {} a language model run?)",
            path.display(),
            dir.display()
        )
    })?;
    let cfg: LmTrainConfig =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    cfg.validate()
        .with_context(|| format!("checking {}", path.display()))?;
    let path = file(dir, TOKENIZER);
    let tokenizer = Tokenizer::from_file(&path)
        .map_err(|e| anyhow!(e))
        .with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        tokenizer.get_vocab_size(true) == cfg.model.vocab_size,
        "{} has {} tokens but {} says vocab_size = {}",
        path.display(),
        tokenizer.get_vocab_size(true),
        CONFIG,
        cfg.model.vocab_size
    );
    let device = Device::Cpu;
    let varmap = VarMap::new();
    LanguageModel::new(
        &cfg.model,
        VarBuilder::from_varmap(&varmap, DType::F32, &device),
    )?;
    let path = file(dir, WEIGHTS);
    checkpoint::load_into(&varmap, &path)?;
    let model = LanguageModel::frozen(&cfg.model, &varmap, &device)?;
    Ok(Saved {
        cfg,
        tokenizer,
        model,
    })
}
