//! The `posenc` command line as a library: [`Cli`] parses the arguments and [`run`] carries
//! out a command, writing what it prints to any writer. The binary is `src/main.rs`;
//! tests drive the same commands in-process (for instance with an encoding they register
//! themselves, see [`posenc::register`]).

#![forbid(unsafe_code)]

pub mod cmd;

use std::io::Write;

use clap::{Parser, Subcommand};

/// Positional encodings inside a real Transformer, on candle.
#[derive(Parser, Debug)]
#[command(name = "posenc", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Look at what one encoding produces, and at its properties.
    #[command(subcommand)]
    Encoding(cmd::encoding::EncodingCommand),
    /// Train the English → Kotoba translation model.
    Train(cmd::translate::TrainArgs),
    /// Translate English sentences into Kotoba.
    Translate(cmd::translate::TranslateArgs),
    /// Exact match and BLEU of a model on every evaluation split.
    Eval(cmd::translate::EvalArgs),
    /// Train the toy model once per positional encoding and compare them.
    Experiment(cmd::experiment::ExperimentArgs),
    /// Length generalization on an algorithmic problem: one decoder per encoding and
    /// seed, exact answers at lengths inside and past the trained ones.
    ///
    /// The decoder has 3 layers of width 64 with 4 heads (0.15 M parameters) unless
    /// --d-model, --layers or --heads say otherwise.
    Lengthgen(cmd::lengthgen::LengthgenArgs),
    /// A causal language model on Shakespeare: train, generate, measure past the context.
    #[command(subcommand)]
    Lm(cmd::lm::LmCommand),
    /// Draw figures (PNG).
    #[command(subcommand)]
    Plot(cmd::plot::PlotCommand),
    /// Sentence embeddings from a pretrained sentence-transformers model.
    Embed(cmd::embed::EmbedArgs),
    /// Continue a prompt: `posenc lm generate` with SmolLM2 as the default model.
    Generate(cmd::generate::GenerateArgs),
    /// Write a GGUF model as a Hugging Face directory (f32 safetensors, config, tokenizer).
    Convert(cmd::generate::ConvertArgs),
    /// Measure speed.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

impl Cli {
    /// Whether the command trains a model: `main` then sets the process up for training
    /// ([`posenc_kernels::tune_for_training`]).
    pub fn trains(&self) -> bool {
        use cmd::{bench::BenchCommand, lm::LmCommand};
        matches!(
            self.command,
            Command::Train(_)
                | Command::Experiment(_)
                | Command::Lengthgen(_)
                | Command::Lm(LmCommand::Train(_) | LmCommand::Experiment(_))
                | Command::Bench(BenchCommand::Train { .. })
        )
    }
}

/// Carries out the command `cli`, writing what it prints to `out`.
///
/// # Errors
/// Whatever stopped the command, with its causes; see [`cmd::error_text`] for printing.
pub fn run(cli: Cli, out: &mut impl Write) -> anyhow::Result<()> {
    match cli.command {
        Command::Encoding(c) => c.run(out),
        Command::Train(c) => c.run(out),
        Command::Translate(c) => c.run(out),
        Command::Eval(c) => c.run(out),
        Command::Bench(c) => c.run(out),
        Command::Experiment(c) => c.run(out),
        Command::Lengthgen(c) => c.run(out),
        Command::Plot(c) => c.run(out),
        Command::Lm(c) => c.run(out),
        Command::Embed(c) => c.run(out),
        Command::Generate(c) => c.run("smollm2", out),
        Command::Convert(c) => c.run(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_training_commands_are_the_ones_that_train() {
        let trains = |args: &str| {
            let cli = Cli::try_parse_from(format!("posenc {args}").split_whitespace());
            cli.unwrap_or_else(|e| panic!("{args}: {e}")).trains()
        };
        for args in [
            "train",
            "experiment --quick",
            "lengthgen --task copy --quick",
            "lm train --out x",
            "lm experiment",
            "bench train",
        ] {
            assert!(trains(args), "{args}");
        }
        for args in [
            "embed --model m a",
            "generate a",
            "translate a",
            "bench embed",
            "lm generate a",
        ] {
            assert!(!trains(args), "{args}");
        }
    }
}
