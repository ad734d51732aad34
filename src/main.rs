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
    let cli = Cli::parse();
    let mut out = cmd::Stdout::new();
    match run(cli, &mut out).and_then(|()| out.finish()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`posenc … | head`): nothing is left to say to anyone.
        Err(e) if cmd::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {}", cmd::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, out: &mut cmd::Stdout) -> anyhow::Result<()> {
    match cli.command {
        Command::Encoding(c) => c.run(out),
        Command::Train(c) => c.run(out),
        Command::Translate(c) => c.run(out),
        Command::Eval(c) => c.run(out),
        Command::Bench(c) => c.run(out),
        Command::Experiment(c) => c.run(out),
        Command::Plot(c) => c.run(out),
        Command::Embed(c) => c.run(out),
    }
}
