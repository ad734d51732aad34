//! The two kinds of panel every figure is made of: a heatmap and a set of curves.

use anyhow::{anyhow, Result};
use image::ImageEncoder;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

/// One panel of a figure.
pub type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

const FONT: &str = "sans-serif";

/// Makes the shipped font the one plotters draws text with (once per process).
fn register_font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = REGISTERED.get_or_init(|| {
        plotters::style::register_font(
            FONT,
            FontStyle::Normal,
            include_bytes!("../assets/DejaVuSans.ttf"),
        )
        .is_ok()
    });
    ok.then_some(())
        .ok_or_else(|| anyhow!("the shipped font DejaVuSans.ttf could not be read"))
}

/// The most pixels a figure may have (a 10 000 × 10 000 image).
pub const MAX_PIXELS: u64 = 100_000_000;

/// Draws a white `size` canvas with `title` on top (`draw` gets the area below it) and
/// writes it as a PNG to `path`, atomically: a failed or interrupted write leaves no
/// truncated file. Errors name the path.
pub fn save_png(
    path: &std::path::Path,
    size: (u32, u32),
    title: &str,
    draw: impl FnOnce(&Area) -> Result<()>,
) -> Result<()> {
    use anyhow::Context;
    let pixels = u64::from(size.0) * u64::from(size.1);
    anyhow::ensure!(
        pixels <= MAX_PIXELS,
        "the figure for {} would be {} × {} pixels, more than the {MAX_PIXELS} allowed",
        path.display(),
        size.0,
        size.1
    );
    register_font()?;
    let mut rgb = vec![0u8; pixels as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        if title.is_empty() {
            draw(&root)?;
        } else {
            draw(&root.titled(title, (FONT, 20)).map_err(err)?)?;
        }
        root.present().map_err(err)?;
    }
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&rgb, size.0, size.1, image::ColorType::Rgb8)
        .with_context(|| format!("encoding {}", path.display()))?;
    posenc_transformer::checkpoint::write_atomic(path, &png).context("writing the figure")
}

/// A plotters error as an anyhow error (plotters' own errors borrow the backend's).
pub fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing failed: {e:?}")
}

/// Blue (negative) through white (0) to red (positive), symmetric around 0.
fn diverging(v: f32, limit: f32) -> RGBColor {
    let t = (v / limit.max(1e-12)).clamp(-1.0, 1.0);
    let (end, t) = if t < 0.0 {
        ((59.0, 76.0, 192.0), -t)
    } else {
        ((180.0, 4.0, 38.0), t)
    };
    let mix = |e: f32| (255.0 + (e - 255.0) * t).round() as u8;
    RGBColor(mix(end.0), mix(end.1), mix(end.2))
}

/// A matrix drawn as coloured cells, row 0 at the top.
pub struct Heatmap<'a> {
    /// `values[row][column]`.
    pub values: &'a [Vec<f32>],
    /// Panel title.
    pub title: String,
    /// What the columns are.
    pub x_desc: &'a str,
    /// What the rows are.
    pub y_desc: &'a str,
    /// Column labels (tokens); numbers when `None`.
    pub x_ticks: Option<&'a [String]>,
    /// Row labels (tokens); numbers when `None`.
    pub y_ticks: Option<&'a [String]>,
    /// Diverging colours around 0 (signed values) instead of viridis from min to max.
    pub diverging: bool,
    /// The values viridis spans, instead of the data's min and max (an accuracy's 0 to 1).
    pub range: Option<(f32, f32)>,
}

/// A round step (1, 2, 5, 10, 20, 50, …) giving at most about 8 labels over `n` values.
fn round_step(n: i32) -> i32 {
    let mut scale = 1;
    loop {
        for m in [1, 2, 5] {
            if n / (m * scale) <= 8 {
                return m * scale;
            }
        }
        scale *= 10;
    }
}

