//! The heatmap panel: a matrix as coloured cells, with its colour bar.

use super::*;

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
pub(super) fn round_step(n: i32) -> i32 {
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
