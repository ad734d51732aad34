//! `posenc plot encoding` and `posenc plot attention`: PNG figures.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use posenc_kotoba::task::{shipped_model, Translator};

/// `posenc plot …`
#[derive(Subcommand, Debug)]
pub enum PlotCommand {
    /// An encoding as the documents draw it: heatmap, dot products, rotations.
    #[command(
        after_help = "Examples:\n  posenc plot encoding --encoding sinusoidal --out sinusoidal.png\n  posenc plot encoding --encoding alibi --heads 8 --len 32 --out alibi.png"
    )]
    Encoding {
        /// The encoding: a kind, `kind:key=value:…` or a JSON object (`posenc encoding
        /// list` shows them all).
        #[arg(long = "encoding", alias = "kind", value_name = "ENCODING", value_parser = super::EncodingParser::<super::EncodingArg>::new(), hide_possible_values = true)]
        kind: super::EncodingArg,
        /// Model width.
        #[arg(long, default_value_t = 64)]
        d_model: usize,
        /// Attention heads (for the bias encodings).
        #[arg(long, default_value_t = 4)]
        heads: usize,
        /// Positions 0..len.
        #[arg(long, default_value_t = 64)]
        len: usize,
        /// The seed of an untrained encoding's weights (t5's bias, a learned table), drawn
        /// as training draws them, so that the figure is the same every time.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output PNG.
        #[arg(long)]
        out: PathBuf,
    },
    /// Attention maps of a trained model for one sentence, every layer and head.
    #[command(
        after_help = "Examples:\n  posenc plot attention --sentence 'the small cat sees the dog in the park' --out attention.png"
    )]
    Attention {
        /// Model directory [default: the shipped models/kotoba].
        #[arg(long)]
        model: Option<PathBuf>,
        /// The English sentence.
        #[arg(long)]
        sentence: String,
        /// Output PNG.
        #[arg(long)]
        out: PathBuf,
    },
    /// The figures of `posenc kotoba experiment` drawn from its results (validation curves, exact
    /// match by length), redrawn from its results.json.
    #[command(
        after_help = "Examples:\n  posenc plot experiment --results docs/experiment/results.json --out runs/figures"
    )]
    Experiment {
        /// The experiment's results.json.
        #[arg(long)]
        results: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// The two figures of `posenc lm experiment`, redrawn from its results.json, or from several
    /// of one setting pooled into one figure (more encodings, or more seeds of the same).
    #[command(
        after_help = "Examples:\n  posenc plot lm-experiment --results docs/lm-experiment/results.json --out runs/figures\n  posenc plot lm-experiment --results runs/lm-a/results.json runs/lm-b/results.json --out runs/lm"
    )]
    LmExperiment {
        /// The experiment's results.json; several (`--results a.json b.json`) are pooled.
        #[arg(long, num_args = 1.., required = true)]
        results: Vec<PathBuf>,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// The figure of `posenc lengthgen experiment`, redrawn from its results.json, or from several of
    /// one setting pooled into one figure (more encodings, or more seeds of the same).
    #[command(
        after_help = "Examples:\n  posenc plot lengthgen --results docs/lengthgen/sort/results.json --out runs/figures\n  posenc plot lengthgen --results runs/sort-a/results.json runs/sort-b/results.json --out runs/sort"
    )]
    Lengthgen {
        /// The experiment's results.json; several (`--results a.json b.json`) are pooled.
        #[arg(long, num_args = 1.., required = true)]
        results: Vec<PathBuf>,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
}

impl PlotCommand {
    /// Runs the command.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let path = match self {
            Self::Encoding {
                kind,
                d_model,
                heads,
                len,
                seed,
                out,
            } => {
                let target = posenc::Target::new(d_model, heads, posenc::Direction::Bidirectional)?;
                let varmap = candle_nn::VarMap::new();
                let vb = candle_nn::VarBuilder::from_varmap(
                    &varmap,
                    candle_core::DType::F32,
                    &candle_core::Device::Cpu,
                );
                let pe = kind.0.build(&target, vb)?;
                posenc_train::init::initialize(&varmap, seed)?;
                posenc_plot::encoding(pe.as_ref(), d_model, len, &out)?;
                out
            }
            Self::Attention {
                model,
                sentence,
                out,
            } => {
                let dir = model.unwrap_or_else(shipped_model);
                let translator = Translator::load(&dir, &candle_core::Device::Cpu)
                    .map_err(|e| super::for_task(e, &dir, "kotoba"))?;
                let maps = translator.attention(&sentence)?;
                let kind = translator.model.config().encoding.kind();
                let title = format!("{kind}: \"{sentence}\" → \"{}\"", {
                    let mut t = maps.target.clone();
                    t.pop();
                    t.join(" ")
                });
                posenc_kotoba::figures::attention(&maps, &title, &out)?;
                out
            }
            Self::Experiment { results, out: dir } => {
                let exp = posenc_kotoba::experiment::Experiment::load(&results)?;
                let plots = posenc_kotoba::figures::results_figures(&exp, &dir)
                    .with_context(|| format!("plotting {}", results.display()))?;
                return list(out, &plots);
            }
            Self::LmExperiment { results, out: dir } => {
                let exp = posenc_lm::experiment::LmExperiment::load_pooled(&results)?;
                let plots = posenc_lm::figures::lm_experiment(&exp, &dir)
                    .with_context(|| format!("plotting {}", joined(&results)))?;
                return list(out, &plots);
            }
            Self::Lengthgen { results, out: dir } => {
                use posenc_lengthgen::experiment::LengthgenExperiment;
                let parts = results
                    .iter()
                    .map(|r| LengthgenExperiment::load(r))
                    .collect::<Result<Vec<_>, _>>()?;
                let names = joined(&results);
                let exp = LengthgenExperiment::merge(parts)
                    .with_context(|| format!("pooling {names}"))?;
                let plots = posenc_lengthgen::figures::lengthgen(&exp, &dir)
                    .with_context(|| format!("plotting {names}"))?;
                return list(out, &plots);
            }
        };
        writeln!(out, "{}", path.display())?;
        Ok(())
    }
}

/// The paths, as a list for a message: `a.json, b.json`.
fn joined(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// Prints the paths of the figures written, one per line.
fn list(out: &mut impl Write, plots: &[PathBuf]) -> Result<()> {
    for p in plots {
        writeln!(out, "{}", p.display())?;
    }
    Ok(())
}
