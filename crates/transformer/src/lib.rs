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
//! This crate holds the model, not its kernels: every product, norm, softmax and attention
//! is one call to [`posenc_kernels`], which picks the path from the device and dtype (the
//! CPU's fused kernels in f32, candle's ops elsewhere), so nothing here asks where it runs.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

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
pub mod self_extend;
pub mod stack;
pub mod sublayer;
pub mod weights;

pub use config::{
    BlockConfig, BlockOptions, Config, Encodings, NormKind, MAX_LAYERS, MAX_PARAMETERS, MAX_VOCAB,
};
pub use error::{Error, Result};
pub use kv_cache::{DecaySums, KvCache, KvType, Streaming, RESERVE_AHEAD};
pub use lm::{LanguageModel, LmConfig};
pub use mask::Mask;
pub use model::{Generator, Transformer};
pub use self_extend::SelfExtend;
pub use stack::{Stack, StackCache};
