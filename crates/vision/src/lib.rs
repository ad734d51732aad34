//! # posenc-vision: positions on a grid, tested past the trained resolution
//!
//! A small Vision Transformer ([`model`]) answers questions about synthetic scenes of
//! coloured shapes ([`scenes`], after Sort-of-CLEVR, Santoro et al. 2017) that need where
//! the shapes are: which is left of or above another, which is nearest or farthest, how
//! many lie to one's left, whether one is in the left half. Nothing is fetched: every scene
//! is drawn from a seed.
//!
//! Resolution extrapolation, as Heo et al. 2024 ("Rotary Position Embedding for Vision
//! Transformer") measure it: train on one grid of patches (8 × 8) and test on larger
//! canvases (12 × 12, 16 × 16) with the same patch size, so an image has more patches, at
//! coordinates the model never saw. Each patch's position is data, given to the encoding
//! as the coordinates it declares it reads.
//!
//! The run goes through the one training loop ([`posenc_train::fit`]) and a run directory,
//! like every other task ([`task`]); [`experiment`] trains one run per encoding and seed.
//! It imports no other task.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod experiment;
pub mod figures;
pub mod model;
pub mod scenes;
pub mod task;

pub use posenc_train::{Error, Result};
