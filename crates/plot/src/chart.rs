//! The two kinds of panel every figure is made of: a heatmap and a set of curves.

use crate::error::Result;
use image::ImageEncoder;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use posenc_error::invalid;

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
    Ok(ok
        .then_some(())
        .ok_or_else(|| invalid!("the shipped font DejaVuSans.ttf could not be read"))?)
}

/// The most pixels a figure may have (a 10 000 × 10 000 image).
pub const MAX_PIXELS: u64 = 100_000_000;

/// Checks that results hold something to draw, `count` of `what`, then creates the
/// directory `out` for their figures. Results with nothing (a file emptied by hand, or
/// saved before its first run) are refused before anything is written: an empty chart
/// would look like a result.
///
/// # Errors
/// `count` is 0; `out` cannot be created.
pub fn begin_figures(out: &std::path::Path, count: usize, what: &str) -> Result<()> {
    use posenc_error::Context;
    posenc_error::ensure!(
        count > 0,
        "the results hold no {what}: there is nothing to plot"
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    Ok(())
}

/// Draws a white `size` canvas with `title` on top (`draw` gets the area below it) and
/// writes it as a PNG to `path`, atomically: a failed or interrupted write leaves no
/// truncated file. Errors name the path.
pub fn save_png(
    path: &std::path::Path,
    size: (u32, u32),
    title: &str,
    draw: impl FnOnce(&Area) -> Result<()>,
) -> Result<()> {
    use posenc_error::Context;
    let pixels = u64::from(size.0) * u64::from(size.1);
    posenc_error::ensure!(
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
            let size = fitting_font(&root, title, 20.0);
            draw(&root.titled(title, (FONT, size)).map_err(err)?)?;
        }
        root.present().map_err(err)?;
    }
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&rgb, size.0, size.1, image::ColorType::Rgb8)
        .with_context(|| format!("encoding {}", path.display()))?;
    Ok(posenc_io::write_atomic(path, &png).context("writing the figure")?)
}

/// The font size, at most `size` and at least 9, at which `text` fits across `area` with
/// a few pixels to spare on each side: a long title is set smaller rather than cut off at
/// the figure's edges.
fn fitting_font(area: &Area, text: &str, size: f64) -> f64 {
    let room = f64::from(area.dim_in_pixel().0.saturating_sub(16));
    let mut size = size;
    while size > 9.0 {
        match area.estimate_text_size(text, &(FONT, size).into_text_style(area)) {
            Ok((w, _)) if f64::from(w) > room => size -= 0.5,
            _ => break,
        }
    }
    size
}

/// A plotters error as this crate's (plotters' own errors borrow the backend's).
pub fn err<E: std::fmt::Debug>(e: E) -> crate::Error {
    crate::Error::Draw(format!("{e:?}"))
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
    /// A colour bar beside the cells, with its values (else the range is in the title).
    pub colour_bar: bool,
    /// Text in each cell, `cell_text[row][column]`: how many stand behind a share, say.
    pub cell_text: Option<&'a [Vec<String>]>,
}

/// The width in pixels of a heatmap's colour bar and its labels.
pub const BAR_WIDTH: u32 = 70;

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
    let title = match (h.colour_bar, h.diverging) {
        (true, _) => h.title.clone(),
        (false, true) => format!("{}  [±{limit:.2}]", h.title),
        (false, false) => format!("{}  [{lo:.2}, {hi:.2}]", h.title),
    };
    let (w, _) = area.dim_in_pixel();
    let (cells_area, bar) = match h.colour_bar {
        true => {
            let (cells, bar) = area.split_horizontally(w.saturating_sub(BAR_WIDTH));
            (cells, Some(bar))
        }
        false => (area.clone(), None),
    };
    let area = &cells_area;
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
    let size = fitting_font(area, &title, 15.0);
    let mut chart = ChartBuilder::on(area)
        .caption(&title, (FONT, size))
        .margin(6)
        .x_label_area_size(if h.x_ticks.is_some() && !numeric {
            60
        } else {
            30
        })
        // Room for the row labels: 70 pixels, wider only for labels that would not fit
        // (RULER's task names), so every figure whose labels fit is drawn as before.
        .y_label_area_size(match h.y_ticks {
            Some(ticks) => {
                let longest = ticks.iter().map(|t| t.chars().count()).max().unwrap_or(0);
                70.max(7 * longest as u32 + 14)
            }
            None => 40,
        })
        // A segmented `0..n - 1` has one segment per value, `n` in all.
        .build_cartesian_2d(
            (0..(cols - 1).max(0)).into_segmented(),
            (0..(rows - 1).max(0)).into_segmented(),
        )
        .map_err(err)?;
    let rotated = h.x_ticks.is_some() && !numeric;
    let x_style = if rotated {
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
        // Words set on end are drawn below, hanging from the axis: plotters centres a
        // rotated label on its place, which put the first letters of any word longer than
        // a few under the cells.
        .x_label_formatter(&|v| match rotated {
            true => String::new(),
            false => label(h.x_ticks, v, false),
        })
        .y_label_formatter(&|v| label(h.y_ticks, v, true))
        .draw()
        .map_err(err)?;
    // A cell's far edge: the next value's, or the axis's end where there is one value (a
    // range of one value has no next to map).
    let far = |i: i32, n: i32| match n {
        1 => SegmentValue::Last,
        _ => SegmentValue::Exact(i + 1),
    };
    chart
        .draw_series(h.values.iter().enumerate().flat_map(|(r, row)| {
            let y = rows - 1 - r as i32;
            row.iter().enumerate().map(move |(c, &v)| {
                let c = c as i32;
                Rectangle::new(
                    [
                        (SegmentValue::Exact(c), SegmentValue::Exact(y)),
                        (far(c, cols), far(y, rows)),
                    ],
                    colour(v).filled(),
                )
            })
        }))
        .map_err(err)?;
    if let Some(text) = h.cell_text {
        let font = (FONT, 12).into_font();
        let centred = plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Center,
        );
        for (r, (row, values)) in text.iter().zip(h.values).enumerate() {
            let y = rows - 1 - r as i32;
            for (c, (label, &v)) in row.iter().zip(values).enumerate() {
                // Dark text on light cells, light text on dark ones.
                let RGBColor(red, green, blue) = colour(v);
                let light =
                    0.299 * f64::from(red) + 0.587 * f64::from(green) + 0.114 * f64::from(blue);
                let ink = if light > 140.0 { BLACK } else { WHITE };
                chart
                    .draw_series(std::iter::once(Text::new(
                        label.clone(),
                        (SegmentValue::CenterOf(c as i32), SegmentValue::CenterOf(y)),
                        font.color(&ink).pos(centred),
                    )))
                    .map_err(err)?;
            }
        }
    }
    if let (true, Some(ticks)) = (rotated, h.x_ticks) {
        let (_, ys) = chart.plotting_area().get_pixel_range();
        let base = area.get_base_pixel();
        let style = TextStyle::from((FONT, 12).into_font())
            .transform(FontTransform::Rotate90)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Left,
                plotters::style::text_anchor::VPos::Center,
            ));
        for (c, tick) in ticks.iter().enumerate() {
            let (x, _) =
                chart.backend_coord(&(SegmentValue::CenterOf(c as i32), SegmentValue::Exact(0)));
            area.draw(&Text::new(
                tick.clone(),
                (x - base.0, ys.end - base.1 + 8),
                style.clone(),
            ))
            .map_err(err)?;
        }
    }
    if let Some(bar) = bar {
        let (_, ys) = chart.plotting_area().get_pixel_range();
        let base = bar.get_base_pixel().1;
        let (top, bottom) = (ys.start - base, ys.end - base);
        let (from, to) = if h.diverging {
            (-limit, limit)
        } else {
            (lo, hi)
        };
        let span = (bottom - top).max(1);
        for py in top..bottom {
            let t = 1.0 - (py - top) as f32 / span as f32;
            bar.draw(&Rectangle::new(
                [(10, py), (26, py + 1)],
                colour(from + t * (to - from)).filled(),
            ))
            .map_err(err)?;
        }
        bar.draw(&Rectangle::new([(10, top), (26, bottom)], BLACK.mix(0.4)))
            .map_err(err)?;
        let style = (FONT, 11).into_font().color(&BLACK);
        for (value, y) in [
            (to, top),
            ((from + to) / 2.0, (top + bottom) / 2),
            (from, bottom - 10),
        ] {
            bar.draw(&Text::new(
                tidy_label(f64::from(value), f64::from(to - from)),
                (30, y),
                style.clone(),
            ))
            .map_err(err)?;
        }
    }
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
    /// A translucent filled polygon through the points in order (a band: the lower edge
    /// left to right, then the upper edge right to left).
    Area,
}

