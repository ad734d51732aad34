//! `posenc kotoba train`, `posenc kotoba translate`, `posenc kotoba eval`: the toy English → Kotoba task.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use posenc_kotoba::decode::DecodeConfig;
use posenc_kotoba::eval::{evaluate, table};
use posenc_kotoba::task::{shipped_model, TrainConfig, Translation, Translator};
use posenc_train::job;

/// `posenc kotoba train`
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// A JSON training config (see `TrainConfig`); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The positional encoding.
    #[arg(long, value_parser = super::EncodingParser::<super::EncodingArg>::new(), hide_possible_values = true, help = format!(
        "The positional encoding: a kind, `kind:key=value:…` or a JSON object (`posenc \
         encoding list` shows them all) [default: the config's, else {}]",
        TrainConfig::default().model.encoding.kind()
    ))]
    encoding: Option<super::EncodingArg>,
    /// Output directory for the model and checkpoints.
    #[arg(long, default_value = "runs/kotoba")]
    out: PathBuf,
    /// Total optimizer steps.
    #[arg(long, help = format!(
        "Total optimizer steps (with --resume: raise the run's own) [default: the config's, \
         else {}]",
        TrainConfig::default().run.steps
    ))]
    steps: Option<usize>,
    /// Seed of weights and batch order.
    #[arg(long, help = format!(
        "Seed of weights and batch order [default: the config's, else {}]",
        TrainConfig::default().run.seed
    ))]
    seed: Option<u64>,
    /// Sentences per batch.
    #[arg(long, help = format!(
        "Sentences per batch [default: the config's, else {}]",
        TrainConfig::default().run.batch_size
    ))]
    batch_size: Option<usize>,
    /// Warm-up steps of the Noam schedule.
    #[arg(long, help = format!(
        "Warm-up steps of the Noam schedule, the learning rate rising to its peak \
         [default: the config's, else {}]",
        TrainConfig::default().run.warmup
    ))]
    warmup: Option<usize>,
    /// Save every this many steps.
    #[arg(long, help = format!(
        "Save a checkpoint every this many steps [default: the config's, else {}]",
        TrainConfig::default().run.save_every
    ))]
    save_every: Option<usize>,
    /// Validate every this many steps.
    #[arg(long, help = format!(
        "Validate every this many steps [default: the config's, else {}]",
        TrainConfig::default().run.eval_every
    ))]
    eval_every: Option<usize>,
    /// Print the full config this command would train with, as JSON that --config takes
    /// back, and train nothing.
    #[arg(long, conflicts_with = "resume")]
    print_config: bool,
    /// Output format: text (a summary line) or json (the run's state, alone on standard
    /// output).
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    format: super::Format,
    /// Continue the run in --out (its config is kept; --steps may extend it).
    #[arg(long)]
    resume: bool,
    /// Replace the run already in --out (files posenc did not write are never touched).
    #[arg(long, conflicts_with = "resume")]
    force: bool,
    #[command(flatten)]
    log_dir: super::LogDirArg,
    /// Where to train: cpu; cuda or cuda:N (built with --features cuda);
    /// metal or metal:N (--features metal). The run directory is the same on any device.
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

impl TrainArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let opts = self.log_dir.options(self.quiet, self.force);
        let state = if self.resume {
            job::resume::<Translation>(&self.out, self.steps, &(), opts, &self.device.0)
                .map_err(|e| super::for_task(e, &self.out, "kotoba"))?
        } else {
            let mut cfg = match &self.config {
                Some(path) => TrainConfig::load(path)?,
                None => TrainConfig::default(),
            };
            if let Some(e) = self.encoding {
                cfg.model.encoding = e.0.into();
            }
            cfg.run.steps = self.steps.unwrap_or(cfg.run.steps);
            cfg.run.seed = self.seed.unwrap_or(cfg.run.seed);
            cfg.run.batch_size = self.batch_size.unwrap_or(cfg.run.batch_size);
            cfg.run.warmup = self.warmup.unwrap_or(cfg.run.warmup);
            cfg.run.save_every = self.save_every.unwrap_or(cfg.run.save_every);
            cfg.run.eval_every = self.eval_every.unwrap_or(cfg.run.eval_every);
            if self.print_config {
                let resolved = posenc_kotoba::task::resolve(cfg)?.config;
                writeln!(out, "{}", serde_json::to_string_pretty(&resolved)?)?;
                return Ok(());
            }
            job::train::<Translation>(cfg, &(), &self.out, opts, &self.device.0)?
        };
        if self.format == super::Format::Json {
            return super::print_run(out, &self.out, &state);
        }
        if let Some(last) = state.history.last() {
            writeln!(
                out,
                "{} steps in {:.0} s ({:.0} tokens/s{}); valid loss {:.4}, valid exact match {:.1}%; model in {}",
                state.step,
                state.elapsed_s,
                state.tokens_per_second(),
                super::peak_note(state.peak_rss_mb),
                last.valid_loss,
                100.0 * last.valid_exact,
                self.out.display()
            )?;
        }
        Ok(())
    }
}

/// Decoding flags shared by `translate` and `eval`.
#[derive(Args, Debug)]
pub struct DecodeArgs {
    /// Model directory [default: the shipped models/kotoba].
    #[arg(long)]
    model: Option<PathBuf>,
    /// Beam size (1 = greedy).
    #[arg(long, default_value_t = 1)]
    beam: usize,
    /// GNMT length penalty α ≥ 0 for beam search.
    #[arg(long, default_value_t = 0.6)]
    length_penalty: f64,
    /// Longest translation, in words [default: 100, or less if the model's positions end
    /// sooner].
    #[arg(long)]
    max_len: Option<usize>,
    /// Where to translate: cpu; cuda or cuda:N (built with --features cuda); metal or
    /// metal:N (--features metal).
    #[arg(long, default_value = "cpu")]
    device: super::DeviceArg,
}

