//! # posenc-train: the training core, which knows no task
//!
//! | module | what |
//! |---|---|
//! | [`fit`] | the one training loop, and the [`fit::Task`] a task implements: the loop owns the schedule, dropout seeds, divergence, checkpoints and resume |
//! | [`job`] | a task's runs on disk: [`job::train`], [`job::resume`] and [`job::open`] for every task alike, from the [`job::Job`] it implements (its kind, how it is built for a new run and a run read back) |
//! | [`loss`], [`schedule`], [`optim`], [`init`] | label-smoothed cross-entropy, Noam and cosine schedules, resumable AdamW, weight initialisation |
//! | [`experiment`] | the one experiment driver: a grid of labelled encodings × seeds over any task, with reuse, resume, divergence as a row, shards and their merge |
//! | [`rundir`], [`results`] | a run's files as one unit (manifest, lock, atomic writes), and an experiment's files and the runs it finds |
//! | [`logs`] | a run's curves (loss, learning rate, throughput, validation) as TensorBoard event files and tidy JSON lines |
//! | [`claims`] | claims about an experiment checked against its records by one rule: the gap exceeds both spreads added, in every seed |
//! | [`records`] | tidy records read (JSON, CSV) and summarised over seeds one way, for `posenc report` and the explorer alike |
//! | [`pages`] | a page's generated tables, claims and values rendered from records by its markers (`posenc report --tables`) |
//! | [`labelled`], [`randomized`] | what an experiment compares (labelled encodings), and randomized positions |
//! | [`memory`], [`tokenize`] | memory guards and peak resident memory; word-level tokenizers |
//!
//! The tasks live beside it, each in its own crate: `posenc-kotoba` (English → Kotoba
//! translation), `posenc-lm` (a causal language model: training, evaluation, sampling,
//! passkey) and `posenc-lengthgen` (algorithmic length generalization). A new task is a
//! crate of its own that implements [`fit::Task`] (a step's loss, a validation) and
//! [`job::Job`] (its kind, how it is built), and [`experiment::Experiment`] to compare
//! encodings over seeds, plus its command in the command line; it writes no training,
//! resuming or loading code of its own.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod claims;
pub mod error;
pub mod experiment;
pub mod fit;
pub mod init;
pub mod job;
pub mod labelled;
pub mod logs;
pub mod loss;
pub mod memory;
pub mod optim;
pub mod pages;
pub mod randomized;
pub mod records;
pub mod results;
pub mod rundir;
pub mod schedule;
pub mod stop;
pub mod tokenize;

/// A training progress bar on standard error at `step` of `steps` (hidden when `quiet`).
pub fn progress_bar(quiet: bool, step: usize, steps: usize) -> indicatif::ProgressBar {
    let bar = bar(quiet, steps, "{pos}/{len}");
    bar.set_position(step as u64);
    bar
}

/// A progress bar on standard error over `total` tokens (hidden when `quiet`).
pub fn token_bar(quiet: bool, total: usize) -> indicatif::ProgressBar {
    bar(quiet, total, "{human_pos}/{human_len} tokens")
}

/// How often progress is printed off a terminal, in seconds: `POSENC_PROGRESS_EVERY`, else
/// 10 (0: at every redraw).
pub fn progress_every() -> std::time::Duration {
    let secs = std::env::var("POSENC_PROGRESS_EVERY")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(10.0);
    std::time::Duration::from_secs_f64(secs)
}

/// A bar of `total` steps counted as `count` says: drawn in place on a terminal; off one
/// (a pipe, a log file), a plain line every [`progress_every`] with the time left.
fn bar(quiet: bool, total: usize, count: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let (bar, template) = match (quiet, std::io::stderr().is_terminal()) {
        (true, _) => (indicatif::ProgressBar::hidden(), String::new()),
        (false, true) => (
            indicatif::ProgressBar::new(total as u64),
            format!("{{bar:30}} {count} [{{elapsed_precise}}<{{eta_precise}}] {{msg}}"),
        ),
        (false, false) => (
            indicatif::ProgressBar::with_draw_target(
                Some(total as u64),
                indicatif::ProgressDrawTarget::term_like_with_hz(
                    Box::new(Lines::new(progress_every())),
                    1,
                ),
            ),
            format!("{{msg}}: {count} ({{percent}}%), {{elapsed}} so far, about {{eta}} left"),
        ),
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

/// Progress off a terminal: each redraw of a bar as a plain line on standard error, at
/// most one per interval (the first one interval in, when the time left means something),
/// never a cursor movement.
#[derive(Debug)]
struct Lines {
    every: std::time::Duration,
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Lines {
    fn new(every: std::time::Duration) -> Self {
        Self {
            every,
            last: std::sync::Mutex::new(Some(std::time::Instant::now())),
        }
    }

    fn emit(&self, s: &str) -> std::io::Result<()> {
        // A bar without a message starts with the template's `: `.
        let s = s.trim().trim_start_matches(':').trim();
        let Ok(mut last) = self.last.lock() else {
            return Ok(());
        };
        if s.is_empty() || last.is_some_and(|t| t.elapsed() < self.every) {
            return Ok(());
        }
        *last = Some(std::time::Instant::now());
        log(s);
        Ok(())
    }
}

impl indicatif::TermLike for Lines {
    fn width(&self) -> u16 {
        200
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.emit(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.emit(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Prints `line` above `bar` on a terminal, or as a plain line (a hidden bar, or off a
/// terminal, where the bar's own lines are spaced out in time and must not hold it back).
pub fn bar_line(bar: &indicatif::ProgressBar, line: String) {
    use std::io::IsTerminal;
    if bar.is_hidden() || !std::io::stderr().is_terminal() {
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

/// Seconds as `42 s`, `3 min 5 s` or `2 h 10 min`, for progress lines and estimates.
pub fn duration(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

pub use error::{Error, Result};
