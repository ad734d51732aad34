//! # posenc-transformer: the Transformer of "Attention Is All You Need" on candle
//!
//! One concept per file, in the paper's order: [`embeddings`] (× √d_model, plus the
//! positional encoding), [`attention`] (scaled dot-product, multi-head) with its
//! [`mask`]s and its [`KvCache`], [`feed_forward`], the residual [`sublayer`], the
//! [`block`] that holds them (with its [`BlockConfig`]), the [`stack`] of blocks (the
//! encoder, the decoder, a causal LM's), and the [`model`] with its generator; [`lm`] builds
//! a decoder-only language model from the same blocks. [`dropout`] holds the one rule that
//! says when a model is training. The positional encoding is a
//! [`posenc::PositionalEncoding`]: the model calls its hooks and never asks which
//! it is. [`checkpoint`] saves and loads `config.json` + `model.safetensors` with PyTorch's
//! `nn.Transformer` parameter names.
//!
//! Attention softmax (with its scale and mask) and, when training, LayerNorm run as the
//! fused kernels of [`ops`], which carry their own backward; inference uses candle's fused
//! LayerNorm and rotary kernels. Off the CPU's f32 (on a GPU), a tracked softmax or norm
//! is candle's fused kernel with the backward of [`ops::with_grad`], and other ops take
//! the differentiable compositions.

#![warn(missing_docs)]

mod config;
mod error;

pub mod attention;
pub mod block;
pub mod checkpoint;
pub mod dropout;
pub mod embeddings;
pub mod feed_forward;
mod kv_cache;
mod layer_encodings;
pub mod linear;
pub mod lm;
pub mod mask;
pub mod model;
pub mod ops;
pub mod stack;
pub mod sublayer;

pub use block::BlockConfig;
pub use config::{
    BlockOptions, Config, Encodings, NormKind, MAX_LAYERS, MAX_PARAMETERS, MAX_VOCAB,
};
pub use error::{Error, Result};
pub use kv_cache::{KvCache, RESERVE_AHEAD};
pub use lm::{LanguageModel, LmConfig};
pub use mask::Mask;
pub use model::{Generator, Transformer};
pub use stack::{Stack, StackCache};

/// Tells glibc's allocator to keep freed memory for reuse instead of handing it back to
/// the kernel; programs that train or run models call it first thing in `main` (the
/// `posenc` binary, the examples and the benchmarks do). Elsewhere it does nothing.
///
/// A training step allocates and frees the same few-megabyte tensors every step. By
/// default glibc serves blocks that large with `mmap` and returns them with `munmap`, or
/// trims the heap behind them, so each step pays page faults to zero fresh pages and TLB
/// shootdowns across the threads: about a seventh of a profiled reference training step
/// was the kernel's, and its backward took about a fifth less with this setting
/// (`posenc bench train`, alternating runs).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters. A refusal (return 0) leaves the
    // defaults, which are correct, only slower.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Hands the memory freed so far back to the kernel (glibc's `malloc_trim`), which
/// [`keep_freed_memory`] otherwise keeps: between the rounds of a benchmark that reports
/// peak memory, so that a round's peak is its own and not the heap an earlier round left.
/// Elsewhere it does nothing.
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases free memory at the allocator's discretion.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// For a process that trains on the CPU: candle's element-wise ops (among them the
/// backward's gradient sums) run on the calling thread rather than on candle's own thread
/// pool. Call it first thing in `main`, before any tensor op: candle reads the setting
/// (`CANDLE_NUM_THREADS=1`) once. It leaves a `CANDLE_NUM_THREADS` already set alone.
///
/// candle 0.11 runs large element-wise ops on a pool of its own, whose worker spins for
/// a while after each op, waiting for the next; this crate's kernels and gemm run on
/// rayon's pool. On two cores that spinning worker takes a core from them: 12% of a
/// profiled reference training step was its spin loop, and the step's speed against
/// PyTorch's went from a median of 1.025× to 1.09× (`posenc bench train`, twelve and ten
/// runs, interleaved).
/// Not for quantized inference: candle's quantized products use the same pool, and
/// SmolLM2's generation took 8.9–10.6 s instead of 5.0–7.0 s with this setting.
pub fn tune_for_training() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

/// Runs `work` on one of rayon's worker threads and returns its result: call it around a
/// program's work, as the `posenc` binary and the examples do.
///
/// Every fused kernel of [`ops`] and every large product runs its parallel part on rayon's
/// pool. Called from a thread outside the pool, each of them hands its jobs to the pool
/// and puts the calling thread to sleep until they are done, then wakes it: two context
/// switches per op, which for a small model's many small ops add up. From a worker
/// thread, the op's jobs go on that worker's own queue, the worker takes part in them, and
/// only the other workers are woken. The reference training step took 8% less time this
/// way, the toy model's 20% less (`posenc bench train`, alternating binaries).
///
/// If rayon's global pool has not started yet, it starts here with 64 MiB stacks: the
/// work now runs where a program's main thread (8 MiB) ran, and candle's backward walks the
/// graph recursively. (A pool started earlier keeps its stacks, 2 MiB by default.)
///
/// ```
/// let worker = posenc_transformer::on_worker_thread(rayon::current_thread_index);
/// assert!(worker.is_some(), "the work runs on one of rayon's threads");
/// ```
pub fn on_worker_thread<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    // An error means the pool is already running, which is fine.
    let _ = rayon::ThreadPoolBuilder::new()
        .stack_size(64 << 20)
        .build_global();
    rayon::scope(|_| work())
}