impl DecodeArgs {
    fn load(&self) -> Result<(Translator, DecodeConfig)> {
        let dir = self.model.clone().unwrap_or_else(shipped_model);
        let translator = Translator::load(&dir, &self.device.0)
            .map_err(|e| super::for_task(e, &dir, "kotoba"))?;
        let positions = translator.model.max_positions().1.unwrap_or(usize::MAX);
        let cfg = DecodeConfig {
            beam: self.beam,
            length_penalty: self.length_penalty,
            max_len: self.max_len.unwrap_or(100.min(positions.saturating_sub(1))),
        };
        cfg.validate(&translator.model)?;
        Ok((translator, cfg))
    }
}

/// `posenc kotoba translate`
#[derive(Args, Debug)]
pub struct TranslateArgs {
    #[command(flatten)]
    decode: DecodeArgs,
    /// Stop at the first sentence that cannot be translated, printing nothing; by default
    /// each bad one is named on standard error, its output line left empty, and the good
    /// ones are printed.
    #[arg(long)]
    strict: bool,
    /// Output format: text (a translation per line) or json (a record per sentence: its
    /// line, the sentence, and the translation or the error).
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    format: super::Format,
    /// English sentences; with none, one per line from standard input (where an empty line
    /// stays an empty line).
    sentences: Vec<String>,
}

impl TranslateArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        if let Some(i) = self.sentences.iter().position(|s| s.trim().is_empty()) {
            anyhow::bail!("sentence {} is empty: there is nothing to translate", i + 1);
        }
        let (translator, cfg) = self.decode.load()?;
        if self.sentences.is_empty() && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return converse(&translator, &cfg, out);
        }
        let sentences = super::sentences_or_stdin(self.sentences)?;
        if self.strict {
            for line in translator.translate(&sentences, &cfg)? {
                writeln!(out, "{line}")?;
            }
            return Ok(());
        }
        let mut bad = Vec::new();
        let mut records = Vec::new();
        let json = self.format == super::Format::Json;
        for (i, result) in translator
            .translate_each(&sentences, &cfg)?
            .into_iter()
            .enumerate()
        {
            let (output, error) = match result {
                Ok(line) => (Some(line), None),
                Err(e) => {
                    posenc_train::log(&format!("error: {e}"));
                    bad.push(e.line);
                    (None, Some(e.to_string()))
                }
            };
            if json {
                records.push(serde_json::json!({
                    "line": i + 1, "input": sentences[i], "output": output, "error": error,
                }));
            } else {
                // The output stays line for line with the input.
                writeln!(out, "{}", output.unwrap_or_default())?;
            }
        }
        if json {
            writeln!(out, "{}", serde_json::to_string_pretty(&records)?)?;
        }
        anyhow::ensure!(
            bad.is_empty(),
            "{} of {} sentences could not be translated ({} {}){}",
            bad.len(),
            sentences.len(),
            if bad.len() == 1 { "line" } else { "lines" },
            bad.iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if bad.len() < sentences.len() {
                "; the others are printed"
            } else {
                ""
            }
        );
        Ok(())
    }
}

/// On a terminal with no sentence given: a prompt, then each line translated as it is
/// entered (a line that cannot be is named, and the next is asked for), until the end of
/// input.
fn converse(translator: &Translator, cfg: &DecodeConfig, out: &mut impl Write) -> Result<()> {
    use std::io::BufRead;
    let mut lines = std::io::stdin().lock().lines();
    for number in 1.. {
        eprint!("> ");
        let Some(line) = lines.next() else {
            break;
        };
        let line = line.context("reading standard input")?;
        if line.trim().is_empty() {
            continue;
        }
        match translator.translate_each(&[line], cfg)?.pop() {
            Some(Ok(translation)) => writeln!(out, "{translation}")?,
            Some(Err(mut e)) => {
                e.line = number;
                posenc_train::log(&format!("error: {e}"));
            }
            None => {}
        }
        out.flush()?;
    }
    Ok(())
}

/// `posenc kotoba eval`
#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    decode: DecodeArgs,
    /// Output format: text (the table, then any mistakes) or json (the reports, mistakes
    /// included, alone on standard output).
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    format: super::Format,
    /// The same as `--format json`.
    #[arg(long, hide = true, conflicts_with = "format")]
    json: bool,
    /// Show up to this many mistakes per split, in the table's text or the JSON.
    #[arg(long, default_value_t = 0)]
    errors: usize,
}

impl EvalArgs {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let (translator, cfg) = self.decode.load()?;
        let data = translator.state.config.data.clone();
        let reports = evaluate(&translator, &data, &cfg, self.errors)?;
        if self.json || self.format == super::Format::Json {
            writeln!(out, "{}", serde_json::to_string_pretty(&reports)?)?;
            return Ok(());
        }
        write!(out, "{}", table(&reports))?;
        for r in &reports {
            for m in &r.errors {
                writeln!(
                    out,
                    "{}: {}\n  expected: {}\n  produced: {}",
                    r.split, m.source, m.expected, m.produced
                )?;
            }
        }
        Ok(())
    }
}
