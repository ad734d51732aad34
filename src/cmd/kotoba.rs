//! `posenc kotoba …`: the English → Kotoba translation task's verbs.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use clap::Subcommand;
use posenc_train::job::Job;

/// `posenc kotoba …`
#[derive(Subcommand, Debug)]
pub enum KotobaCommand {
    /// Train the English → Kotoba translation model.
    #[command(
        after_help = "Examples:\n  posenc kotoba train --out runs/mine --steps 3000\n  posenc kotoba train --out runs/rope --encoding rope:base=500 --print-config\n  posenc kotoba train --out runs/mine --resume --steps 4000"
    )]
    Train(super::translate::TrainArgs),
    /// Translate English sentences into Kotoba.
    #[command(
        after_help = "Examples:\n  posenc kotoba translate \"the cat sees the dog\"\n  posenc kotoba translate --model runs/mine --beam 4 < sentences.txt"
    )]
    Translate(super::translate::TranslateArgs),
    /// Exact match and BLEU of a model on every evaluation split.
    #[command(after_help = "Examples:\n  posenc kotoba eval --model runs/mine --errors 3")]
    Eval(super::translate::EvalArgs),
    /// Train the toy model once per positional encoding and compare them.
    ///
    /// The lineup: every registered kind at its defaults, one seed; with --budget quick:
    /// none and sinusoidal.
    #[command(
        after_help = "Examples:\n  posenc kotoba experiment --budget quick\n  posenc kotoba experiment --encodings none,sinusoidal,rope --seeds 3 --out runs/exp\n  posenc kotoba experiment --seeds 3 --out runs/exp --shard 2/4"
    )]
    Experiment(super::experiment::ExperimentArgs),
}

impl super::TaskCommand for KotobaCommand {
    const KIND: &'static str = <posenc_kotoba::task::Translation as Job<'static>>::KIND;
    const A_RUN: &'static str = "a translation model";

    fn holds_older_run(dir: &Path) -> bool {
        use posenc_kotoba::task::{Record, TrainConfig};
        posenc_train::fit::RunState::<TrainConfig, Record>::load(dir).is_ok()
    }

    fn study(path: &Path) -> Result<(String, serde_json::Value)> {
        let e = posenc_kotoba::experiment::Experiment::load(path)?;
        Ok((e.markdown(), serde_json::to_value(&e.records)?))
    }

    fn run(self, out: &mut impl Write) -> Result<()> {
        match self {
            Self::Train(a) => a.run(out),
            Self::Translate(a) => a.run(out),
            Self::Eval(a) => a.run(out),
            Self::Experiment(a) => a.run(out),
        }
    }

    fn trains(&self) -> bool {
        matches!(self, Self::Train(_) | Self::Experiment(_))
    }

    fn resume(&self) -> Option<super::Resume> {
        match self {
            Self::Train(_) => Some(super::Resume::Train("kotoba")),
            Self::Experiment(_) => Some(super::Resume::Rerun),
            _ => None,
        }
    }
}