/// One named series of a [`curves`] panel.
#[derive(Debug, Clone)]
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

/// A point of [`Series::spread`]: `x` and each seed's value there.
pub type SeedPoint = (f64, Vec<f64>);

impl Series {
    /// A mean over seeds, drawn as a line with dots, and the seeds' spread around it: a
    /// band from the lowest seed to the highest (none where every point has one value);
    /// or, where the seeds at some `x` lie further apart than half of `span` (the extent
    /// of the y axis), each seed's value as a ring of its own, since a band that wide
    /// would hide that no seed is near the mean. Points without values are left out.
    pub fn spread(name: String, colour: RGBColor, points: &[SeedPoint], span: f64) -> Vec<Series> {
        let points: Vec<(f64, f64, f64, f64, &[f64])> = points
            .iter()
            .filter(|(_, ys)| !ys.is_empty())
            .map(|(x, ys)| {
                let mean = ys.iter().sum::<f64>() / ys.len() as f64;
                let lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (*x, mean, lo, hi, ys.as_slice())
            })
            .collect();
        let line = Series {
            name,
            points: points.iter().map(|&(x, mean, ..)| (x, mean)).collect(),
            mark: Mark::LineDots,
            colour,
        };
        if points.iter().all(|&(_, _, lo, hi, _)| lo == hi) {
            return vec![line];
        }
        if points.iter().any(|&(_, _, lo, hi, _)| hi - lo > span / 2.0) {
            let seeds = Series {
                name: String::new(),
                points: points
                    .iter()
                    .flat_map(|&(x, _, _, _, ys)| ys.iter().map(move |&y| (x, y)))
                    .collect(),
                mark: Mark::Rings,
                colour,
            };
            return vec![seeds, line];
        }
        let band = points
            .iter()
            .map(|&(x, _, lo, _, _)| (x, lo))
            .chain(points.iter().rev().map(|&(x, _, _, hi, _)| (x, hi)))
            .collect();
        let band = Series {
            name: String::new(),
            points: band,
            mark: Mark::Area,
            colour,
        };
        vec![band, line]
    }
}

/// What a figure of [`Series::spread`] curves over `seeds` seeds (a count, or a range of
/// counts) shows, for its title.
pub fn seeds_note(seeds: &str) -> String {
    format!(
        "mean over {seeds} seeds; shaded, their range; rings, each seed where they lie far apart"
    )
}

/// A legend entry: the label, with its number of seeds when there are several (so a band
/// over six seeds beside bands over three says so).
pub fn with_seeds(label: &str, seeds: usize) -> String {
    match seeds {
        0 | 1 => label.to_string(),
        n => format!("{label} ({n} seeds)"),
    }
}

/// Series colours that stay apart for up to sixteen encodings (Tableau's ten, then black,
/// gold and four dark ones), repeating after that.
pub fn colour(i: usize) -> RGBColor {
    const TABLEAU: [RGBColor; 16] = [
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
        RGBColor(0, 0, 139),
        RGBColor(139, 0, 139),
        RGBColor(0, 100, 0),
        RGBColor(250, 128, 114),
    ];
    TABLEAU[i % TABLEAU.len()]
}

