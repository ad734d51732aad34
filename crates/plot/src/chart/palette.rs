//! The palette: one colour and one line style per encoding, scaling or label, by name, the
//! same in every figure and in the explorer.

use super::*;

/// Colours by place, for series that are not encodings (the channels of one encoding, the
/// heads of one layer): Tableau's ten, then black, gold and four dark ones, repeating
/// after sixteen.
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

/// Every built-in encoding's colour, each preset's, and those of the composites the book
/// names (`irope`), by name. Data, not a query of the encoding registry, so that the
/// order kinds are registered in moves no figure's colours. The first eleven are Tableau's;
/// each later one was picked, in this order, as far in CIELAB from those before it as a
/// grid of hues allowed (no two closer than ΔE 27; the 2-D kinds' from hues no lighter than
/// L* 75, so that none fades into the page).
pub const PALETTE: [(&str, RGBColor); 42] = [
    ("none", RGBColor(127, 127, 127)),
    ("sinusoidal", RGBColor(31, 119, 180)),
    ("learned", RGBColor(44, 160, 44)),
    ("rope", RGBColor(214, 39, 40)),
    ("alibi", RGBColor(255, 127, 14)),
    ("t5", RGBColor(148, 103, 189)),
    ("fire", RGBColor(188, 189, 34)),
    ("fox", RGBColor(23, 190, 207)),
    ("cope", RGBColor(227, 119, 194)),
    ("xpos", RGBColor(140, 86, 75)),
    ("kerple", RGBColor(0, 0, 0)),
    ("sinusoidal-concat", RGBColor(230, 115, 126)),
    ("p-rope", RGBColor(0, 76, 31)),
    ("fraction", RGBColor(61, 38, 76)),
    ("index", RGBColor(0, 115, 230)),
    ("binary", RGBColor(153, 191, 96)),
    ("sine-single", RGBColor(143, 57, 230)),
    ("layers", RGBColor(230, 161, 0)),
    ("hope", RGBColor(0, 0, 76)),
    ("ssmax", RGBColor(153, 107, 0)),
    ("stack", RGBColor(191, 91, 48)),
    ("window", RGBColor(0, 57, 191)),
    ("sink", RGBColor(0, 230, 0)),
    ("pope", RGBColor(230, 0, 230)),
    ("abacus", RGBColor(230, 161, 115)),
    ("coupling", RGBColor(0, 69, 76)),
    ("coupling-bias", RGBColor(76, 61, 0)),
    ("irope", RGBColor(0, 0, 230)),
    ("mrope", RGBColor(247, 0, 133)),
    ("rope-2d", RGBColor(133, 0, 76)),
    ("rope-mixed", RGBColor(0, 209, 152)),
    ("sinusoidal-2d", RGBColor(114, 0, 133)),
    ("learned-2d", RGBColor(209, 171, 209)),
    ("alibi-2d", RGBColor(95, 0, 0)),
    ("liere", RGBColor(90, 155, 120)),
    ("path", RGBColor(238, 119, 255)),
    ("qk-norm", RGBColor(153, 170, 255)),
    ("temperature", RGBColor(119, 204, 0)),
    // The presets, named as kinds are: each its own colour, not the hash of its name.
    ("llama4", RGBColor(200, 0, 160)),
    ("gpt-oss", RGBColor(80, 112, 0)),
    ("gemma3", RGBColor(144, 136, 80)),
    ("rnope-swa", RGBColor(152, 88, 128)),
];

/// Every way of reading RoPE past its window, by name: the scalings and self-extend. They
/// share a figure with no encoding but `none` (no scaling), so they take Tableau's most
/// distinct hues again, apart from each other and from `none`'s grey.
pub const SCALINGS: [(&str, RGBColor); 6] = [
    ("linear", RGBColor(31, 119, 180)),
    ("dynamic", RGBColor(44, 160, 44)),
    ("yarn", RGBColor(214, 39, 40)),
    ("llama3", RGBColor(148, 103, 189)),
    ("longrope", RGBColor(255, 127, 14)),
    ("self-extend", RGBColor(23, 190, 207)),
];

