//! The two kinds of panel every figure is made of: a heatmap and a set of curves.

mod curves;
mod heatmap;
mod palette;

pub use curves::*;
pub use heatmap::*;
pub use palette::*;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds close together are a band around their mean; seeds further apart than half the
    /// axis at some point are each drawn, with no band; one seed is the line alone.
    #[test]
    fn seeds_far_apart_are_drawn_each() {
        let marks = |points: &[SeedPoint]| -> Vec<(Mark, usize)> {
            Series::spread("a".into(), label_style("a"), points, 100.0)
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
        let line = &Series::spread("a".into(), label_style("a"), &apart, 100.0)[1];
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

    /// Every registered kind and every RoPE scaling has a colour of its own, the palette's
    /// colours lie apart (CIELAB ΔE at least 27), and any label has the same look in every
    /// call: a figure's rope is every figure's rope.
    #[test]
    fn every_kind_and_scaling_has_a_colour_of_its_own() {
        let names: Vec<&str> = PALETTE.iter().map(|(n, _)| *n).collect();
        for kind in posenc::EncodingConfig::kinds() {
            assert!(names.contains(&kind), "the kind {kind} has no colour");
        }
        let scalings: Vec<&str> = SCALINGS.iter().map(|(n, _)| *n).collect();
        for scaling in ["linear", "dynamic", "yarn", "llama3", "longrope"] {
            assert!(
                scalings.contains(&scaling),
                "the scaling {scaling} has no colour"
            );
        }
        let lab = |c: RGBColor| {
            let f = |u: u8| {
                let u = f64::from(u) / 255.0;
                match u > 0.04045 {
                    true => ((u + 0.055) / 1.055).powf(2.4),
                    false => u / 12.92,
                }
            };
            let (r, g, b) = (f(c.0), f(c.1), f(c.2));
            let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
            let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
            let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
            let g = |t: f64| match t > 0.008856 {
                true => t.cbrt(),
                false => 7.787 * t + 16.0 / 116.0,
            };
            let (fx, fy, fz) = (g(x), g(y), g(z));
            [116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)]
        };
        let scalings_and_none: Vec<(&str, RGBColor)> =
            SCALINGS.iter().copied().chain([PALETTE[0]]).collect();
        for set in [&PALETTE[..], &scalings_and_none[..]] {
            for (i, (a, ca)) in set.iter().enumerate() {
                for (b, cb) in &set[i + 1..] {
                    let (p, q) = (lab(*ca), lab(*cb));
                    let de = (0..3).map(|k| (p[k] - q[k]).powi(2)).sum::<f64>().sqrt();
                    assert!(de >= 27.0, "{a} and {b} are ΔE {de:.1} apart");
                }
            }
        }
        assert_eq!(label_style("rope").dash, Dash::Solid);
        // The hash is FNV-1a's, the same on every platform and run: slots computed apart
        // (Python, the published FNV-1a offset and prime) for two labels of no entry.
        assert_eq!(label_colour("rnope-swa16"), MORE[2]);
        assert_eq!(label_colour("positions ÷ 2 (interpolation)"), MORE[4]);
    }

    /// A variant of an entry is drawn in the entry's colour, dashed; a label of no entry
    /// in a colour of its own; two labels of one figure that would look alike are told
    /// apart by their line, then by another colour.
    #[test]
    fn labels_of_one_figure_are_told_apart() {
        for (variant, of) in [
            ("rope:randomized=100", "rope"),
            ("fire-l64", "fire"),
            ("yarn ×2", "yarn"),
            ("coupling-bias+ssmax", "coupling-bias"),
            ("coupling:max_offset=20", "coupling"),
            ("zero-shot yarn", "yarn"),
            ("learned:max_positions=64", "learned"),
        ] {
            let style = label_style(variant);
            assert_eq!(style.colour, label_colour(of), "{variant}");
            assert_eq!(style.dash, Dash::Dashed, "{variant}");
        }
        let styles = label_styles(&["yarn", "yarn ×2", "yarn ×4", "rope"]);
        assert_eq!(styles[0].dash, Dash::Solid);
        assert_eq!(styles[1].dash, Dash::Dashed);
        assert_eq!(styles[2].dash, Dash::Dotted);
        assert!(styles[..3].iter().all(|s| s.colour == label_colour("yarn")));
        // Two labels of no entry whose hashes meet: the second moves to another colour.
        let (a, b) = (0..200)
            .map(|i| format!("x{i}"))
            .flat_map(|a| (0..200).map(move |j| (a.clone(), format!("y{j}"))))
            .find(|(a, b)| slot(a) == slot(b))
            .unwrap();
        let styles = label_styles(&[&a, &b]);
        assert_eq!(styles[0], label_style(&a));
        assert_ne!(styles[0], styles[1]);
    }

    /// Lengths that double go on a log x axis; others do not.
    #[test]
    fn doubling_lengths_get_a_log_x_axis() {
        let line = |xs: &[f64]| Series {
            name: "a".into(),
            points: xs.iter().map(|&x| (x, 1.0)).collect(),
            mark: Mark::LineDots,
            colour: colour(0),
            dash: Dash::Solid,
        };
        let doubling = [64.0, 128.0, 256.0, 512.0];
        assert_eq!(
            doubling_xs(&[line(&doubling)]).as_deref(),
            Some(&doubling[..])
        );
        assert_eq!(doubling_xs(&[line(&[3.0, 5.0, 8.0, 10.0, 13.0])]), None);
        assert_eq!(doubling_xs(&[line(&[64.0, 128.0])]), None);
        assert_eq!(doubling_xs(&[line(&[0.0, 64.0, 128.0, 256.0])]), None);
    }

    /// Past eight lines a figure is drawn as small multiples of four, each line with its
    /// band, and the canvas grows to hold them; eight lines stay in one panel.
    #[test]
    fn many_lines_become_small_multiples() {
        let spread = |i: usize| {
            let points: Vec<SeedPoint> = (0..5)
                .map(|x| (x as f64, vec![i as f64, i as f64 + 0.5]))
                .collect();
            Series::spread(
                format!("s{i}"),
                label_style(&format!("s{i}")),
                &points,
                100.0,
            )
        };
        let eight: Vec<Series> = (0..8).flat_map(spread).collect();
        assert_eq!(groups(&eight).len(), 1);
        assert_eq!(figure_size((900, 560), &eight), (900, 560));
        let twelve: Vec<Series> = (0..12).flat_map(spread).collect();
        let panels = groups(&twelve);
        assert_eq!(panels.len(), 3);
        for (p, panel) in panels.iter().enumerate() {
            let names: Vec<&str> = panel
                .iter()
                .filter(|s| !s.name.is_empty())
                .map(|s| s.name.as_str())
                .collect();
            let want: Vec<String> = (4 * p..4 * p + 4).map(|i| format!("s{i}")).collect();
            assert_eq!(names, want);
            // Each line's band comes with it.
            assert_eq!(panel.len(), 8, "{p}");
            assert!(panel
                .chunks(2)
                .all(|pair| pair[0].mark == Mark::Area && pair[0].colour == pair[1].colour));
        }
        assert_eq!(grid(3), (2, 2));
        assert_eq!(figure_size((900, 560), &twelve), (900, 420 * 2 + 30));
        // And it draws: every panel's lines in their colours.
        let (w, h) = figure_size((900, 560), &twelve);
        let mut rgb = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
            root.fill(&WHITE).unwrap();
            curves(&root, &axes(None), &twelve).unwrap();
            root.present().unwrap();
        }
        for s in twelve.iter().filter(|s| !s.name.is_empty()) {
            let c = [s.colour.0, s.colour.1, s.colour.2];
            assert!(rgb.chunks(3).any(|px| px == c), "{} is not drawn", s.name);
        }
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
            dash: Dash::Solid,
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
            let plot = draw_curves(&root, axes, series, legend, None).unwrap();
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
            dash: Dash::Solid,
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