/// Colours for labels that are not a registered kind: twelve beyond [`colour`]'s sixteen.
const MORE: [RGBColor; 12] = [
    RGBColor(102, 166, 30),
    RGBColor(230, 171, 2),
    RGBColor(166, 118, 29),
    RGBColor(0, 128, 128),
    RGBColor(231, 41, 138),
    RGBColor(27, 158, 119),
    RGBColor(217, 95, 2),
    RGBColor(102, 102, 102),
    RGBColor(166, 206, 227),
    RGBColor(178, 223, 138),
    RGBColor(251, 154, 153),
    RGBColor(202, 178, 214),
];

/// A registered kind's own colour (`rope`, `alibi`, …: the registry's order in
/// [`colour`]'s palette), or `None` for any other label.
fn kind_colour(label: &str) -> Option<RGBColor> {
    let kinds = posenc::EncodingConfig::kinds();
    match kinds.iter().position(|k| *k == label) {
        Some(i) if i < 16 => Some(colour(i)),
        _ => None,
    }
}

/// Where a label that is not a kind starts looking in [`MORE`]: a hash of it (FNV-1a,
/// stable across runs and platforms, unlike std's hasher).
fn slot(label: &str) -> usize {
    let hash = label.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    (hash % MORE.len() as u64) as usize
}

/// The colour of an encoding's series, the same in every figure: a registered kind
/// (`rope`, `alibi`, …) has its own; any other label (`fire-l64`, `irope`, `rope+rand`) one
/// of twelve further colours picked by a hash of it. A figure takes its colours from
/// [`label_colours`], which keeps two labels of one figure apart.
pub fn label_colour(label: &str) -> RGBColor {
    kind_colour(label).unwrap_or(MORE[slot(label)])
}

/// The colours of one figure's labels: each kind its own, each other label
/// [`label_colour`]'s unless a label before it in this figure holds that one, then the
/// next free one after it (so `rope:randomized=245` and `fire:randomized=245`, whose
/// hashes meet, are told apart). A label keeps its colour across figures but where two
/// meet.
pub fn label_colours(labels: &[&str]) -> Vec<RGBColor> {
    let mut taken: Vec<RGBColor> = labels.iter().filter_map(|l| kind_colour(l)).collect();
    // First every label that can have its own colour takes it; then the ones whose colour
    // an earlier label took look on from it, so that only they move.
    let mut colours: Vec<Option<RGBColor>> = labels
        .iter()
        .map(|label| {
            kind_colour(label).or_else(|| {
                let own = MORE[slot(label)];
                (!taken.contains(&own)).then(|| {
                    taken.push(own);
                    own
                })
            })
        })
        .collect();
    for (label, colour) in labels.iter().zip(&mut colours) {
        if colour.is_none() {
            let start = slot(label);
            let free = (0..MORE.len())
                .map(|i| MORE[(start + i) % MORE.len()])
                .find(|c| !taken.contains(c))
                .unwrap_or(MORE[start]);
            taken.push(free);
            *colour = Some(free);
        }
    }
    colours.into_iter().map(|c| c.unwrap_or(BLACK)).collect()
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
    draw_curves(area, axes, series, true).map(|_| ())
}