/// Colours for labels that name no entry of [`PALETTE`] or [`SCALINGS`].
pub(super) const MORE: [RGBColor; 12] = [
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

/// How a series' line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dash {
    /// Unbroken: an entry of the palette as it is named.
    #[default]
    Solid,
    /// Long dashes: a variant of an entry (`rope:randomized=100`, `fire-l64`, `yarn ×2`).
    Dashed,
    /// Dots: a second variant in one figure.
    Dotted,
}

/// A series' look: its colour and its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// The colour.
    pub colour: RGBColor,
    /// The line.
    pub dash: Dash,
}

/// The entry of [`PALETTE`] or [`SCALINGS`] a label names, and whether it names it exactly: the entry
/// itself (`rope`); else the longest entry the label starts with, followed by a separator
/// (`rope:randomized=100`, `fire-l64`, `yarn ×2`, `coupling-bias+ssmax`); else an entry
/// that is one of its words (`zero-shot yarn`).
fn entry(label: &str) -> Option<(RGBColor, bool)> {
    let entries = || PALETTE.iter().chain(&SCALINGS);
    if let Some((_, c)) = entries().find(|(n, _)| *n == label) {
        return Some((*c, true));
    }
    let prefixed = entries()
        .filter(|(n, _)| {
            label
                .strip_prefix(n)
                .is_some_and(|rest| rest.starts_with([':', '-', '+', ' ', '(', '×', '@', '/', '_']))
        })
        .max_by_key(|(n, _)| n.len());
    let worded = || entries().find(|(n, _)| label.split_whitespace().any(|word| word == *n));
    prefixed.or_else(worded).map(|(_, c)| (*c, false))
}

/// Where a label that names no entry starts looking in [`MORE`]: a hash of it (FNV-1a,
/// stable across runs and platforms, unlike std's hasher).
pub(super) fn slot(label: &str) -> usize {
    let hash = label.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    (hash % MORE.len() as u64) as usize
}

/// A label's look on its own, the same in every figure: an entry of [`PALETTE`] or
/// [`SCALINGS`] in its
/// colour, solid; a variant of one (`rope:randomized=100`) in the entry's colour, dashed;
/// any other label in one of twelve further colours picked by a hash of it, solid. A
/// figure takes its styles from [`label_styles`], which keeps its labels apart.
pub fn label_style(label: &str) -> Style {
    match entry(label) {
        Some((colour, true)) => Style {
            colour,
            dash: Dash::Solid,
        },
        Some((colour, false)) => Style {
            colour,
            dash: Dash::Dashed,
        },
        None => Style {
            colour: MORE[slot(label)],
            dash: Dash::Solid,
        },
    }
}

/// A label's colour ([`label_style`]).
pub fn label_colour(label: &str) -> RGBColor {
    label_style(label).colour
}

/// The looks of one figure's labels, each [`label_style`]'s unless a label before it in
/// this figure holds that look: then the same colour with the next line (solid, dashed,
/// dotted), and past those, for a label of no entry, the next free colour of the twelve further ones.
/// A label keeps its look across figures but where two meet.
pub fn label_styles(labels: &[&str]) -> Vec<Style> {
    const DASHES: [Dash; 3] = [Dash::Solid, Dashed, Dotted];
    use Dash::{Dashed, Dotted};
    let mut taken: Vec<Style> = Vec::new();
    let mut styles = Vec::with_capacity(labels.len());
    for label in labels {
        let own = label_style(label);
        let start = DASHES.iter().position(|d| *d == own.dash).unwrap_or(0);
        let same_colour = (0..DASHES.len()).map(|i| Style {
            colour: own.colour,
            dash: DASHES[(start + i) % DASHES.len()],
        });
        let other_colours = (entry(label).is_none())
            .then(|| (1..MORE.len()).map(|i| MORE[(slot(label) + i) % MORE.len()]))
            .into_iter()
            .flatten()
            .map(|colour| Style {
                colour,
                dash: Dash::Solid,
            });
        let style = same_colour
            .chain(other_colours)
            .find(|s| !taken.contains(s))
            .unwrap_or(own);
        taken.push(style);
        styles.push(style);
    }
    styles
}

/// The colours of one figure's labels ([`label_styles`]), for what draws colour alone (the
/// explorer's series).
pub fn label_colours(labels: &[&str]) -> Vec<RGBColor> {
    label_styles(labels).into_iter().map(|s| s.colour).collect()
}
