//! The figures of `posenc kotoba experiment`, drawn by `posenc-plot` from this task's
//! results: validation curves of every encoding on one chart,
//! and exact match by sentence length (1–2 clauses trained on, 3–4 not).

use std::path::{Path, PathBuf};

use candle_core::Device;
use posenc_plot::chart::{
    curves, figure_size, label_styles, save_curves, save_png, seeds_note, with_seeds, Axes, Mark,
    SeedPoint, Series,
};
use posenc_train::Result;

use crate::experiment::Experiment;
use crate::inspect::AttentionMaps;
use crate::task::Translator;

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
        let Some(dir) =
            posenc_train::experiment::run_dir(&exp.config.on(&Device::Cpu), out, &r.label, r.seed)
        else {
            continue;
        };
        let translator = Translator::load(&dir, &Device::Cpu)?;
        let maps = translator.attention(ATTENTION_SENTENCE)?;
        let path = dir.join(ATTENTION);
        let mut said = maps.target.clone();
        said.pop();
        let title = format!(
            "{}: \"{ATTENTION_SENTENCE}\" → \"{}\"",
            r.label,
            said.join(" ")
        );
        attention(&maps, &title, &path)?;
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
    drawn(posenc_plot::chart::begin_figures(
        out,
        exp.results.len(),
        "runs",
    ))?;
    // The curves of each label's first seed.
    let labels = exp.labels();
    let first: Vec<&crate::experiment::EncodingResult> = labels
        .iter()
        .filter_map(|l| exp.results.iter().find(|r| &r.label == l))
        .collect();
    let which_seed = match exp.config.seeds {
        1 => String::new(),
        _ => format!(" (seed {})", exp.config.base.run.seed),
    };
    let styles = label_styles(&first.iter().map(|r| r.label.as_str()).collect::<Vec<_>>());
    let history = |f: fn(&crate::task::Record) -> f64| -> Vec<Series> {
        first
            .iter()
            .zip(&styles)
            .map(|(r, style)| Series {
                name: r.label.clone(),
                points: r.history.iter().map(|h| (h.step as f64, f(h))).collect(),
                mark: Mark::LineDots,
                colour: style.colour,
                dash: style.dash,
            })
            .collect()
    };
    let curves_path = out.join(CURVES);
    {
        let (_, height) = figure_size((700, 560), &history(|h| h.valid_loss));
        drawn(save_png(&curves_path, (1400, height), "", |root| {
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
        }))?;
    }
    let length_path = out.join(BY_LENGTH);
    {
        // Each label's seeds at each number of clauses: their mean and spread.
        let styles = label_styles(&labels.iter().map(String::as_str).collect::<Vec<_>>());
        let series: Vec<Series> = labels
            .iter()
            .zip(styles)
            .flat_map(|(label, style)| {
                let points: Vec<SeedPoint> = (0..4)
                    .map(|c| {
                        let xs: Vec<f64> = exp
                            .results
                            .iter()
                            .filter(|r| &r.label == label)
                            .filter_map(|r| *r.metrics.as_ref()?.exact_by_clauses.get(c)?)
                            .collect();
                        ((c + 1) as f64, xs)
                    })
                    .collect();
                let seeds = points.iter().map(|(_, xs)| xs.len()).max().unwrap_or(0);
                Series::spread(with_seeds(label, seeds), style, &points, 1.0)
            })
            .collect();
        drawn(save_curves(
            &length_path,
            (900, 560),
            &Axes {
                title: match exp.config.seeds {
                    1 => "exact match by clauses (trained on 1–2)".into(),
                    n => format!(
                        "exact match by clauses (trained on 1–2; {})",
                        seeds_note(&n.to_string())
                    ),
                },
                x_desc: "clauses in the sentence",
                y_desc: "fraction exactly right",
                square: false,
                y_range: None,
            },
            &series,
        ))?;
    }
    Ok(vec![curves_path, length_path])
}

/// Draws `maps` into the PNG `path`: one row per layer (encoder layers, then decoder
/// cross-attention layers), one column per head. The cross-attention is where the
/// reordering shows: Kotoba puts the place phrase first, so its first words attend to the
/// end of the English sentence.
///
/// # Errors
/// A model with no encoder attention; a figure that cannot be written.
pub fn attention(maps: &AttentionMaps, title: &str, path: &Path) -> Result<()> {
    use posenc_plot::attention::Layer;
    let encoder = maps.encoder.iter().enumerate().map(|(l, w)| Layer {
        name: format!("encoder {}", l + 1),
        heads: w,
        queries: &maps.source,
        keys: &maps.source,
    });
    let cross = maps.cross.iter().enumerate().map(|(l, w)| Layer {
        name: format!("cross {}", l + 1),
        heads: w,
        queries: &maps.target,
        keys: &maps.source,
    });
    let layers: Vec<Layer> = encoder.chain(cross).collect();
    drawn(posenc_plot::attention(&layers, title, path))
}

/// A figure's error as this task's ([`posenc_train::Error::task`]).
fn drawn<T>(r: posenc_plot::Result<T>) -> Result<T> {
    r.map_err(posenc_train::Error::task)
}
