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
