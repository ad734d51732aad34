//! The `posenc` command line as a library: [`Cli`] parses the arguments and [`run`] carries
//! out a command, writing what it prints to any writer. The binary is `src/main.rs`;
//! tests drive the same commands in-process (for instance with an encoding they register
//! themselves, see [`posenc::register`]).

#![forbid(unsafe_code)]

pub mod cmd;

use std::ffi::OsString;
use std::io::Write;

use clap::{Parser, Subcommand};

/// Positional encodings inside a real Transformer, on candle.
#[derive(Parser, Debug)]
#[command(name = "posenc", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// A task's runs, by the kind their manifests carry: the kind, what such a run is, and how
/// a run written before manifests carried it is told ([`cmd::TaskCommand`]).
type RunKind = (&'static str, &'static str, fn(&std::path::Path) -> bool);

/// How one kind of experiment results is read: its page and its tidy records.
type StudyReader = fn(&std::path::Path) -> anyhow::Result<(String, serde_json::Value)>;

/// The tasks, each a crate of its own and a command module in `src/cmd/` whose verbs
/// implement [`cmd::TaskCommand`]: a new task is one more line here, and its runs and
/// results are then known to every command that reads them ([`cmd::run_kind`], `report`).
macro_rules! tasks {
    ($($(#[doc = $doc:literal])* $name:ident($command:ty),)*) => {
        /// Every task's runs ([`cmd::run_kind`]).
        const RUNS: &[RunKind] = &[$((
            <$command as cmd::TaskCommand>::KIND,
            <$command as cmd::TaskCommand>::A_RUN,
            <$command as cmd::TaskCommand>::holds_older_run,
        ),)*];

        /// Every task's experiment results, by kind (`posenc report`).
        const STUDIES: &[(&str, StudyReader)] =
            &[$((<$command as cmd::TaskCommand>::KIND, <$command as cmd::TaskCommand>::study),)*];

        /// `posenc <task> <verb>`
        #[derive(Subcommand, Debug)]
        enum Task {
            $($(#[doc = $doc])* #[command(subcommand)] $name($command),)*
        }

        impl Task {
            fn run(self, out: &mut impl Write) -> anyhow::Result<()> {
                match self {
                    $(Self::$name(c) => cmd::TaskCommand::run(c, out),)*
                }
            }

            fn trains(&self) -> bool {
                match self {
                    $(Self::$name(c) => cmd::TaskCommand::trains(c),)*
                }
            }

            fn resume(&self) -> Option<cmd::Resume> {
                match self {
                    $(Self::$name(c) => cmd::TaskCommand::resume(c),)*
                }
            }
        }
    };
}

tasks! {
    /// The English → Kotoba translation task: train, translate, evaluate, compare
    /// encodings.
    Kotoba(cmd::kotoba::KotobaCommand),
    /// A causal language model on Shakespeare: train, generate, measure past the context.
    Lm(cmd::lm::LmCommand),
    /// Length generalization on algorithmic problems: train a decoder, test it at lengths
    /// inside and past the trained ones, compare encodings.
    Lengthgen(cmd::lengthgen::LengthgenCommand),
    /// Questions about scenes of shapes answered by a small ViT: train it, test it on
    /// grids larger than the trained one, compare encodings.
    Vision(cmd::vision::VisionCommand),
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Look at what one encoding produces, and at its properties.
    #[command(subcommand)]
    Encoding(cmd::encoding::EncodingCommand),
    #[command(flatten)]
    Task(Task),
    /// Draw figures (PNG).
    #[command(subcommand)]
    Plot(cmd::plot::PlotCommand),
    /// Render studies' results.md from their records: the tables, and the claims checked.
    #[command(
        after_help = "Examples:\n  posenc report docs/lengthgen/sort\n  posenc report --check docs/experiment docs/lm-experiment"
    )]
    Report(cmd::report::ReportArgs),
    /// Sentence embeddings from a pretrained sentence-transformers model.
    #[command(
        after_help = "Examples:\n  posenc embed \"a sentence\" \"another one\"\n  posenc embed --model sentence-transformers/all-MiniLM-L6-v2 \"a sentence\""
    )]
    Embed(cmd::embed::EmbedArgs),
    /// Continue a prompt: `posenc lm generate` with SmolLM2 as the default model.
    #[command(
        after_help = "Examples:\n  posenc generate \"The capital of France is\"\n  posenc generate --chat --temperature 0 \"What is a positional encoding?\""
    )]
    Generate(cmd::generate::GenerateArgs),
    /// Write a GGUF model as a Hugging Face directory (f32 safetensors, config, tokenizer).
    #[command(after_help = "Examples:\n  posenc convert --model smollm2 --out runs/smollm2-hf")]
    Convert(cmd::generate::ConvertArgs),
    /// Measure speed.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// The explorer: a local web page of encodings, attention and results, and an
    /// OpenAI-compatible chat endpoint for the language models.
    #[command(after_help = "Examples:\n  posenc serve\n  posenc serve --port 8080 --runs runs")]
    Serve(cmd::serve::ServeArgs),
    /// Print a shell's completion script: `posenc completions bash > ~/.local/share/bash-completion/completions/posenc`.
    #[command(after_help = "Examples:\n  posenc completions bash\n  posenc completions zsh")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a command's manual page (roff): `posenc man lm train | man -l -`.
    #[command(
        after_help = "Examples:\n  posenc man\n  posenc man lm train\n  posenc man --out man/man1"
    )]
    Man {
        /// The command whose page to print, its words in order [default: posenc's own].
        command: Vec<String>,
        /// Write every command's page (posenc.1, posenc-lm.1, posenc-lm-train.1, …) into
        /// this directory instead [default: none, the one page printed].
        #[arg(long, conflicts_with = "command")]
        out: Option<std::path::PathBuf>,
    },
}