/// Draws `h` into `area`.
pub fn heatmap(area: &Area, h: &Heatmap) -> Result<()> {
    let rows = h.values.len() as i32;
    let cols = h.values.first().map_or(0, Vec::len) as i32;
    let all = h.values.iter().flatten().copied().filter(|v| v.is_finite());
    let (lo, hi) = all.fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let (lo, hi) = match h.range {
        Some(range) => range,
        None if lo <= hi => (lo, hi),
        None => (0.0, 0.0),
    };
    let limit = lo.abs().max(hi.abs());
    let colour = |v: f32| -> RGBColor {
        if !v.is_finite() {
            // No value (a cell not measured): light grey.
            RGBColor(225, 225, 225)
        } else if h.diverging {
            diverging(v, limit)
        } else if hi > lo {
            ViridisRGB.get_color_normalized(v, lo, hi)
        } else {
            ViridisRGB.get_color(0.0)
        }
    };
    let title = if h.diverging {
        format!("{}  [±{limit:.2}]", h.title)
    } else {
        format!("{}  [{lo:.2}, {hi:.2}]", h.title)
    };
    // Words stand on end so they do not overlap; numbers read across.
    let numeric = h
        .x_ticks
        .is_some_and(|t| t.iter().all(|l| l.parse::<f64>().is_ok()));
    // Every cell is a label candidate; numbered axes show round positions from 0 on.
    let label = |ticks: Option<&[String]>, v: &SegmentValue<i32>, flip: bool| match v {
        SegmentValue::CenterOf(i) => {
            let n = if flip { rows } else { cols };
            let i = if flip { rows - 1 - i } else { *i };
            match ticks {
                Some(t) => t.get(i as usize).cloned().unwrap_or_default(),
                None if i % round_step(n) == 0 => i.to_string(),
                None => String::new(),
            }
        }
        _ => String::new(),
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 15))
        .margin(6)
        .x_label_area_size(if h.x_ticks.is_some() && !numeric {
            60
        } else {
            30
        })
        .y_label_area_size(if h.y_ticks.is_some() { 70 } else { 40 })
        // A segmented `0..n - 1` has one segment per value, `n` in all.
        .build_cartesian_2d(
            (0..(cols - 1).max(0)).into_segmented(),
            (0..(rows - 1).max(0)).into_segmented(),
        )
        .map_err(err)?;
    let x_style = if h.x_ticks.is_some() && !numeric {
        TextStyle::from((FONT, 12).into_font()).transform(FontTransform::Rotate90)
    } else {
        TextStyle::from((FONT, 12).into_font())
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(h.x_desc)
        .y_desc(h.y_desc)
        .x_labels(cols as usize)
        .y_labels(rows as usize)
        .x_label_style(x_style)
        .y_label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .x_label_formatter(&|v| label(h.x_ticks, v, false))
        .y_label_formatter(&|v| label(h.y_ticks, v, true))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(h.values.iter().enumerate().flat_map(|(r, row)| {
            let y = rows - 1 - r as i32;
            row.iter().enumerate().map(move |(c, &v)| {
                let c = c as i32;
                Rectangle::new(
                    [
                        (SegmentValue::Exact(c), SegmentValue::Exact(y)),
                        (SegmentValue::Exact(c + 1), SegmentValue::Exact(y + 1)),
                    ],
                    colour(v).filled(),
                )
            })
        }))
        .map_err(err)?;
    Ok(())
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A line through the points.
    Line,
    /// A line with a dot on each point.
    LineDots,
    /// Filled dots only.
    Dots,
    /// Hollow circles only.
    Rings,
    /// Crosses only.
    Crosses,
}

/// One named series of a [`curves`] panel.
pub struct Series {
    /// Legend entry (empty: none).
    pub name: String,
    /// `(x, y)` points.
    pub points: Vec<(f64, f64)>,
    /// How to draw it.
    pub mark: Mark,
    /// Its colour.
    pub colour: RGBColor,
}

/// Series colours that stay apart for up to a dozen encodings.
pub fn colour(i: usize) -> RGBColor {
    const TABLEAU: [RGBColor; 12] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 0),
        RGBColor(255, 215, 0),
    ];
    TABLEAU[i % TABLEAU.len()]
}

/// Axes of a [`curves`] panel.
pub struct Axes<'a> {
    /// Panel title.
    pub title: String,
    /// x axis.
    pub x_desc: &'a str,
    /// y axis.
    pub y_desc: &'a str,
    /// Same scale on both axes (circles look round).
    pub square: bool,
    /// A fixed y range instead of the data's.
    pub y_range: Option<(f64, f64)>,
}

