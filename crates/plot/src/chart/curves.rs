//! The curves panel: series of points, bands over seeds, a legend, linear or log axes.

use super::*;
use plotters::style::text_anchor::{HPos, VPos};

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
    /// Its line ([`Mark::Line`] and [`Mark::LineDots`]).
    pub dash: Dash,
}

/// A point of [`Series::spread`]: `x` and each seed's value there.
pub type SeedPoint = (f64, Vec<f64>);

impl Series {
    /// A mean over seeds, drawn as a line with dots in `style`, and the seeds' spread around it: a
    /// band from the lowest seed to the highest (none where every point has one value);
    /// or, where the seeds at some `x` lie further apart than half of `span` (the extent
    /// of the y axis), each seed's value as a ring of its own, since a band that wide
    /// would hide that no seed is near the mean. Points without values are left out.
    pub fn spread(name: String, style: Style, points: &[SeedPoint], span: f64) -> Vec<Series> {
        let Style { colour, dash } = style;
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
            dash,
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
                dash: Dash::Solid,
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
            dash: Dash::Solid,
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

/// The most named lines one panel of [`curves`] draws; past it, the lines go into small
/// multiples of [`PER_PANEL`].
pub const MAX_LINES: usize = 8;

/// The named lines of each small multiple.
pub const PER_PANEL: usize = 4;

/// Draws series of points into `area`, with a legend if any series is named. More than
/// [`MAX_LINES`] named lines are drawn as small multiples: a grid of panels of
/// [`PER_PANEL`] lines each (with their bands), on the same axes, every other line drawn
/// under them in grey, the title once above.
pub fn curves(area: &Area, axes: &Axes, series: &[Series]) -> Result<()> {
    let groups = groups(series);
    if groups.len() <= 1 {
        return draw_curves(area, axes, series, true, None).map(|_| ());
    }
    let (cols, rows) = grid(groups.len());
    let area = match axes.title.is_empty() {
        true => area.clone(),
        false => {
            let size = fitting_font(area, &axes.title, 15.0);
            area.titled(&axes.title, (FONT, size)).map_err(err)?
        }
    };
    let panels = area.split_evenly((rows, cols));
    let untitled = Axes {
        title: String::new(),
        ..*axes
    };
    for (i, (group, panel)) in groups.iter().zip(&panels).enumerate() {
        let context = (groups.iter().enumerate())
            .filter(|(j, _)| *j != i)
            .flat_map(|(_, g)| g.iter())
            .filter(|s| !s.name.is_empty() && matches!(s.mark, Mark::Line | Mark::LineDots))
            .map(|s| Series {
                name: String::new(),
                mark: Mark::Line,
                colour: RGBColor(205, 205, 205),
                dash: Dash::Solid,
                ..s.clone()
            });
        let shown: Vec<Series> = context.chain(group.iter().cloned()).collect();
        draw_curves(panel, &untitled, &shown, true, Some(series))?;
    }
    Ok(())
}

/// The series of each panel of [`curves`]: one group of all of them, or, past
/// [`MAX_LINES`] named lines (of two points or more), groups of [`PER_PANEL`], each line
/// with the unnamed series before it (its band, its seeds' rings).
pub(super) fn groups(series: &[Series]) -> Vec<Vec<Series>> {
    // A line is a named series of two points or more (a single point is a dot).
    let is_line = |s: &Series| {
        !s.name.is_empty() && matches!(s.mark, Mark::Line | Mark::LineDots) && s.points.len() > 1
    };
    let lines = series.iter().filter(|s| is_line(s)).count();
    if lines <= MAX_LINES {
        return vec![series.to_vec()];
    }
    let mut groups: Vec<Vec<Series>> = vec![Vec::new()];
    let mut in_group = 0;
    for s in series {
        if in_group == PER_PANEL {
            groups.push(Vec::new());
            in_group = 0;
        }
        groups.last_mut().unwrap_or(&mut Vec::new()).push(s.clone());
        if is_line(s) {
            in_group += 1;
        }
    }
    // Unnamed series after the last line belong with it.
    if groups.len() > 1 && !groups.last().is_some_and(|g| g.iter().any(is_line)) {
        let rest = groups.pop().unwrap_or_default();
        groups.last_mut().unwrap_or(&mut Vec::new()).extend(rest);
    }
    groups
}

/// The columns and rows of a grid of `n` panels: two columns up to four panels, then three.
pub(super) fn grid(n: usize) -> (usize, usize) {
    let cols = if n <= 4 { 2 } else { 3 };
    (cols, n.div_ceil(cols))
}

/// The size of a figure of `series` drawn by [`curves`] on a canvas of `size`: as it is,
/// or, for small multiples, tall enough that each row of panels is three quarters of its
/// height.
pub fn figure_size(size: (u32, u32), series: &[Series]) -> (u32, u32) {
    match groups(series).len() {
        0 | 1 => size,
        n => {
            let (_, rows) = grid(n);
            (size.0, (size.1 * 3 / 4) * rows as u32 + 30)
        }
    }
}

/// [`curves`] in one panel, drawing the legend only if `legend` (the layout is the same
/// either way), and returning the plot's pixel ranges `(x, y)` in `area`. The axes fit
/// `frame`'s points (all the panels' series, for small multiples) where it is given, else
/// `series`'.
pub(super) fn draw_curves(
    area: &Area,
    axes: &Axes,
    series: &[Series],
    legend: bool,
    frame: Option<&[Series]>,
) -> Result<(std::ops::Range<i32>, std::ops::Range<i32>)> {
    // Values over more than a tenfold range, all positive, are drawn on a log scale: the
    // series in log10 on a plain axis, labelled with the values themselves.
    let frame = frame.unwrap_or(series);
    let log_y = log_scale(axes, frame);
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
    // Lengths that double (64, 128, …, 512) go on a log x axis, labelled with themselves.
    let doubling = doubling_xs(frame);
    let x_logged: Vec<Series>;
    let series = match doubling.is_some() {
        true => {
            x_logged = (series.iter())
                .map(|s| Series {
                    points: (s.points.iter())
                        .filter(|(x, _)| *x > 0.0)
                        .map(|&(x, y)| (x.log2(), y))
                        .collect(),
                    ..s.clone()
                })
                .collect();
            x_logged.as_slice()
        }
        false => series,
    };
    let to_axis = |(x, y): (f64, f64)| match (doubling.is_some(), log_y) {
        (true, true) => (x.log2(), y.log10()),
        (true, false) => (x.log2(), y),
        (false, true) => (x, y.log10()),
        (false, false) => (x, y),
    };
    let framed: Vec<(f64, f64)> = (frame.iter())
        .flat_map(|s| &s.points)
        .filter(|(x, y)| (!log_y || *y > 0.0) && (doubling.is_none() || *x > 0.0))
        .map(|&p| to_axis(p))
        .collect();
    let points = (series.iter())
        .flat_map(|s| &s.points)
        .chain(&framed)
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
        _ => plot_size(legend_width(series).min(w / 2)),
    };
    let plot_area = area.clone().shrink((0, 0), (plot_w, plot_h));
    let beside = (covered > 0).then(|| area.clone().shrink((plot_w, 0), (w - plot_w, h)));
    let area = &plot_area;
    let size = fitting_font(area, &axes.title, 15.0);
    let mut builder = ChartBuilder::on(area);
    if !axes.title.is_empty() {
        builder.caption(&axes.title, (FONT, size));
    }
    let mut chart = builder
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
    let x_desc = match doubling.is_some() {
        true => format!("{} (log scale)", axes.x_desc),
        false => axes.x_desc.to_string(),
    };
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0))
        .x_desc(x_desc)
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
    match doubling.is_some() {
        // The lengths themselves get lines and labels below, not evenly spaced ticks.
        true => mesh.x_labels(0),
        // About one label per 80 pixels, so a narrow panel's labels do not run together.
        false => mesh.x_labels((plot_w as usize / 80).clamp(3, 10)),
    };
    mesh.draw().map_err(err)?;
    if let Some(xs) = &doubling {
        let base = area.get_base_pixel();
        let style = tick_style(HPos::Center, VPos::Top);
        for &value in xs {
            let x = value.log2();
            chart
                .draw_series(LineSeries::new([(x, yr.0), (x, yr.1)], BLACK.mix(0.15)))
                .map_err(err)?;
            let (px, py) = chart.backend_coord(&(x, yr.0));
            area.draw(&Text::new(
                tidy_label(value, value),
                (px - base.0, py + 6 - base.1),
                style.clone(),
            ))
            .map_err(err)?;
        }
    }
    if log_y {
        let base = area.get_base_pixel();
        let style = tick_style(HPos::Right, VPos::Center);
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
                    let style = c.stroke_width(2);
                    match s.dash {
                        Dash::Solid => chart.draw_series(LineSeries::new(piece, style)),
                        Dash::Dashed => {
                            chart.draw_series(DashedLineSeries::new(piece, 9, 5, style))
                        }
                        Dash::Dotted => {
                            chart.draw_series(DashedLineSeries::new(piece, 2, 4, style))
                        }
                    }
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
            let dash = s.dash;
            // The legend entry, from an empty series: the data above may be in pieces.
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    let [a, b, d] = swatch(dash)
                        .map(|(p, q)| PathElement::new(vec![(p, 0), (q, 0)], c.stroke_width(3)));
                    EmptyElement::at((x, y)) + a + b + d
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
pub(super) fn note_hidden(series: &[Series], span: f64) -> Vec<Series> {
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
pub(super) fn legend_width(series: &[Series]) -> u32 {
    legend_box_width(series) + 12
}

/// The width in pixels of a legend box of `series` (swatches, labels and margins as
/// plotters draws them, rounded up).
pub(super) fn legend_box_width(series: &[Series]) -> u32 {
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
pub(super) fn legend_beside(strip: &Area, series: &[Series], top: i32) -> Result<()> {
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
        for (p, q) in swatch(s.dash) {
            strip
                .draw(&PathElement::new(
                    vec![(12 + p, y), (12 + q, y)],
                    s.colour.stroke_width(3),
                ))
                .map_err(err)?;
        }
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

/// The style of a tick's label drawn by hand (a log axis's), anchored at `h` and `v`.
fn tick_style(h: HPos, v: VPos) -> TextStyle<'static> {
    (FONT, 12)
        .into_font()
        .color(&BLACK)
        .pos(plotters::style::text_anchor::Pos::new(h, v))
}

/// Writes a figure of one [`curves`] panel (or its small multiples) to the PNG `path`, on a
/// canvas of `size` grown as [`figure_size`] grows it.
///
/// # Errors
/// A file that cannot be written.
pub fn save_curves(
    path: &std::path::Path,
    size: (u32, u32),
    axes: &Axes,
    series: &[Series],
) -> Result<()> {
    save_png(path, figure_size(size, series), "", |root| {
        curves(root, axes, series)
    })
}

/// The pieces of a legend's swatch, 16 pixels long, drawn as its line is: whole, in
/// dashes or in dots (three pieces each, from the swatch's start).
fn swatch(dash: Dash) -> [(i32, i32); 3] {
    match dash {
        Dash::Solid => [(0, 6), (6, 11), (11, 16)],
        Dash::Dashed => [(0, 6), (10, 16), (16, 16)],
        Dash::Dotted => [(0, 2), (7, 9), (14, 16)],
    }
}

/// The x values of `series`' named lines, where there are at least three, all positive, each
/// at least 1.9 times the one before (lengths that double): those a log x axis labels.
pub(super) fn doubling_xs(series: &[Series]) -> Option<Vec<f64>> {
    let mut xs: Vec<f64> = (series.iter())
        .filter(|s| !s.name.is_empty())
        .flat_map(|s| s.points.iter().map(|(x, _)| *x))
        .filter(|x| x.is_finite())
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let doubles = xs.len() >= 3 && xs[0] > 0.0 && xs.windows(2).all(|w| w[1] >= 1.9 * w[0]);
    doubles.then_some(xs)
}

/// Whether `series` go on a log y axis: no fixed range or square axes asked for, every
/// value positive, and the largest more than ten times the smallest.
pub(super) fn log_scale(axes: &Axes, series: &[Series]) -> bool {
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
pub(super) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
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
pub(super) fn tidy_label(v: f64, span: f64) -> String {
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
pub(super) fn clip_polyline(
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
pub(super) fn legend_size(area: &Area, series: &[Series]) -> (f64, f64) {
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
pub(super) fn legend_corner(
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