/// Earlier spellings of commands, each with the words that replace it: they keep working,
/// rewritten before parsing, and no help shows them.
const EARLIER_SPELLINGS: [(&str, &[&str]); 4] = [
    ("train", &["kotoba", "train"]),
    ("translate", &["kotoba", "translate"]),
    ("eval", &["kotoba", "eval"]),
    ("experiment", &["kotoba", "experiment"]),
];

/// `args` (the program's name first) with an earlier spelling of the command replaced by
/// today's: `posenc train …` is `posenc kotoba train …`, and `posenc lengthgen --task …`
/// (the grid, before it had verbs) is `posenc lengthgen experiment --task …`.
pub fn current_spelling<T: Into<OsString>>(args: impl IntoIterator<Item = T>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let word = |i: usize| {
        args.get(i)
            .and_then(|a| a.to_str())
            .unwrap_or("")
            .to_string()
    };
    if let Some((_, now)) = EARLIER_SPELLINGS.iter().find(|(old, _)| *old == word(1)) {
        args.splice(1..2, now.iter().map(OsString::from));
    } else if word(1) == "lengthgen"
        && word(2).starts_with("--")
        && !["--help", "-h"].contains(&word(2).as_str())
    {
        args.insert(2, "experiment".into());
    }
    args
}

impl Cli {
    /// Parses `args` (the program's name first), earlier spellings included
    /// ([`current_spelling`]).
    ///
    /// # Errors
    /// clap's, for arguments that do not parse; `e.exit()` prints it as clap does.
    pub fn parse_args<T: Into<OsString>>(
        args: impl IntoIterator<Item = T>,
    ) -> Result<Self, clap::Error> {
        Self::try_parse_from(current_spelling(args))
    }

    /// Whether the command trains a model: `main` then sets the process up for training
    /// ([`posenc_kernels::tune_for_training`]).
    pub fn trains(&self) -> bool {
        use cmd::bench::BenchCommand;
        match &self.command {
            Command::Task(t) => t.trains(),
            Command::Bench(BenchCommand::Train { .. }) => true,
            _ => false,
        }
    }
}

/// Carries out the command `cli`, writing what it prints to `out`.
///
/// # Errors
/// Whatever stopped the command, with its causes; see [`cmd::error_text`] for printing.
pub fn run(cli: Cli, out: &mut impl Write) -> anyhow::Result<()> {
    let resume = match &cli.command {
        Command::Task(t) => t.resume(),
        _ => None,
    };
    let result = match cli.command {
        Command::Encoding(c) => c.run(out),
        Command::Task(t) => t.run(out),
        Command::Plot(c) => c.run(out),
        Command::Report(c) => c.run(out),
        Command::Embed(c) => c.run(out),
        Command::Generate(c) => c.run("smollm2", out),
        Command::Convert(c) => c.run(out),
        Command::Bench(c) => c.run(out),
        Command::Serve(c) => c.run(out),
        // Both are made in memory first: clap_complete panics on a failed write, and a
        // closed pipe must end quietly.
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "posenc", &mut script);
            out.write_all(&script).map_err(anyhow::Error::from)
        }
        Command::Man { command, out: dir } => man(&command, dir.as_deref(), out),
    };
    // A run stopped by Ctrl-C says how to go on.
    result.map_err(|e| match (cmd::interrupted(&e), resume) {
        (Some(interrupted), Some(resume)) => cmd::Stopped {
            interrupted,
            resume,
        }
        .into(),
        _ => e,
    })
}