/// Draws series of points into `area`, with a legend if any series is named.
pub fn curves(area: &Area, axes: &Axes, series: &[Series]) -> Result<()> {
    let points = series
        .iter()
        .flat_map(|s| &s.points)
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = points.fold(
        (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ),
        |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
    );
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if let Some((lo, hi)) = axes.y_range {
        (y0, y1) = (lo, hi);
    }
    if axes.square {
        let r = (x1 - x0).max(y1 - y0) / 2.0;
        let (cx, cy) = ((x0 + x1) / 2.0, (y0 + y1) / 2.0);
        (x0, x1, y0, y1) = (cx - r, cx + r, cy - r, cy + r);
    }
    let pad = |a: f64, b: f64| {
        // A single value (a constant pair) gets a unit range around it, not a 1e-6 one.
        let p = if b - a > 1e-9 { (b - a) * 0.05 } else { 1.0 };
        (a - p)..(b + p)
    };
    let (xr, yr) = (pad(x0, x1), pad(y0, y1));
    let (xr, yr) = ((xr.start, xr.end), (yr.start, yr.end));
    let mut chart = ChartBuilder::on(area)
        .caption(&axes.title, (FONT, 15))
        .margin(8)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(pad(x0, x1), pad(y0, y1))
        .map_err(err)?;
    // Steps, positions and offsets are whole numbers: label them so (10, not 10.0).
    let whole_x = series
        .iter()
        .flat_map(|s| &s.points)
        .all(|(x, _)| x.fract() == 0.0);
    let whole = |v: &f64| {
        if (v - v.round()).abs() < 1e-9 {
            format!("{}", v.round() as i64)
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0))
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13));
    if whole_x {
        mesh.x_label_formatter(&whole);
    }
    mesh.draw().map_err(err)?;
    for s in series {
        let c = s.colour;
        let finite: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let drawn = match s.mark {
            Mark::Line | Mark::LineDots => {
                if s.mark == Mark::LineDots {
                    chart
                        .draw_series(finite.iter().map(|&p| Circle::new(p, 3, c.filled())))
                        .map_err(err)?;
                }
                chart
                    .draw_series(LineSeries::new(finite, c.stroke_width(2)))
                    .map_err(err)?
            }
            Mark::Dots => chart
                .draw_series(finite.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(err)?,
            Mark::Rings => chart
                .draw_series(finite.iter().map(|&p| Circle::new(p, 5, c.stroke_width(1))))
                .map_err(err)?,
            Mark::Crosses => chart
                .draw_series(finite.iter().map(|&p| Cross::new(p, 4, c.stroke_width(1))))
                .map_err(err)?,
        };
        if !s.name.is_empty() {
            drawn.label(s.name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(3))
            });
        }
    }
    if series.iter().any(|s| !s.name.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font((FONT, 12))
            .position(legend_corner(area, series, xr, yr))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// The corner of the plot whose legend box covers the fewest points of `series` (each line
/// sampled along its segments too), upper right first among equals.
fn legend_corner(
    area: &Area,
    series: &[Series],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> SeriesLabelPosition {
    let (w, h) = area.dim_in_pixel();
    let named: Vec<&Series> = series.iter().filter(|s| !s.name.is_empty()).collect();
    let chars = named
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    // The legend's size as a share of the plot (labels and margins as plotters draws them).
    let lw = (36.0 + 7.0 * chars as f64) / (f64::from(w) - 80.0).max(1.0);
    let lh = (12.0 + 18.0 * named.len() as f64) / (f64::from(h) - 80.0).max(1.0);
    let (sx, sy) = ((x1 - x0).max(1e-12), (y1 - y0).max(1e-12));
    let mut points = Vec::new();
    for s in series {
        let p: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| ((x - x0) / sx, (y - y0) / sy))
            .collect();
        points.extend(&p);
        if matches!(s.mark, Mark::Line | Mark::LineDots) {
            for pair in p.windows(2) {
                points.extend((1..20).map(|k| {
                    let t = f64::from(k) / 20.0;
                    (
                        pair[0].0 + t * (pair[1].0 - pair[0].0),
                        pair[0].1 + t * (pair[1].1 - pair[0].1),
                    )
                }));
            }
        }
    }
    let covered = |left: bool, top: bool| {
        let (xa, xb) = if left { (0.0, lw) } else { (1.0 - lw, 1.0) };
        let (ya, yb) = if top { (1.0 - lh, 1.0) } else { (0.0, lh) };
        points
            .iter()
            .filter(|(x, y)| (xa..=xb).contains(x) && (ya..=yb).contains(y))
            .count()
    };
    [
        (SeriesLabelPosition::UpperRight, false, true),
        (SeriesLabelPosition::UpperLeft, true, true),
        (SeriesLabelPosition::LowerRight, false, false),
        (SeriesLabelPosition::LowerLeft, true, false),
    ]
    .into_iter()
    .min_by_key(|&(_, left, top)| covered(left, top))
    .map_or(SeriesLabelPosition::UpperRight, |(corner, _, _)| corner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The legend goes to the corner no point or line of the data passes through.
    #[test]
    fn the_legend_takes_a_corner_free_of_data() {
        let mut rgb = vec![0u8; 900 * 560 * 3];
        let root = BitMapBackend::with_buffer(&mut rgb, (900, 560)).into_drawing_area();
        let line = |points: Vec<(f64, f64)>| Series {
            name: "a long series name".into(),
            points,
            mark: Mark::Line,
            colour: colour(0),
        };
        let corner = |s: &[Series]| {
            let c = legend_corner(&root, s, (0.0, 1.0), (0.0, 1.0));
            format!("{c:?}")
        };
        // Rising to the upper right: the upper left is free.
        assert_eq!(
            corner(&[line(vec![(0.0, 0.0), (1.0, 1.0)])]),
            format!("{:?}", SeriesLabelPosition::UpperLeft)
        );
        // Along the top and down the left: the lower right is free.
        let top = line(vec![(0.0, 0.0), (0.0, 1.0), (1.0, 1.0)]);
        assert_eq!(
            corner(&[top]),
            format!("{:?}", SeriesLabelPosition::LowerRight)
        );
        // Nothing near the upper right: it stays there.
        assert_eq!(
            corner(&[line(vec![(0.0, 0.0), (1.0, 0.2)])]),
            format!("{:?}", SeriesLabelPosition::UpperRight)
        );
    }

    #[test]
    fn label_steps_are_round() {
        let steps: Vec<i32> = [5, 9, 16, 20, 64, 100, 4096].map(round_step).to_vec();
        assert_eq!(steps, [1, 2, 2, 5, 10, 20, 500]);
    }
}