/// [`curves`], drawing the legend only if `legend` (the layout is the same either way), and
/// returning the plot's pixel ranges `(x, y)` in `area`.
fn draw_curves(
    area: &Area,
    axes: &Axes,
    series: &[Series],
    legend: bool,
) -> Result<(std::ops::Range<i32>, std::ops::Range<i32>)> {
    // Values over more than a tenfold range, all positive, are drawn on a log scale: the
    // series in log10 on a plain axis, labelled with the values themselves.
    let log_y = log_scale(axes, series);
    let logged: Vec<Series>;
    let series = match log_y {
        true => {
            logged = series
                .iter()
                .map(|s| Series {
                    points: s
                        .points
                        .iter()
                        .filter(|(_, y)| *y > 0.0)
                        .map(|&(x, y)| (x, y.log10()))
                        .collect(),
                    ..s.clone()
                })
                .collect();
            logged.as_slice()
        }
        false => series,
    };
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
    let noted = note_hidden(series, yr.1 - yr.0);
    let series = noted.as_slice();
    let named = series.iter().any(|s| !s.name.is_empty());
    // The legend goes into a corner the data leaves free, or else beside the plot: the
    // axes stay fitted to the data either way.
    // Square axes get a square plot, so a circle is drawn round (its labels and title
    // around it, as plotters lays them out); the rest of the panel stays blank.
    let (w, h) = area.dim_in_pixel();
    let (around_w, around_h) = (8 + 8 + 55, 8 + 8 + 35 + 22);
    let plot_size = |legend_w: u32| match axes.square {
        true => {
            let side = (w - legend_w)
                .saturating_sub(around_w)
                .min(h.saturating_sub(around_h));
            (side + around_w, side + around_h)
        }
        false => (w - legend_w, h),
    };
    let (plot_w, plot_h) = plot_size(0);
    let (corner, covered) = match named {
        true => legend_corner(
            &area.clone().shrink((0, 0), (plot_w, plot_h)),
            series,
            xr,
            yr,
        ),
        false => (SeriesLabelPosition::UpperRight, 0),
    };
    let (plot_w, plot_h) = match covered {
        0 => (plot_w, plot_h),
        _ => plot_size(legend_width(series).min(w / 3)),
    };
    let plot_area = area.clone().shrink((0, 0), (plot_w, plot_h));
    let beside = (covered > 0).then(|| area.clone().shrink((plot_w, 0), (w - plot_w, h)));
    let area = &plot_area;
    let size = fitting_font(area, &axes.title, 15.0);
    let mut chart = ChartBuilder::on(area)
        .caption(&axes.title, (FONT, size))
        .margin(8)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(xr.0..xr.1, yr.0..yr.1)
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
    let tidy = |v: &f64| tidy_label(*v, yr.1 - yr.0);
    let y_desc = match log_y {
        true => format!("{} (log scale)", axes.y_desc),
        false => axes.y_desc.to_string(),
    };
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0))
        .x_desc(axes.x_desc)
        .y_desc(y_desc)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .y_label_formatter(&tidy);
    if log_y {
        // No evenly spaced ticks: round values (1, 2, 5 × 10^k) get lines and labels below.
        mesh.y_labels(0);
    }
    if whole_x {
        mesh.x_label_formatter(&whole);
    } else {
        mesh.x_label_formatter(&tidy);
    }
    mesh.draw().map_err(err)?;
    if log_y {
        let base = area.get_base_pixel();
        let style =
            (FONT, 12)
                .into_font()
                .color(&BLACK)
                .pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Right,
                    plotters::style::text_anchor::VPos::Center,
                ));
        for value in log_ticks(10f64.powf(yr.0), 10f64.powf(yr.1)) {
            let y = value.log10();
            chart
                .draw_series(LineSeries::new([(xr.0, y), (xr.1, y)], BLACK.mix(0.15)))
                .map_err(err)?;
            let (px, py) = chart.backend_coord(&(xr.0, y));
            area.draw(&Text::new(
                tidy_label(value, value),
                (px - 6 - base.0, py - base.1),
                style.clone(),
            ))
            .map_err(err)?;
        }
    }
    let inside = |&(x, y): &(f64, f64)| (xr.0..=xr.1).contains(&x) && (yr.0..=yr.1).contains(&y);
    for s in series {
        let c = s.colour;
        let finite: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let dots: Vec<(f64, f64)> = finite.iter().copied().filter(inside).collect();
        match s.mark {
            Mark::Line | Mark::LineDots => {
                if s.mark == Mark::LineDots {
                    chart
                        .draw_series(dots.iter().map(|&p| Circle::new(p, 3, c.filled())))
                        .map_err(err)?;
                }
                // Each piece of the line inside the plot, so nothing is drawn outside it.
                for piece in clip_polyline(&finite, xr, yr) {
                    chart
                        .draw_series(LineSeries::new(piece, c.stroke_width(2)))
                        .map_err(err)?;
                }
            }
            Mark::Dots => {
                chart
                    .draw_series(dots.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(err)?;
            }
            Mark::Rings => {
                chart
                    .draw_series(dots.iter().map(|&p| Circle::new(p, 5, c.stroke_width(1))))
                    .map_err(err)?;
            }
            Mark::Crosses => {
                chart
                    .draw_series(dots.iter().map(|&p| Cross::new(p, 4, c.stroke_width(1))))
                    .map_err(err)?;
            }
            Mark::Area => {
                chart
                    .draw_series(std::iter::once(Polygon::new(
                        finite.clone(),
                        c.mix(0.18).filled(),
                    )))
                    .map_err(err)?;
            }
        }
        if !s.name.is_empty() {
            // The legend entry, from an empty series: the data above may be in pieces.
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(3))
                });
        }
    }
    let plot = chart.plotting_area().get_pixel_range();
    if let (Some(strip), true) = (&beside, legend) {
        legend_beside(strip, series, plot.1.start)?;
        return Ok(plot);
    }
    if named && legend {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font((FONT, 12))
            .position(corner)
            .draw()
            .map_err(err)?;
    }
    Ok(plot)
}

/// `series` with the legend name of each line that a later line (drawn over it) hides
/// whole, every point within 1% of the y axis's extent `span` of the later one's at the
/// same x, saying which: `sinusoidal (3 seeds), under t5`.
fn note_hidden(series: &[Series], span: f64) -> Vec<Series> {
    let line = |s: &Series| !s.name.is_empty() && matches!(s.mark, Mark::Line | Mark::LineDots);
    let covers = |over: &Series, under: &Series| {
        under.points.iter().all(|&(x, y)| {
            over.points
                .iter()
                .any(|&(ox, oy)| ox == x && (oy - y).abs() <= span.abs() * 0.01)
        })
    };
    let mut out = series.to_vec();
    for (i, s) in series.iter().enumerate() {
        if !line(s) || s.points.is_empty() {
            continue;
        }
        if let Some(over) = series[i + 1..]
            .iter()
            .rev()
            .find(|o| line(o) && covers(o, s))
        {
            let base = over.name.split(" (").next().unwrap_or(&over.name);
            out[i].name = format!("{}, under {base}", s.name);
        }
    }
    out
}

/// The width in pixels of a legend of `series` drawn beside the plot.
fn legend_width(series: &[Series]) -> u32 {
    legend_box_width(series) + 12
}

/// The width in pixels of a legend box of `series` (swatches, labels and margins as
/// plotters draws them, rounded up).
fn legend_box_width(series: &[Series]) -> u32 {
    let chars = series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    36 + 7 * chars as u32
}

/// Draws the legend of `series` into `strip`, the area right of the plot, its top at the
/// plot's top (`top`, in the figure's pixels): a swatch and the name of each named series,
/// in a box as plotters draws a legend inside the plot.
fn legend_beside(strip: &Area, series: &[Series], top: i32) -> Result<()> {
    let named: Vec<&Series> = series.iter().filter(|s| !s.name.is_empty()).collect();
    let (w, _) = strip.dim_in_pixel();
    let top = top - strip.get_base_pixel().1;
    let row = 18;
    let bottom = top + 10 + row * named.len() as i32;
    let frame = [(6, top), (w as i32 - 8, bottom)];
    strip
        .draw(&Rectangle::new(frame, WHITE.mix(0.85).filled()))
        .map_err(err)?;
    strip
        .draw(&Rectangle::new(frame, BLACK.mix(0.3)))
        .map_err(err)?;
    for (i, s) in named.iter().enumerate() {
        let y = top + 5 + row * i as i32 + row / 2;
        strip
            .draw(&PathElement::new(
                vec![(12, y), (28, y)],
                s.colour.stroke_width(3),
            ))
            .map_err(err)?;
        strip
            .draw(&Text::new(
                s.name.clone(),
                (34, y),
                (FONT, 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Left,
                        plotters::style::text_anchor::VPos::Center,
                    )),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// Whether `series` go on a log y axis: no fixed range or square axes asked for, every
/// value positive, and the largest more than ten times the smallest.
fn log_scale(axes: &Axes, series: &[Series]) -> bool {
    if axes.y_range.is_some() || axes.square {
        return false;
    }
    let ys = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.1)
        .filter(|y| y.is_finite());
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
        (a.min(y), b.max(y))
    });
    lo > 0.0 && hi > 10.0 * lo
}

