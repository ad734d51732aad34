//! # posenc-llama: pretrained Llama-architecture models on posenc's own blocks
//!
//! SmolLM2-135M (Allal et al. 2025) runs here on [`posenc_transformer::LanguageModel`],
//! the same blocks as every model of this project, with its options set as Llama's:
//! RMSNorm, grouped-query attention, SwiGLU, no biases, unscaled embeddings
//! ([`posenc_transformer::BlockOptions`]). Positions reach it only through the `rope`
//! encoding's hook, so swapping what the encoding does swaps it inside a real model.
//!
//! * [`gguf`] reads llama.cpp's GGUF files with candle's `gguf_file`;
//! * [`names`] maps GGUF's, Hugging Face's and this project's weight names;
//! * [`tokenizer`] builds the byte-level BPE tokenizer from the GGUF metadata;
//! * [`chat`] renders the model's chat template;
//! * [`model`] assembles a [`Llama`]: from a GGUF (dequantized to f32, or on candle's
//!   quantized matmul) or from a Hugging Face directory;
//! * [`convert`] writes a GGUF's model as a Hugging Face directory.

// `unsafe` only to map a GGUF file and give its pages back (`gguf::GgufFile`).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod chat;
pub mod config;
pub mod convert;
pub mod error;
pub mod gguf;
pub mod model;
pub mod names;
pub mod tokenizer;

pub use config::LlamaConfig;
pub use error::{Error, Result};
pub use model::{Llama, Precision};
