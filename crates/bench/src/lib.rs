//! # posenc-bench: speed against other implementations
//!
//! The drivers of `posenc bench`, each timing ours and a baseline in the same invocation,
//! alternately, and reporting the median of the per-round ratios:
//!
//! | module | ours | against |
//! |---|---|---|
//! | [`train`] | one training step | PyTorch (`scripts/bench_train_torch.py`, a worker process) |
//! | [`embed`] | all-MiniLM-L6-v2 sentence embeddings | transformers' `BertModel` (`scripts/bench_embed_torch.py`) |
//! | [`generate`] | a GGUF model's prefill, decode and time to first token | llama.cpp's `llama-bench` |
//!
//! Every benchmark of the workspace lives in `benches/`, built only by
//! `cargo bench -p posenc-bench` (never by `cargo test`, nor are their dependencies, criterion
//! and candle-transformers): `embed` and `llama` against candle-transformers' models;
//! `fused`, `quantized`, `loss` and `paths` our fused kernels against the candle
//! compositions they replace.
//!
//! ```sh
//! bash scripts/fetch_minilm.sh
//! cargo bench -p posenc-bench --bench embed
//! cargo bench -p posenc-bench --bench fused
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::path::{Path, PathBuf};

pub mod embed;
pub mod generate;
mod torch;
pub mod train;

/// What can stop a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cause stated in words: a setting out of range, a baseline that failed.
    #[error(transparent)]
    Invalid(#[from] posenc_error::Invalid),
    /// An error, with what was being done when it happened.
    #[error(transparent)]
    Context(#[from] posenc_error::Contextual),
    /// Writing the report, or reading a baseline's output.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A baseline's JSON that does not parse.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// From the training core (a training step).
    #[error(transparent)]
    Train(#[from] posenc_train::Error),
    /// From the sentence encoder.
    #[error(transparent)]
    Embed(#[from] posenc_embed::Error),
    /// From the GGUF model.
    #[error(transparent)]
    Llama(#[from] posenc_llama::Error),
    /// From the model (a step that fails).
    #[error(transparent)]
    Transformer(#[from] posenc_transformer::Error),
    /// From the positional encoding (a setting past its limit).
    #[error(transparent)]
    Encoding(#[from] posenc::Error),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The rounds a benchmark runs: the first number among its arguments, or `default`.
pub fn rounds(default: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}

/// The repository, where the baselines' scripts and llama.cpp's build are.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `device` as `--device` names it: `cpu`, `cuda:N` or `metal:N`.
pub fn device_spec(device: &candle_core::Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}
