//! # posenc-lengthgen: length generalization on algorithmic problems
//!
//! After Kazemnejad et al. 2023 and Ruoss et al. 2023: a decoder-only model trained on instances of lengths `lo..=hi`, tested for exact
//! answers at lengths inside and past that range.
//!
//! Each instance is one sequence, `prompt = answer .` ([`problems`]); the loss is the
//! cross-entropy of the answer's tokens and the end token only (the prompt is given, not
//! predicted). The measure is the exact-match accuracy of greedy decoding, computed in one
//! teacher-forced pass:
//!
//! ```text
//! greedy(prompt) = answer  ⇔  argmax p(· | prompt = answer[..i]) = answer[i]  for every i
//! ```
//!
//! (if every prediction along the true answer is right, greedy decoding walks exactly that
//! path; at the first wrong one it leaves it, so its output is wrong). The answer's length
//! is a function of the prompt's, so the end token is checked the same way.
//!
//! The run goes through the one training loop ([`posenc_train::fit`]) and a run directory, like
//! every other task ([`task`]); [`experiment`] trains one run per encoding and seed. It imports no
//! other task.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod experiment;
pub mod figures;
pub mod problems;
pub mod task;

pub use posenc_train::{Error, Result};
