//! # posenc-bench: speed against other implementations
//!
//! The drivers of `posenc bench`, each timing ours and a baseline in the same invocation,
//! alternately, and reporting the median of the per-round ratios beside the ratio of the
//! two sides' medians ([`Speedup`]):
//!
//! | module | ours | against |
//! |---|---|---|
//! | [`train`] | one training step | PyTorch (`scripts/bench_train_torch.py`, a worker process) |
//! | [`embed`] | all-MiniLM-L6-v2 sentence embeddings | transformers' `BertModel` (`scripts/bench_embed_torch.py`) |
//! | [`generate`] | a GGUF model's prefill, decode and time to first token | llama.cpp's `llama-bench` |
//!
//! Each also measures the machine's own limits in the same invocation ([`limits`]: the
//! memory bandwidth and the f32 FMA peak) and prints each speed as a fraction of them.
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

use std::path::PathBuf;

pub mod embed;
pub mod generate;
pub mod limits;
mod torch;
pub mod train;

/// How much faster ours is than a baseline over rounds that alternate between them, two
/// ways: the median of the per-round ratios, which noise hitting both sides of a round
/// cancels in (the figure to quote), and the ratio of the two sides' medians, which is
/// what dividing a table's columns gives. Both are speed: above 1, ours is faster.
///
/// ```text
/// ours (ms)    10  20  10        the machine slowed in round 2, for both sides
/// theirs (ms)  12  22  11
/// per round    1.2 1.1 1.1   →  per_round  1.1
/// medians      10 and 12     →  of_medians 1.2
/// ```
///
/// (This crate's doc tests are not built, since they would build its benchmarks'
/// dependencies: the command line's tests check this example.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speedup {
    /// The median of the per-round ratios.
    pub per_round: f64,
    /// The ratio of the medians.
    pub of_medians: f64,
}

impl Speedup {
    /// From times (lower is faster) of the same rounds: `theirs / ours`. `None` when there
    /// are no rounds or the two differ in count.
    pub fn of_times(ours: &[f64], theirs: &[f64]) -> Option<Self> {
        Self::of_rates(theirs, ours)
    }

    /// From rates (higher is faster, tokens/s) of the same rounds: `ours / theirs`.
    /// `None` when there are no rounds or the two differ in count.
    pub fn of_rates(ours: &[f64], theirs: &[f64]) -> Option<Self> {
        if ours.is_empty() || ours.len() != theirs.len() {
            return None;
        }
        let median = |v: Vec<f64>| posenc_kotoba::bench::median(v);
        Some(Self {
            per_round: median(ours.iter().zip(theirs).map(|(a, b)| a / b).collect()),
            of_medians: median(ours.to_vec()) / median(theirs.to_vec()),
        })
    }
}

impl std::fmt::Display for Speedup {
    /// `1.23× (ratio of the medians 1.21×)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2}× (ratio of the medians {:.2}×)",
            self.per_round, self.of_medians
        )
    }
}

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
    posenc_io::checkout()
}

/// `device` as `--device` names it: `cpu`, `cuda:N` or `metal:N`.
pub fn device_spec(device: &candle_core::Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}
