//! # posenc-train: the training loop, and the tasks it trains
//!
//! | part | modules |
//! |---|---|
//! | the shared core | [`fit`] (the one loop, and the [`fit::Task`] a task implements), [`loss`], [`schedule`], [`optim`], [`init`], [`rundir`] (a run's files as one unit), [`results`] (an experiment's files and the runs it finds), [`memory`] (peak resident memory), [`labelled`] (what an experiment compares), `randomized` positions |
//! | English → Kotoba translation | [`kotoba`], [`data`], [`vocab`], `batch`, [`trainer`], [`decode`], [`metrics`], [`eval`], [`experiment`], [`inspect`], [`bench`](mod@bench) |
//! | a causal language model | [`corpus`], [`text_tokenizer`], [`lm_train`], [`lm_run`], [`sample`], [`passkey`], [`lm_experiment`] |
//! | length generalization | [`lengthgen`] (the algorithmic problems and their experiment) |
//!
//! A new task is a module of its own that implements [`fit::Task`] and runs through
//! [`fit`]'s loop, plus its one line below and its command.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batch;
pub mod bench;
pub mod corpus;
pub mod data;
pub mod decode;
pub mod error;
pub mod eval;
pub mod experiment;
pub mod fit;
pub mod init;
pub mod inspect;
pub mod kotoba;
pub mod labelled;
pub mod lengthgen;
pub mod lm_experiment;
pub mod lm_run;
pub mod lm_train;
pub mod loss;
pub mod memory;
pub mod metrics;
pub mod optim;
pub mod passkey;
mod randomized;
pub mod results;
pub mod rundir;
pub mod sample;
pub mod schedule;
pub mod text_tokenizer;
pub mod trainer;
pub mod vocab;

/// A training progress bar on standard error at `step` of `steps` (hidden when `quiet`).
pub(crate) fn progress_bar(quiet: bool, step: usize, steps: usize) -> indicatif::ProgressBar {
    let bar = bar(quiet, steps, "{pos}/{len}");
    bar.set_position(step as u64);
    bar
}

/// A progress bar on standard error over `total` tokens (hidden when `quiet`, and by
/// `indicatif` when standard error is not a terminal).
pub fn token_bar(quiet: bool, total: usize) -> indicatif::ProgressBar {
    bar(quiet, total, "{human_pos}/{human_len} tokens")
}

/// A bar of `total` steps counted as `count` says.
fn bar(quiet: bool, total: usize, count: &str) -> indicatif::ProgressBar {
    let bar = match quiet {
        true => indicatif::ProgressBar::hidden(),
        false => indicatif::ProgressBar::new(total as u64),
    };
    let template = format!("{{bar:30}} {count} [{{elapsed_precise}}<{{eta_precise}}] {{msg}}");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

/// Prints `line` above `bar`, or as a plain line when the bar is hidden.
pub(crate) fn bar_line(bar: &indicatif::ProgressBar, line: String) {
    if bar.is_hidden() {
        log(&line);
    } else {
        bar.println(line);
    }
}

/// Writes a progress line to standard error. Unlike `eprintln!`, a closed or full stderr
/// is ignored rather than a panic: progress is never worth failing a run for.
pub fn log(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

pub use error::{Error, Result};