/// The round values (1, 2 and 5 × 10^k, or 1 × 10^k alone when those would be more than
/// twelve) between `lo` and `hi`, for a log axis's lines and labels.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let within = |mantissas: &[f64]| -> Vec<f64> {
        let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        (k0..=k1)
            .flat_map(|k| mantissas.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let fine = within(&[1.0, 2.0, 5.0]);
    match fine.len() > 12 {
        true => within(&[1.0]),
        false => fine,
    }
}

/// An axis label: as few decimals as the value needs (30, not 30.0; 0.25), and 0 for a
/// value that is zero at the scale of the axis (never "-0.0").
fn tidy_label(v: f64, span: f64) -> String {
    if v.abs() <= span.abs() * 1e-9 {
        return "0".to_string();
    }
    let text = format!("{v:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// The parts of the polyline through `points` inside `[x0, x1] × [y0, y1]`: each segment
/// cut where it leaves the box (Liang–Barsky), consecutive repeated points dropped (a
/// zero-length segment has no direction), and split where it turns back by more than 120°.
fn clip_polyline(
    points: &[(f64, f64)],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> Vec<Vec<(f64, f64)>> {
    let mut pieces: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut current: Vec<(f64, f64)> = Vec::new();
    let same = |a: (f64, f64), b: (f64, f64)| {
        (a.0 - b.0).abs() <= (x1 - x0) * 1e-9 && (a.1 - b.1).abs() <= (y1 - y0) * 1e-9
    };
    let mut flush = |current: &mut Vec<(f64, f64)>| {
        if current.len() >= 2 {
            pieces.push(std::mem::take(current));
        }
        current.clear();
    };
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let (mut t0, mut t1) = (0.0f64, 1.0f64);
        let mut visible = true;
        for (p, q) in [
            (-dx, a.0 - x0),
            (dx, x1 - a.0),
            (-dy, a.1 - y0),
            (dy, y1 - a.1),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    visible = false;
                }
            } else {
                let r = q / p;
                if p < 0.0 {
                    t0 = t0.max(r);
                } else {
                    t1 = t1.min(r);
                }
            }
        }
        if !visible || t0 > t1 {
            flush(&mut current);
            continue;
        }
        let start = (a.0 + t0 * dx, a.1 + t0 * dy);
        let end = (a.0 + t1 * dx, a.1 + t1 * dy);
        match current.last() {
            Some(&last) if same(last, start) => {}
            _ => {
                flush(&mut current);
                current.push(start);
            }
        }
        if !same(*current.last().unwrap_or(&start), end) {
            current.push(end);
        }
        if t1 < 1.0 {
            flush(&mut current);
        }
    }
    flush(&mut current);
    // plotters joins a wide line's segments with miters, and a turn of nearly 180° (a line
    // going back over itself) has a miter of nearly infinite length: split such pieces
    // there, at the turn's point.
    let unit = |a: (f64, f64), b: (f64, f64)| {
        let (dx, dy) = ((b.0 - a.0) / (x1 - x0), (b.1 - a.1) / (y1 - y0));
        let n = dx.hypot(dy).max(1e-300);
        (dx / n, dy / n)
    };
    let mut split = Vec::new();
    for piece in pieces {
        let mut part = vec![piece[0], piece[1]];
        for w in piece.windows(3) {
            let (u, v) = (unit(w[0], w[1]), unit(w[1], w[2]));
            if u.0 * v.0 + u.1 * v.1 < -0.5 {
                split.push(std::mem::replace(&mut part, vec![w[1]]));
            }
            part.push(w[2]);
        }
        split.push(part);
    }
    split
}

/// The legend's width and height as shares of the plot (labels and margins as plotters
/// draws them, rounded up).
fn legend_size(area: &Area, series: &[Series]) -> (f64, f64) {
    let (w, h) = area.dim_in_pixel();
    let named = series.iter().filter(|s| !s.name.is_empty()).count();
    let lw = f64::from(legend_box_width(series)) / (f64::from(w) - 80.0).max(1.0);
    let lh = (12.0 + 18.0 * named as f64) / (f64::from(h) - 80.0).max(1.0);
    (lw, lh)
}

