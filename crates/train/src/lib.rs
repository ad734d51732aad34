//! # posenc-train: the English → Kotoba toy translation task
//!
//! Data ([`kotoba`], [`data`], [`vocab`]), training ([`batch`], [`loss`], [`schedule`],
//! [`optim`], [`trainer`]), decoding ([`decode`]) and [`metrics`].

pub mod data;
pub mod kotoba;
pub mod vocab;