/// `posenc man`: the page of the command named by `words` on `out`, or with `dir` every
/// command's page written there, each as `posenc-<words>.1`.
fn man(
    words: &[String],
    dir: Option<&std::path::Path>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    // Each page is made in memory first: a closed pipe ends quietly, a file is whole.
    let page = |cmd: &clap::Command| -> anyhow::Result<Vec<u8>> {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .source(format!("posenc {}", env!("CARGO_PKG_VERSION")))
            .render(&mut page)?;
        Ok(page)
    };
    let Some(dir) = dir else {
        let mut at = &cmd;
        for (i, word) in words.iter().enumerate() {
            at = at.find_subcommand(word).ok_or_else(|| {
                let known: Vec<&str> = at.get_subcommands().map(|s| s.get_name()).collect();
                anyhow::anyhow!(
                    "`posenc {}` is no command: after `posenc {}` come {}",
                    words[..=i].join(" "),
                    words[..i].join(" "),
                    known.join(", ")
                )
            })?;
        }
        return out.write_all(&page(at)?).map_err(Into::into);
    };
    anyhow::ensure!(dir.is_dir(), "--out: {} is not a directory", dir.display());
    fn every<'a>(cmd: &'a clap::Command, all: &mut Vec<&'a clap::Command>) {
        all.push(cmd);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            every(sub, all);
        }
    }
    let mut all = Vec::new();
    every(&cmd, &mut all);
    let pages: Vec<(std::path::PathBuf, Vec<u8>)> = all
        .iter()
        .map(|c| {
            let name = c.get_display_name().unwrap_or_else(|| c.get_name());
            Ok((dir.join(format!("{name}.1")), page(c)?))
        })
        .collect::<anyhow::Result<_>>()?;
    for (path, page) in &pages {
        posenc_io::write_atomic(path, page)?;
    }
    writeln!(out, "{} pages in {}", pages.len(), dir.display())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each earlier spelling parses to the same command as today's, and today's spellings
    /// (and other commands) pass through unchanged.
    #[test]
    fn earlier_spellings_are_rewritten_to_todays() {
        let words = |args: &str| -> Vec<String> {
            current_spelling(args.split_whitespace())
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect()
        };
        let same = |old: &str, new: &str| {
            assert_eq!(words(old), words(new), "{old}");
            assert_eq!(words(new).join(" "), new, "{new} is changed");
            let (a, b) = (
                Cli::parse_args(old.split_whitespace()),
                Cli::parse_args(new.split_whitespace()),
            );
            assert_eq!(
                format!("{:?}", a.unwrap()),
                format!("{:?}", b.unwrap()),
                "{old}"
            );
        };
        same("posenc train --steps 3", "posenc kotoba train --steps 3");
        same("posenc translate a b", "posenc kotoba translate a b");
        same("posenc eval --model m", "posenc kotoba eval --model m");
        same(
            "posenc experiment --quick",
            "posenc kotoba experiment --quick",
        );
        same(
            "posenc lengthgen --task copy --quick",
            "posenc lengthgen experiment --task copy --quick",
        );
        for unchanged in [
            "posenc lengthgen --help",
            "posenc lm train",
            "posenc encoding list",
        ] {
            assert_eq!(words(unchanged).join(" "), unchanged);
        }
    }

    #[test]
    fn the_training_commands_are_the_ones_that_train() {
        let trains = |args: &str| {
            let cli = Cli::parse_args(format!("posenc {args}").split_whitespace());
            cli.unwrap_or_else(|e| panic!("{args}: {e}")).trains()
        };
        for args in [
            "train",
            "kotoba train",
            "experiment --quick",
            "kotoba experiment --quick",
            "lengthgen --task copy --quick",
            "lengthgen experiment --task copy --quick",
            "lengthgen train --task copy",
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
            "kotoba translate a",
            "lengthgen eval --model x",
            "bench embed",
            "lm generate a",
        ] {
            assert!(!trains(args), "{args}");
        }
    }
}
