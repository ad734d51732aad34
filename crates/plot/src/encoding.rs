//! The documents' figures of one encoding.
//!
//! Encodings that add to the embeddings (and rotary, whose angles are drawn as the
//! sinusoidal table `[cos θ_0(p), sin θ_0(p), cos θ_1(p), …]` they rotate by) get six
//! panels: the table (position × dimension); the dot products `PE(p)·PE(q)`; the decay
//! of `PE(p)·PE(p+k)` over `k`; each sin/cos pair traced over positions (circles for
//! sinusoids); `PE(p+k)` against `M_k·PE(p)` for one pair and one `k`, with `M_k` the
//! least-squares 2×2 map; and how well such a linear map exists for every `k`. Encodings
//! that bias the attention scores get the bias (and T5's buckets) and its decay per head.

use std::path::Path;

use crate::error::Result;
use posenc::analysis::linear_fit;
use posenc::{Form, PositionalEncoding, Table};
use posenc_error::ensure;

use crate::chart::{colour, curves, heatmap, save_png, Axes, Heatmap, Mark, Series};

/// The positions-by-features matrix, and which columns form sin/cos pairs.
struct Features {
    rows: Vec<Vec<f32>>,
    pairs: Vec<(usize, usize)>,
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

impl Features {
    /// Pair `i` over positions `from..to`, as points.
    fn pair(&self, i: usize, from: usize, to: usize) -> Vec<(f64, f64)> {
        let (a, b) = self.pairs[i];
        self.rows[from..to]
            .iter()
            .map(|r| (f64::from(r[a]), f64::from(r[b])))
            .collect()
    }

    /// The best linear map of pair `i` at `p` onto the pair at `p + k` ([`linear_fit`]):
    /// the mapped points and the fit's relative residual.
    fn shift_fit(&self, i: usize, k: usize) -> (Vec<(f64, f64)>, f64) {
        let n = self.rows.len();
        let rows = |points: Vec<(f64, f64)>| -> Vec<Vec<f64>> {
            points.into_iter().map(|(a, b)| vec![a, b]).collect()
        };
        let fit = linear_fit(&rows(self.pair(i, 0, n - k)), &rows(self.pair(i, k, n)));
        let mapped = fit.fitted.iter().map(|r| (r[0], r[1])).collect();
        (mapped, fit.residual)
    }

