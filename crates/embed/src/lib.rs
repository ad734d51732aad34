//! # posenc-embed: pretrained sentence embeddings on posenc's own blocks
//!
//! [`bert`] assembles a BERT encoder from the project's learned-position encoding, norm
//! and encoder stack and loads Hugging Face weights into it; [`sentence`] tokenizes, pools
//! and normalises as sentence-transformers does (all-MiniLM-L6-v2); [`resolve`] finds a
//! model in a directory or the Hugging Face hub cache. Every function returns this crate's
//! typed [`Error`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bert;
pub mod error;
pub mod resolve;
pub mod sentence;

pub use error::{Error, Result};
