//! # posenc-transformer: the Transformer of "Attention Is All You Need" on candle
//!
//! One concept per file, in the paper's order: [`embeddings`] (× √d_model, plus the
//! positional encoding), [`attention`] (scaled dot-product, multi-head) with its
//! [`mask`]s, [`feed_forward`], the residual [`sublayer`], the [`encoder`] and
//! [`decoder`] stacks, and the [`model`] with its generator; [`lm`] builds a decoder-only
//! language model from the same blocks. The positional encoding is a
//! [`posenc::PositionalEncoding`]: the model calls its three hooks and never asks which
//! it is. [`checkpoint`] saves and loads `config.json` + `model.safetensors` with PyTorch's
//! `nn.Transformer` parameter names.
//!
//! Attention softmax (with its scale and mask) and, when training, LayerNorm run as the
//! fused kernels of [`ops`], which carry their own backward; inference uses candle's fused
//! LayerNorm and rotary kernels. Other dtypes than f32 take the differentiable
//! compositions.

#![warn(missing_docs)]

mod config;
mod error;

pub mod attention;
pub mod checkpoint;
pub mod decoder;
pub mod embeddings;
pub mod encoder;
pub mod feed_forward;
pub mod linear;
pub mod lm;
pub mod mask;
pub mod model;
pub mod ops;
pub mod sublayer;

pub use config::{
    BlockOptions, Config, Encodings, NormKind, MAX_LAYERS, MAX_PARAMETERS, MAX_VOCAB,
};
pub use error::{Error, Result};
pub use lm::{LanguageModel, LmConfig};
pub use mask::Mask;
pub use model::{Generator, Transformer};

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
