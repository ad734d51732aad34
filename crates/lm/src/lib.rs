//! # posenc-lm: a causal language model, and length extrapolation
//!
//! | module | what |
//! |---|---|
//! | [`corpus`], [`text_tokenizer`] | Shakespeare's works (or your own text), and character, word or BPE tokenizers trained on it |
//! | [`task`] | the task for the training core's loop, with windowed and sliding-window evaluation by position |
//! | [`run`] | its run directory: the inputs a run is built from, a trained run loaded back for evaluation and generation |
//! | [`causal`] | any causal model the commands take: a run of ours or a pretrained Llama (SmolLM2, GGUF) |
//! | [`sample`] | generation with a key/value cache and an optional window |
//! | [`text`] | generated tokens as text while they stream, and the stop texts that end them |
//! | [`passkey`] | retrieval of a key hidden past the window |
//! | [`ruler`] | a subset of RULER: needles, variable tracking, common words |
//! | [`streaming`] | the records of reading and generating past the window with a rolling cache |
//! | [`tables`] | the Markdown tables the commands print: loss by length and octave, sliding windows, passkey |
//! | [`experiment`] | every encoding (and seed) trained and measured past its context |
//!
//! It runs on the training core, `posenc-train`, and imports no other task.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod causal;
pub mod corpus;
pub mod experiment;
pub mod figures;
pub mod passkey;
pub mod ruler;
pub mod run;
pub mod sample;
pub mod streaming;
pub mod tables;
pub mod task;
pub mod text;
pub mod text_tokenizer;

pub use posenc_train::{Error, Result};