/// The corner of the plot whose legend box touches the fewest points and line segments of
/// `series`, upper right first among equals, and how many it touches. The box is taken a
/// few pixels larger than the legend, so a marker's radius or a line's width next to it
/// counts too.
fn legend_corner(
    area: &Area,
    series: &[Series],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> (SeriesLabelPosition, usize) {
    let (lw, lh) = legend_size(area, series);
    let (w, h) = area.dim_in_pixel();
    let (mx, my) = (
        8.0 / (f64::from(w) - 80.0).max(1.0),
        8.0 / (f64::from(h) - 80.0).max(1.0),
    );
    let (sx, sy) = ((x1 - x0).max(1e-12), (y1 - y0).max(1e-12));
    let unit: Vec<(Vec<(f64, f64)>, bool)> = series
        .iter()
        .map(|s| {
            let p = s
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| ((x - x0) / sx, (y - y0) / sy))
                .collect();
            (p, matches!(s.mark, Mark::Line | Mark::LineDots))
        })
        .collect();
    let covered = |left: bool, top: bool| {
        let bx = if left {
            (0.0, lw + mx)
        } else {
            (1.0 - lw - mx, 1.0)
        };
        let by = if top {
            (1.0 - lh - my, 1.0)
        } else {
            (0.0, lh + my)
        };
        let inside =
            |&(x, y): &(f64, f64)| (bx.0..=bx.1).contains(&x) && (by.0..=by.1).contains(&y);
        unit.iter()
            .map(|(p, line)| match line {
                true => p
                    .windows(2)
                    .filter(|pair| !clip_polyline(pair, bx, by).is_empty() || inside(&pair[0]))
                    .count(),
                false => p.iter().filter(|q| inside(q)).count(),
            })
            .sum::<usize>()
    };
    [
        (SeriesLabelPosition::UpperRight, false, true),
        (SeriesLabelPosition::UpperLeft, true, true),
        (SeriesLabelPosition::LowerRight, false, false),
        (SeriesLabelPosition::LowerLeft, true, false),
    ]
    .into_iter()
    .map(|(corner, left, top)| (corner, covered(left, top)))
    .min_by_key(|&(_, n)| n)
    .unwrap_or((SeriesLabelPosition::UpperRight, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds close together are a band around their mean; seeds further apart than half the
    /// axis at some point are each drawn, with no band; one seed is the line alone.
    #[test]
    fn seeds_far_apart_are_drawn_each() {
        let marks = |points: &[SeedPoint]| -> Vec<(Mark, usize)> {
            Series::spread("a".into(), colour(0), points, 100.0)
                .iter()
                .map(|s| (s.mark, s.points.len()))
                .collect()
        };
        let close = [(1.0, vec![40.0, 50.0, 60.0]), (2.0, vec![10.0, 20.0, 30.0])];
        assert_eq!(marks(&close), [(Mark::Area, 4), (Mark::LineDots, 2)]);
        let apart = [(1.0, vec![90.0, 95.0, 97.0]), (2.0, vec![0.0, 5.0, 96.0])];
        assert_eq!(marks(&apart), [(Mark::Rings, 6), (Mark::LineDots, 2)]);
        let one = [(1.0, vec![90.0]), (2.0, vec![]), (3.0, vec![5.0])];
        assert_eq!(marks(&one), [(Mark::LineDots, 2)]);
        let line = &Series::spread("a".into(), colour(0), &apart, 100.0)[1];
        assert!(
            (line.points[1].1 - 101.0 / 3.0).abs() < 1e-9,
            "the mean: {:?}",
            line.points
        );
    }

    /// A line that a later one hides whole says so in its legend name; one that shows
    /// anywhere, or one drawn over the other, does not.
    #[test]
    fn a_hidden_line_names_the_one_over_it() {
        let s = |name: &str, ys: &[f64]| {
            named(
                name,
                0,
                Mark::LineDots,
                ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
            )
        };
        let series = [
            s("sinusoidal (3 seeds)", &[100.0, 50.0, 0.0]),
            s("rope (3 seeds)", &[100.0, 60.0, 0.0]),
            s("t5 (3 seeds)", &[100.0, 50.5, 0.0]),
        ];
        let names: Vec<String> = note_hidden(&series, 100.0)
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(
            names,
            [
                "sinusoidal (3 seeds), under t5",
                "rope (3 seeds)",
                "t5 (3 seeds)"
            ]
        );
    }

    /// A colour bar runs from the top value's colour at the top to the bottom value's at
    /// the bottom; text in a cell changes that cell's pixels and no other cell's.
    #[test]
    fn a_heatmap_has_its_colour_bar_and_cell_text() {
        register_font().unwrap();
        let values = vec![vec![0.0f32, 1.0], vec![0.5, f32::NAN]];
        let text = vec![
            vec!["0/3".to_string(), "3/3".to_string()],
            vec!["1/2".to_string(), "0/0".to_string()],
        ];
        let draw = |cell_text: Option<&[Vec<String>]>| {
            let mut rgb = vec![0u8; 400 * 300 * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, (400, 300)).into_drawing_area();
                root.fill(&WHITE).unwrap();
                let map = Heatmap {
                    values: &values,
                    title: "t".into(),
                    x_desc: "x",
                    y_desc: "y",
                    x_ticks: None,
                    y_ticks: None,
                    diverging: false,
                    range: Some((0.0, 1.0)),
                    colour_bar: true,
                    cell_text,
                };
                heatmap(&root, &map).unwrap();
                root.present().unwrap();
            }
            rgb
        };
        let plain = draw(None);
        let px = |rgb: &[u8], x: u32, y: u32| {
            let i = ((y * 400 + x) * 3) as usize;
            RGBColor(rgb[i], rgb[i + 1], rgb[i + 2])
        };
        // The bar's column: the first from the right edge with viridis' top colour.
        let bar_x = 400 - BAR_WIDTH + 18;
        let column: Vec<RGBColor> = (0..300).map(|y| px(&plain, bar_x, y)).collect();
        let coloured: Vec<usize> = (0..300)
            .filter(|&y| column[y] != WHITE && column[y].0 != column[y].1)
            .collect();
        let (top, bottom) = (coloured[1], coloured[coloured.len() - 2]);
        let near = |a: RGBColor, b: RGBColor| {
            (i32::from(a.0) - i32::from(b.0)).abs()
                + (i32::from(a.1) - i32::from(b.1)).abs()
                + (i32::from(a.2) - i32::from(b.2)).abs()
                < 24
        };
        assert!(
            near(column[top], ViridisRGB.get_color(1.0)),
            "{:?}",
            column[top]
        );
        assert!(
            near(column[bottom], ViridisRGB.get_color(0.0)),
            "{:?}",
            column[bottom]
        );
        let with = draw(Some(&text));
        let changed = plain
            .chunks(3)
            .zip(with.chunks(3))
            .filter(|(a, b)| a != b)
            .count();
        assert!(changed > 20, "no text drawn ({changed} pixels changed)");
    }

    /// Positive values over more than a tenfold range go on a log axis, labelled at round
    /// values; a fixed range, a zero, or a narrower range keep the plain axis. On the log
    /// axis 10 sits halfway between 1 and 100.
    #[test]
    fn wide_positive_values_get_a_log_axis() {
        let line = |ys: &[f64]| {
            [named(
                "a",
                0,
                Mark::Line,
                ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
            )]
        };
        assert!(log_scale(&axes(None), &line(&[30.0, 372.0])));
        assert!(!log_scale(&axes(None), &line(&[30.0, 290.0])));
        assert!(!log_scale(&axes(None), &line(&[0.0, 372.0])));
        assert!(!log_scale(&axes(Some((0.0, 400.0))), &line(&[30.0, 372.0])));
        assert_eq!(log_ticks(3.0, 400.0), [5.0, 10.0, 20.0, 50.0, 100.0, 200.0]);
        assert_eq!(log_ticks(0.5, 2e6).len(), 7);
        let series = line(&[1.0, 10.0, 100.0]);
        let (rgb, (xs, ys)) = render(&axes(None), &series, false);
        // The middle point's row: the series pixels at its x, halfway up the plot.
        let x_mid = (xs.start + xs.end) / 2;
        let rows: Vec<i32> = series_pixels(&rgb, &series)
            .into_iter()
            .filter(|&(x, _)| x == x_mid)
            .map(|(_, y)| y)
            .collect();
        let y = rows.iter().sum::<i32>() / rows.len() as i32;
        let middle = (ys.start + ys.end) / 2;
        assert!(
            (y - middle).abs() <= 3,
            "10 drawn at row {y}, the middle is {middle}"
        );
    }

    /// A title that fits keeps its size; one wider than the figure is set smaller until it
    /// fits, not cut off at the edges.
    #[test]
    fn a_long_title_is_set_smaller_to_fit() {
        register_font().unwrap();
        let mut rgb = vec![0u8; 400 * 100 * 3];
        let root = BitMapBackend::with_buffer(&mut rgb, (400, 100)).into_drawing_area();
        assert_eq!(fitting_font(&root, "a short title", 20.0), 20.0);
        let long = "test loss by position in the longest window (trained on L = 64, 2000 steps)";
        let size = fitting_font(&root, long, 20.0);
        assert!((9.0..20.0).contains(&size), "{size}");
        let (w, _) = root
            .estimate_text_size(long, &(FONT, size).into_text_style(&root))
            .unwrap();
        assert!(w <= 400 - 16, "{w} px wide at {size}");
    }

    /// Every registered kind has a colour of its own, and any label the same colour in
    /// every call: a figure's rope is every figure's rope.
    #[test]
    fn a_label_has_one_colour_everywhere() {
        let kinds = posenc::EncodingConfig::kinds();
        let shown: Vec<RGBColor> = kinds.iter().take(16).map(|k| label_colour(k)).collect();
        for (i, a) in shown.iter().enumerate() {
            for (j, b) in shown.iter().enumerate().skip(i + 1) {
                assert_ne!(a, b, "{} and {} share a colour", kinds[i], kinds[j]);
            }
        }
        // The hash is FNV-1a's, the same on every platform and run: slots computed apart
        // (Python, the published FNV-1a offset and prime) for two labels of the book.
        assert_eq!(label_colour("irope"), MORE[4]);
        assert_eq!(label_colour("fire-l64"), MORE[6]);
        assert_ne!(label_colour("rope"), label_colour("alibi"));
        assert_eq!(
            label_colour("rope"),
            colour(kinds.iter().position(|k| *k == "rope").unwrap())
        );
    }

    /// Two labels of one figure whose hashes meet get two colours; kinds keep theirs, and
    /// a label that meets none keeps its own.
    #[test]
    fn labels_of_one_figure_are_told_apart() {
        let (a, b) = ("rope:randomized=245", "fire:randomized=245");
        assert_eq!(
            label_colour(a),
            label_colour(b),
            "the case this guards against"
        );
        let colours = label_colours(&["rope", a, b, "fire-l64"]);
        assert_eq!(colours[0], label_colour("rope"));
        assert_eq!(colours[1], label_colour(a));
        assert_ne!(colours[1], colours[2]);
        assert_eq!(colours[3], label_colour("fire-l64"));
        let distinct: std::collections::HashSet<_> =
            colours.iter().map(|c| (c.0, c.1, c.2)).collect();
        assert_eq!(distinct.len(), 4);
    }

    /// A legend names the seeds behind a band, and nothing for one seed.
    #[test]
    fn a_legend_entry_names_its_seeds() {
        assert_eq!(with_seeds("fire", 6), "fire (6 seeds)");
        assert_eq!(with_seeds("fire", 1), "fire");
        assert_eq!(with_seeds("fire", 0), "fire");
    }

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
            let (c, _) = legend_corner(&root, s, (0.0, 1.0), (0.0, 1.0));
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

    const SIZE: (u32, u32) = (600, 400);

    /// `series` drawn on a panel of its own, with its legend or without: the RGB pixels and
    /// the plot's pixel ranges.
    fn render(
        axes: &Axes,
        series: &[Series],
        legend: bool,
    ) -> (Vec<u8>, (std::ops::Range<i32>, std::ops::Range<i32>)) {
        register_font().unwrap();
        let mut rgb = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
        let plot = {
            let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
            root.fill(&WHITE).unwrap();
            let plot = draw_curves(&root, axes, series, legend).unwrap();
            root.present().unwrap();
            plot
        };
        (rgb, plot)
    }

    /// The pixels `(x, y)` drawn in exactly one of the series' colours.
    fn series_pixels(rgb: &[u8], series: &[Series]) -> Vec<(i32, i32)> {
        let colours: Vec<[u8; 3]> = series
            .iter()
            .map(|s| [s.colour.0, s.colour.1, s.colour.2])
            .collect();
        rgb.chunks(3)
            .enumerate()
            .filter(|(_, px)| colours.iter().any(|c| c[..] == px[..]))
            .map(|(i, _)| ((i as u32 % SIZE.0) as i32, (i as u32 / SIZE.0) as i32))
            .collect()
    }

    fn axes(y_range: Option<(f64, f64)>) -> Axes<'static> {
        Axes {
            title: "t".into(),
            x_desc: "x",
            y_desc: "y",
            square: false,
            y_range,
        }
    }

    fn named(name: &str, i: usize, mark: Mark, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            mark,
            colour: colour(i),
        }
    }

    /// What can be checked of a panel without looking: no series is drawn outside the plot,
    /// and the legend's box holds no point or line of the data (the pixels where the panel
    /// with its legend differs from the one without hold no series colour in the latter).
    fn check_panel(axes: &Axes, series: &[Series]) {
        let (with, plot) = render(axes, series, true);
        let (without, _) = render(axes, series, false);
        let (xs, ys) = plot;
        // The legend's swatches are series colours inside the plot: only `without` is
        // checked for strays.
        for (x, y) in series_pixels(&without, series) {
            assert!(
                xs.contains(&x) && ys.contains(&y),
                "a series pixel at ({x}, {y}) lies outside the plot {xs:?} × {ys:?}"
            );
        }
        let changed: Vec<(i32, i32)> = with
            .chunks(3)
            .zip(without.chunks(3))
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, _)| ((i as u32 % SIZE.0) as i32, (i as u32 / SIZE.0) as i32))
            .collect();
        if series.iter().all(|s| s.name.is_empty()) {
            assert!(changed.is_empty());
            return;
        }
        assert!(!changed.is_empty(), "no legend was drawn");
        let (lx, ly) = changed.iter().fold(
            ((i32::MAX, i32::MIN), (i32::MAX, i32::MIN)),
            |((a, b), (c, d)), &(x, y)| ((a.min(x), b.max(x)), (c.min(y), d.max(y))),
        );
        let under: Vec<(i32, i32)> = series_pixels(&without, series)
            .into_iter()
            .filter(|&(x, y)| (lx.0..=lx.1).contains(&x) && (ly.0..=ly.1).contains(&y))
            .collect();
        assert!(
            under.is_empty(),
            "the legend {lx:?} × {ly:?} covers {} data pixels, e.g. {:?}",
            under.len(),
            under.first()
        );
    }

    #[test]
    fn lines_stay_inside_the_plot_and_the_legend_off_the_data() {
        let zigzag = |i: usize, n: usize| -> Vec<(f64, f64)> {
            (0..=n).map(|k| (k as f64, ((k + i) % 2) as f64)).collect()
        };
        // A line far past a fixed y range.
        check_panel(
            &axes(Some((-1.0, 1.0))),
            &[named(
                "wild",
                0,
                Mark::LineDots,
                vec![(0.0, 0.0), (1.0, 5.0), (2.0, -7.0), (3.0, 0.5)],
            )],
        );
        // Repeated points (a zero-length segment), as one sine in every dimension gives.
        let diagonal: Vec<(f64, f64)> = (0..40)
            .map(|p| (f64::from(p).sin(), f64::from(p).sin()))
            .flat_map(|q| [q, q])
            .collect();
        check_panel(
            &axes(None),
            &[named("dims 0, 1", 4, Mark::LineDots, diagonal)],
        );
        // Data in every corner, six named series: the legend goes beside the plot, whose
        // axes stay fitted to the data (its highest line within the 5% pad of the top).
        let dense: Vec<Series> = (0..6)
            .map(|i| named(&format!("series number {i}"), i, Mark::Line, zigzag(i, 12)))
            .collect();
        check_panel(&axes(None), &dense);
        let (rgb, (xs, ys)) = render(&axes(None), &dense, true);
        assert!(
            xs.end < SIZE.0 as i32 - 100,
            "no room beside the plot: {xs:?}"
        );
        let highest = series_pixels(&rgb, &dense)
            .into_iter()
            .filter(|(x, _)| xs.contains(x))
            .map(|(_, y)| y)
            .min()
            .unwrap();
        assert!(
            highest - ys.start <= (ys.end - ys.start) / 12,
            "the data starts {} px below the plot's top",
            highest - ys.start
        );
        // Dots and rings only, a rising line: a free corner is used as it is.
        check_panel(
            &axes(None),
            &[
                named(
                    "dots",
                    1,
                    Mark::Dots,
                    (0..30).map(|k| (k as f64, k as f64)).collect(),
                ),
                named(
                    "rings",
                    2,
                    Mark::Rings,
                    (0..30).map(|k| (k as f64, k as f64 / 2.0)).collect(),
                ),
                named(
                    "",
                    3,
                    Mark::Crosses,
                    (0..30).map(|k| (k as f64, 1.0)).collect(),
                ),
            ],
        );
        // No name, no legend.
        check_panel(&axes(None), &[named("", 0, Mark::Line, zigzag(0, 5))]);
    }

    #[test]
    fn a_line_is_cut_where_it_leaves_the_box() {
        let box_ = ((0.0, 1.0), (0.0, 1.0));
        let cut = |p: &[(f64, f64)]| clip_polyline(p, box_.0, box_.1);
        assert_eq!(
            cut(&[(0.5, 0.5), (0.5, 2.0)]),
            [vec![(0.5, 0.5), (0.5, 1.0)]]
        );
        assert_eq!(
            cut(&[(-1.0, 0.5), (2.0, 0.5), (2.0, 0.7), (0.5, 0.7)]),
            [vec![(0.0, 0.5), (1.0, 0.5)], vec![(1.0, 0.7), (0.5, 0.7)]]
        );
        assert!(cut(&[(2.0, 2.0), (3.0, 3.0)]).is_empty());
        assert!(cut(&[(0.5, 0.5), (0.5, 0.5)]).is_empty());
        assert_eq!(tidy_label(30.0, 60.0), "30");
        assert_eq!(tidy_label(-1e-17, 2.0), "0");
        assert_eq!(tidy_label(0.25, 1.0), "0.25");
    }

    #[test]
    fn label_steps_are_round() {
        let steps: Vec<i32> = [5, 9, 16, 20, 64, 100, 4096].map(round_step).to_vec();
        assert_eq!(steps, [1, 2, 2, 5, 10, 20, 500]);
    }
}
