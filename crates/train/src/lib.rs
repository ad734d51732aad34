//! # posenc-train: the English → Kotoba toy translation task
//!
//! Data ([`kotoba`], [`data`], [`vocab`]), training ([`batch`], [`loss`], [`schedule`],
//! [`optim`], [`trainer`]), decoding ([`decode`]), [`metrics`] and [`eval`], and the
//! [`experiment`] that trains one model per positional encoding.

#![warn(missing_docs)]

pub mod batch;
pub mod bench;
pub mod data;
pub mod decode;
pub mod eval;
pub mod experiment;
pub mod init;
pub mod inspect;
pub mod kotoba;
pub mod loss;
pub mod metrics;
pub mod optim;
pub mod schedule;
pub mod trainer;
pub mod vocab;
