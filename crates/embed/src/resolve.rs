//! Where a model's files are: a local directory, or a Hugging Face hub repo id resolved
//! through `hf-hub`, cache first.
//!
//! The cache is `$HF_HOME/hub` (default `~/.cache/huggingface/hub`), laid out as the hub
//! clients write it: `models--ORG--NAME/refs/main` names a snapshot,
//! `models--ORG--NAME/snapshots/REV/` holds the files. With `HF_HUB_OFFLINE=1` nothing is
//! downloaded: a file missing from the cache is an error naming it.

use std::path::{Path, PathBuf};

use crate::error::Result;
use hf_hub::{Cache, Repo};
use posenc_error::{bail, invalid, Context};

/// The files a sentence-transformers BERT model needs.
pub const FILES: [&str; 5] = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
];

/// Where `scripts/fetch_minilm.sh` puts all-MiniLM-L6-v2 (`.cache/all-MiniLM-L6-v2` at
/// the repository root); an error naming the script when the model is not there.
pub fn fetched_minilm() -> Result<PathBuf> {
    let dir = posenc_io::cache_dir().join("all-MiniLM-L6-v2");
    if !dir.join("model.safetensors").exists() {
        bail!(
            "all-MiniLM-L6-v2 is missing from {}: run scripts/fetch_minilm.sh",
            dir.display()
        );
    }
    Ok(dir)
}

/// The hub cache directory: `$HF_HOME/hub`, or `~/.cache/huggingface/hub`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("HF_HOME") {
        return Ok(PathBuf::from(home).join("hub"));
    }
    let home =
        std::env::var_os("HOME").ok_or_else(|| invalid!("neither HF_HOME nor HOME is set"))?;
    Ok(PathBuf::from(home).join(".cache/huggingface/hub"))
}

/// Whether `HF_HUB_OFFLINE` asks for no network.
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
        matches!(
            v.trim(),
            "1" | "true" | "TRUE" | "True" | "yes" | "ON" | "on"
        )
    })
}

/// A local directory as it is, or a repo id (`org/name`) resolved with the environment's
/// cache and offline setting. Returns the directory holding every file of [`FILES`].
pub fn resolve(model: &str) -> Result<PathBuf> {
    let path = Path::new(model);
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    if path.is_file() {
        bail!("`{model}` is a file: --model takes a model directory or a hub repo id");
    }
    if model.split('/').count() != 2 || model.starts_with(['.', '/']) {
        bail!("model `{model}` is neither a directory nor a hub repo id like `sentence-transformers/all-MiniLM-L6-v2`");
    }
    resolve_in(model, &cache_dir()?, offline())
}

/// Resolves repo id `model` in the hub cache at `cache`; downloads missing files unless `offline`.
pub fn resolve_in(model: &str, cache: &Path, offline: bool) -> Result<PathBuf> {
    let cached = Cache::new(cache.to_path_buf()).repo(Repo::model(model.to_string()));
    let mut dir = None;
    for file in FILES {
        let path = match cached.get(file) {
            Some(p) => p,
            None if offline => bail!(
                "`{file}` of {model} is not in the hub cache {} and HF_HUB_OFFLINE is set: nothing is downloaded",
                cache.display()
            ),
            None => hf_hub::api::sync::ApiBuilder::new()
                .with_cache_dir(cache.to_path_buf())
                .with_progress(false)
                .build()
                .context("building the Hugging Face hub client")?
                .model(model.to_string())
                .get(file)
                .with_context(|| format!("downloading `{file}` of {model} (set HF_HUB_OFFLINE=1 to use only the cache)"))?,
        };
        // The snapshot directory: the file's path minus the file name's own components.
        let root = path
            .ancestors()
            .nth(Path::new(file).components().count())
            .map(Path::to_path_buf);
        dir = dir.or(root);
    }
    Ok(dir.ok_or_else(|| invalid!("no files resolved for {model}"))?)
}
