//! # posenc-kotoba: the English → Kotoba toy translation task
//!
//! An encoder-decoder trained from scratch to translate English into Kotoba, a small
//! invented language with its own word order and particles:
//!
//! | module | what |
//! |---|---|
//! | [`kotoba`], [`data`] | the language's generator, and the seeded splits it makes |
//! | [`vocab`] | word-level vocabularies of each side |
//! | [`task`] | the task for the training core's loop, its run directory, and the [`task::Translator`] that loads a trained one |
//! | [`decode`], [`metrics`], [`eval`] | greedy and beam decoding, exact match and sacreBLEU's BLEU, every split evaluated |
//! | [`experiment`] | every encoding (and seed) trained on the task and compared |
//! | [`inspect`], [`bench`](mod@bench) | attention maps of a translation; the training step the benchmark times |
//!
//! It runs on the training core, `posenc-train`, and imports no other task.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batch;
pub mod bench;
pub mod data;
pub mod decode;
pub mod eval;
pub mod experiment;
pub mod figures;
pub mod inspect;
pub mod kotoba;
pub mod metrics;
pub mod task;
pub mod vocab;

pub use posenc_train::{Error, Result};
