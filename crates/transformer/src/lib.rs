//! # posenc-transformer: the Transformer of "Attention Is All You Need" on candle
//!
//! One concept per file, in the paper's order: [`embeddings`] (× √d_model, plus the
//! positional encoding), [`attention`] (scaled dot-product, multi-head) with its
//! [`mask`]s, [`feed_forward`], the residual [`sublayer`], the [`encoder`] and
//! [`decoder`] stacks, and the [`model`] with its generator. The positional encoding is a
//! [`posenc::PositionalEncoding`]: the model calls its three hooks and never asks which
//! it is. [`checkpoint`] saves and loads `config.json` + `model.safetensors` with PyTorch's
//! `nn.Transformer` parameter names.
//!
//! Inference uses candle's fused softmax, LayerNorm and rotary kernels; when a gradient
//! must flow (the input tracks one), the differentiable compositions run instead, since
//! candle-nn 0.11's fused kernels pass no gradient back.

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
pub mod mask;
pub mod model;
pub mod sublayer;

pub use config::{Config, MAX_LAYERS, MAX_PARAMETERS, MAX_VOCAB};
pub use error::{Error, Result};
pub use mask::Mask;
pub use model::{Generator, Transformer};
