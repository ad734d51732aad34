//! The palette: one colour per series, by its place or by the encoding it names.

use super::*;

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

/// The encodings that own a colour of [`colour`]'s palette, by name: kind `KINDS[i]` is
/// drawn in `colour(i)` in every figure. Data, not a query of the encoding registry, so
/// that the order kinds are registered in moves no figure's colours.
pub const KINDS: [&str; 16] = [
    "none",
    "sinusoidal",
    "sinusoidal-concat",
    "learned",
    "rope",
    "p-rope",
    "xpos",
    "alibi",
    "t5",
    "kerple",
    "fire",
    "fox",
    "cope",
    "fraction",
    "index",
    "binary",
];

/// A kind's own colour ([`KINDS`]), or `None` for any other label.
pub(super) fn kind_colour(label: &str) -> Option<RGBColor> {
    KINDS.iter().position(|k| *k == label).map(colour)
}

/// Where a label that is not a kind starts looking in [`MORE`]: a hash of it (FNV-1a,
/// stable across runs and platforms, unlike std's hasher).
pub(super) fn slot(label: &str) -> usize {
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
