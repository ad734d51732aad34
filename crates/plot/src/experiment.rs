//! The figures of `posenc kotoba experiment`: validation curves of every encoding on one chart,
//! and exact match by sentence length (1–2 clauses trained on, 3–4 not).

use std::path::{Path, PathBuf};

use crate::error::Result;
use posenc_kotoba::experiment::Experiment;
use posenc_kotoba::trainer::Translator;

use crate::chart::{colour, curves, save_png, Axes, Mark, Series};

/// `curves.png`.
pub const CURVES: &str = "curves.png";
/// `by_length.png`.
pub const BY_LENGTH: &str = "by_length.png";
/// `<label>/attention.png`: each trained model's attention maps for [`ATTENTION_SENTENCE`].
pub const ATTENTION: &str = posenc_train::rundir::ATTENTION_PLOT;
/// A sentence whose place phrase Kotoba moves to the front.
pub const ATTENTION_SENTENCE: &str = "the small cat sees the dog in the park";

/// Writes `curves.png`, `by_length.png` and every trained model's `<kind>/attention.png`
/// into `out`; returns their paths.
pub fn experiment(exp: &Experiment, out: &Path) -> Result<Vec<PathBuf>> {
    let mut written = results_figures(exp, out)?;
    for r in exp.results.iter().filter(|r| r.metrics.is_some()) {
        let Some(dir) = exp.config.run_dir(out, &r.label, r.seed) else {
            continue;
        };
        let translator = Translator::load(&dir)?;
        let maps = translator.attention(ATTENTION_SENTENCE)?;
        let path = dir.join(ATTENTION);
        let mut said = maps.target.clone();
        said.pop();
        crate::attention(
            &maps,
            &format!(
                "{}: \"{ATTENTION_SENTENCE}\" → \"{}\"",
                r.label,
                said.join(" ")
            ),
            &path,
        )?;
        written.push(path);
    }
    Ok(written)
}

/// Writes the figures drawn from the results alone, `curves.png` and `by_length.png`, into
/// `out` (no trained model needed); returns their paths.
///
/// # Errors
/// Results without a run (nothing to draw); `out` or a file in it that cannot be
/// written.
pub fn results_figures(exp: &Experiment, out: &Path) -> Result<Vec<PathBuf>> {
    crate::chart::begin_figures(out, exp.results.len(), "runs")?;
    // The curves of each label's first seed.
    let labels = exp.labels();
    let first: Vec<&posenc_kotoba::experiment::EncodingResult> = labels
        .iter()
        .filter_map(|l| exp.results.iter().find(|r| &r.label == l))
        .collect();
    let which_seed = match exp.config.seeds {
        1 => String::new(),
        _ => format!(" (seed {})", exp.config.base.seed),
    };
    let history = |f: fn(&posenc_kotoba::trainer::Record) -> f64| -> Vec<Series> {
        first
            .iter()
            .enumerate()
            .map(|(i, r)| Series {
                name: r.label.clone(),
                points: r.history.iter().map(|h| (h.step as f64, f(h))).collect(),
                mark: Mark::LineDots,
                colour: colour(i),
            })
            .collect()
    };
    let curves_path = out.join(CURVES);
    {
        save_png(&curves_path, (1400, 560), "", |root| {
            let panels = root.split_evenly((1, 2));
            curves(
                &panels[0],
                &Axes {
                    title: format!("validation loss{which_seed}"),
                    x_desc: "step",
                    y_desc: "label-smoothed cross-entropy",
                    square: false,
                    y_range: None,
                },
                &history(|h| h.valid_loss),
            )?;
            curves(
                &panels[1],
                &Axes {
                    title: format!("validation exact match (greedy){which_seed}"),
                    x_desc: "step",
                    y_desc: "fraction exactly right",
                    square: false,
                    y_range: None,
                },
                &history(|h| h.valid_exact),
            )?;
            Ok(())
        })?;
    }
    let length_path = out.join(BY_LENGTH);
    {
        save_png(&length_path, (900, 560), "", |root| {
            // Each label's mean over its seeds, at each number of clauses.
            let series: Vec<Series> = labels
                .iter()
                .enumerate()
                .map(|(i, label)| {
                    let points = (0..4)
                        .filter_map(|c| {
                            let xs: Vec<f64> = exp
                                .results
                                .iter()
                                .filter(|r| &r.label == label)
                                .filter_map(|r| *r.metrics.as_ref()?.exact_by_clauses.get(c)?)
                                .collect();
                            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
                            (!xs.is_empty()).then_some(((c + 1) as f64, mean))
                        })
                        .collect();
                    Series {
                        name: label.clone(),
                        points,
                        mark: Mark::LineDots,
                        colour: colour(i),
                    }
                })
                .collect();
            curves(
                root,
                &Axes {
                    title: match exp.config.seeds {
                        1 => "exact match by clauses (trained on 1–2)".into(),
                        n => {
                            format!("exact match by clauses (trained on 1–2; mean over {n} seeds)")
                        }
                    },
                    x_desc: "clauses in the sentence",
                    y_desc: "fraction exactly right",
                    square: false,
                    y_range: None,
                },
                &series,
            )?;
            Ok(())
        })?;
    }
    Ok(vec![curves_path, length_path])
}
