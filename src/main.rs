//! `posenc`: inspect, train and compare positional encodings from the command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Positional encodings inside a real Transformer, on candle.
#[derive(Parser)]
#[command(name = "posenc", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
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
    /// Draw figures (PNG).
    #[command(subcommand)]
    Plot(cmd::plot::PlotCommand),
    /// Sentence embeddings from a pretrained sentence-transformers model.
    Embed(cmd::embed::EmbedArgs),
    /// Measure speed.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Encoding(c) => c.run(&mut std::io::stdout().lock()),
        Command::Train(c) => c.run(),
        Command::Translate(c) => c.run(&mut std::io::stdout().lock()),
        Command::Eval(c) => c.run(&mut std::io::stdout().lock()),
        Command::Bench(c) => c.run(&mut std::io::stdout().lock()),
        Command::Experiment(c) => c.run(&mut std::io::stdout().lock()),
        Command::Plot(c) => c.run(&mut std::io::stdout().lock()),
        Command::Embed(c) => c.run(&mut std::io::stdout().lock()),
    }
}
