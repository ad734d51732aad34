//! # posenc-train: the English → Kotoba toy translation task
//!
//! Data ([`kotoba`], [`data`], [`vocab`]), training ([`batch`], [`loss`], [`schedule`],
//! [`optim`], [`trainer`], and [`rundir`], the directory a run writes as one unit), decoding ([`decode`]), [`metrics`] and [`eval`], and the
//! [`experiment`] that trains one model per positional encoding.

#![warn(missing_docs)]

pub mod batch;
pub mod bench;
pub mod corpus;
pub mod data;
pub mod decode;
pub mod eval;
pub mod experiment;
pub mod init;
pub mod inspect;
pub mod kotoba;
pub mod lm_experiment;
pub mod lm_run;
pub mod lm_train;
pub mod loss;
pub mod metrics;
pub mod optim;
pub mod randomized;
pub mod rundir;
pub mod sample;
pub mod schedule;
pub mod text_tokenizer;
pub mod trainer;
pub mod vocab;

/// Writes a progress line to standard error. Unlike `eprintln!`, a closed or full stderr
/// is ignored rather than a panic: progress is never worth failing a run for.
pub fn log(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
