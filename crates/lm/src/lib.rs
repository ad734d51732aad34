//! # posenc-lm: a causal language model, and length extrapolation
//!
//! | module | what |
//! |---|---|
//! | [`corpus`], [`text_tokenizer`] | Shakespeare's works (or your own text), and character, word or BPE tokenizers trained on it |
//! | [`lm_train`] | the task for the training core's loop, with windowed and sliding-window evaluation by position |
//! | [`lm_run`] | a trained run loaded back, for evaluation and generation |
//! | [`causal`] | any causal model the commands take: a run of ours or a pretrained Llama (SmolLM2, GGUF) |
//! | [`sample`] | generation with a key/value cache and an optional window |
//! | [`passkey`] | retrieval of a key hidden past the window |
//! | [`ruler`] | a subset of RULER: needles, variable tracking, common words |
//! | [`streaming`] | the records of reading and generating past the window with a rolling cache |
//! | [`tables`] | the Markdown tables the commands print: loss by length and octave, sliding windows, passkey |
//! | [`lm_experiment`] | every encoding (and seed) trained and measured past its context |
//!
//! It runs on the training core, `posenc-train`, and imports no other task.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod causal;
pub mod corpus;
pub mod figures;
pub mod lm_experiment;
pub mod lm_run;
pub mod lm_train;
pub mod passkey;
pub mod ruler;
pub mod sample;
pub mod streaming;
pub mod tables;
pub mod text_tokenizer;

pub use posenc_train::{Error, Result};