    /// Over every pair: the largest residual of the best linear map from `PE(p)` to `PE(p+k)`.
    fn shift_residual(&self, k: usize) -> f64 {
        (0..self.pairs.len())
            .map(|i| self.shift_fit(i, k).1)
            .fold(0.0, f64::max)
    }
}

fn features(form: &Form) -> Result<Option<Features>> {
    // Encodings without sin/cos pairs are drawn by adjacent columns, to show they do not turn.
    let adjacent = |d: usize| (0..d / 2).map(|i| (2 * i, 2 * i + 1)).collect();
    let (rows, pairs) = match form {
        Form::Additive { values, pairs } => {
            let rows: Vec<Vec<f32>> = values.to_vec2()?;
            let d = rows.first().map_or(0, Vec::len);
            let pairs = if pairs.is_empty() {
                adjacent(d)
            } else {
                pairs.clone()
            };
            (rows, pairs)
        }
        Form::Rotary { cos, sin } => {
            let (cos, sin): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (cos.to_vec2()?, sin.to_vec2()?);
            let rows: Vec<Vec<f32>> = cos
                .iter()
                .zip(&sin)
                .map(|(c, s)| c.iter().zip(s).flat_map(|(&c, &s)| [c, s]).collect())
                .collect();
            let d = rows.first().map_or(0, Vec::len);
            (rows, adjacent(d))
        }
        Form::Bias { .. } => return Ok(None),
    };
    Ok(Some(Features { rows, pairs }))
}

/// Draws the figure of the encoding `pe`, built at width `d_model`, over positions `0..len`
/// into the PNG `path`. Its weights, if it has any, are drawn as they are: seed them first
/// for a figure that draws the same every time (`posenc plot encoding` does).
pub fn encoding(
    pe: &dyn PositionalEncoding,
    d_model: usize,
    len: usize,
    path: &Path,
) -> Result<()> {
    ensure!(
        len >= 4,
        "--len must be at least 4 to show shifts, got {len}"
    );
    posenc::limits::check_table_len(len)?;
    let kind = pe.kind();
    let table = pe.table(len)?;
    match features(&table.form)? {
        Some(f) => additive(&f, kind, &table.title, d_model, path),
        None => bias(table, kind, path),
    }
}

fn additive(f: &Features, kind: &str, title: &str, d: usize, path: &Path) -> Result<()> {
    let len = f.rows.len();
    save_png(
        path,
        (1500, 960),
        &match f.rows.first().map_or(d, Vec::len) {
            // A rotation acts on one head's dimensions, the same in every head.
            w if w != d => {
                format!("{kind}: one head of {w} dimensions (d_model {d}), positions 0..{len}")
            }
            _ => format!("{kind}: d_model {d}, positions 0..{len}"),
        },
        |root| {
            let panels = root.split_evenly((2, 3));
            heatmap(
                &panels[0],
                &Heatmap {
                    values: &f.rows,
                    title: title.into(),
                    x_desc: "dimension i",
                    y_desc: "position",
                    x_ticks: None,
                    y_ticks: None,
                    diverging: true,
                    range: None,
                    colour_bar: true,
                    cell_text: None,
                },
            )?;
            let gram: Vec<Vec<f32>> = f
                .rows
                .iter()
                .map(|a| f.rows.iter().map(|b| dot(a, b) as f32).collect())
                .collect();
            heatmap(
                &panels[1],
                &Heatmap {
                    values: &gram,
                    title: "PE(p) · PE(q)".into(),
                    x_desc: "q",
                    y_desc: "p",
                    x_ticks: None,
                    y_ticks: None,
                    diverging: false,
                    range: None,
                    colour_bar: true,
                    cell_text: None,
                },
            )?;
            let decay: Vec<Series> = [0, len / 2]
                .iter()
                .enumerate()
                .map(|(c, &p)| Series {
                    name: format!("p = {p}"),
                    points: (0..len - p)
                        .map(|k| (k as f64, dot(&f.rows[p], &f.rows[p + k])))
                        .collect(),
                    mark: if c == 0 { Mark::Line } else { Mark::Dots },
                    colour: colour(c),
                    dash: crate::chart::Dash::Solid,
                })
                .collect();
            curves(
                &panels[2],
                &Axes {
                    title: "PE(p) · PE(p+k)".into(),
                    x_desc: "k",
                    y_desc: "dot product",
                    square: false,
                    y_range: None,
                },
                &decay,
            )?;
            let n = f.pairs.len();
            let mut chosen = vec![0, n / 8, n / 4, n / 2, n.saturating_sub(1)];
            chosen.dedup();
            chosen.retain(|&i| i < n);
            let circles: Vec<Series> = chosen
                .iter()
                .enumerate()
                .map(|(c, &i)| Series {
                    name: format!("dims {}, {}", f.pairs[i].0, f.pairs[i].1),
                    points: f.pair(i, 0, len),
                    mark: Mark::LineDots,
                    colour: colour(c),
                    dash: crate::chart::Dash::Solid,
                })
                .collect();
            curves(
                &panels[3],
                &Axes {
                    title: "pairs of dimensions over positions".into(),
                    x_desc: "first of the pair",
                    y_desc: "second of the pair",
                    square: true,
                    y_range: None,
                },
                &circles,
            )?;
            let k = (len / 8).max(1);
            let i = chosen.get(1).copied().unwrap_or(0).min(n.saturating_sub(1));
            if n > 0 {
                let (x, y) = (f.pair(i, 0, len - k), f.pair(i, k, len));
                let (mapped, residual) = f.shift_fit(i, k);
                let shift = [
                    Series {
                        name: "PE(p)".into(),
                        points: x,
                        mark: Mark::Dots,
                        colour: colour(7),
                        dash: crate::chart::Dash::Solid,
                    },
                    Series {
                        name: format!("PE(p+{k})"),
                        points: y,
                        mark: Mark::Rings,
                        colour: colour(3),
                        dash: crate::chart::Dash::Solid,
                    },
                    Series {
                        name: format!("M_{k} · PE(p)"),
                        points: mapped,
                        mark: Mark::Crosses,
                        colour: colour(10),
                        dash: crate::chart::Dash::Solid,
                    },
                ];
                curves(
                    &panels[4],
                    &Axes {
                        title: format!(
                            "dims {}, {}: residual {residual:.1e}",
                            f.pairs[i].0, f.pairs[i].1
                        ),
                        x_desc: "first of the pair",
                        y_desc: "second of the pair",
                        square: true,
                        y_range: None,
                    },
                    &shift,
                )?;
            }
            let residual: Vec<(f64, f64)> = (1..len / 2)
                .map(|k| (k as f64, f.shift_residual(k).max(1e-12).log10()))
                .collect();
            curves(
                &panels[5],
                &Axes {
                    title: "is PE(p+k) a linear map of PE(p)?".into(),
                    x_desc: "k",
                    y_desc: "log10 residual of M_k (worst pair)",
                    square: false,
                    y_range: Some((-8.0, 1.0)),
                },
                &[Series {
                    name: String::new(),
                    points: residual,
                    mark: Mark::LineDots,
                    colour: colour(0),
                    dash: crate::chart::Dash::Solid,
                }],
            )?;
            Ok(())
        },
    )?;
    Ok(())
}

fn bias(table: Table, kind: &str, path: &Path) -> Result<()> {
    let Form::Bias { bias, index } = table.form else {
        unreachable!("vectors are drawn by `additive`")
    };
    let bias: Vec<Vec<Vec<f32>>> = bias.to_vec3()?;
    let first = match index {
        Some(index) => {
            let values: Vec<Vec<u32>> = index.values.to_vec2()?;
            let values = values
                .iter()
                .map(|r| r.iter().map(|&x| x as f32).collect())
                .collect();
            (format!("{} of (query, key)", index.name), values)
        }
        None => (format!("{}, head 0", table.title), bias[0].clone()),
    };
    let heads = bias.len();
    let len = first.1.len();
    save_png(
        path,
        (1500, 500),
        &format!(
            "{kind}: {heads} head{}, positions 0..{len}",
            if heads == 1 { "" } else { "s" }
        ),
        |root| {
            let panels = root.split_evenly((1, 3));
            heatmap(
                &panels[0],
                &Heatmap {
                    values: &first.1,
                    title: first.0,
                    x_desc: "key position",
                    y_desc: "query position",
                    x_ticks: None,
                    y_ticks: None,
                    diverging: false,
                    range: None,
                    colour_bar: true,
                    cell_text: None,
                },
            )?;
            heatmap(
                &panels[1],
                &Heatmap {
                    values: &bias[heads - 1],
                    title: format!("attention bias, head {}", heads - 1),
                    x_desc: "key position",
                    y_desc: "query position",
                    x_ticks: None,
                    y_ticks: None,
                    diverging: true,
                    range: None,
                    colour_bar: true,
                    cell_text: None,
                },
            )?;
            let q = len / 2;
            let lines: Vec<Series> = bias
                .iter()
                .enumerate()
                .map(|(h, b)| Series {
                    name: if heads <= 12 {
                        format!("head {h}")
                    } else {
                        String::new()
                    },
                    points: (0..len)
                        .map(|k| (k as f64 - q as f64, f64::from(b[q][k])))
                        .collect(),
                    mark: Mark::Line,
                    colour: colour(h),
                    dash: crate::chart::Dash::Solid,
                })
                .collect();
            curves(
                &panels[2],
                &Axes {
                    title: format!("bias seen from query {q}"),
                    x_desc: "key − query",
                    y_desc: "bias",
                    square: false,
                    y_range: None,
                },
                &lines,
            )?;
            Ok(())
        },
    )?;
    Ok(())
}
