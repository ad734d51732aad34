//! `posenc`: inspect, train and compare positional encodings from the command line.

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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Encoding(c) => c.run(&mut std::io::stdout().lock()),
    }
}
