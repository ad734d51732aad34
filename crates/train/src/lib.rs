//! # posenc-train: the English → Kotoba toy translation task
//!
//! Data ([`kotoba`], [`data`], [`vocab`]), training ([`batch`], [`loss`], [`schedule`],
//! [`optim`], [`trainer`]), decoding ([`decode`]) and [`metrics`].

pub mod batch;
pub mod bench;
pub mod data;
pub mod decode;
pub mod eval;
pub mod init;
pub mod kotoba;
pub mod loss;
pub mod metrics;
pub mod optim;
pub mod schedule;
pub mod trainer;
pub mod vocab;
