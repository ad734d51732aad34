//! The scenes and their questions, made from a seed (after Santoro et al. 2017's
//! Sort-of-CLEVR): four shapes, one of each colour, on a black canvas of `rows × columns`
//! patches of [`PATCH`] × [`PATCH`] pixels, and a question that needs where they are.
//!
//! Each shape is a square or a circle [`SIZE`] pixels across, placed anywhere on the canvas
//! with a clear pixel between any two. The questions, about the shape of colour `a` (and of
//! colour `b`):
//!
//! | question | answer |
//! |---|---|
//! | is `a` left of `b`? | yes or no, by their centres' columns |
//! | is `a` above `b`? | yes or no, by their centres' rows |
//! | which is nearest to `a`? | a colour, by the Euclidean distance of centres |
//! | which is farthest from `a`? | a colour |
//! | how many shapes are left of `a`? | a count, 0 to 3 |
//! | is `a` in the left half? | yes or no, against the canvas's middle |
//!
//! The first five are relations between shapes; the last reads a shape against the canvas,
//! which grows past the trained one at test. A question whose answer is within [`MARGIN`]
//! pixels of another (two centres in nearly one column, two distances nearly equal) is not
//! asked: its scene is drawn again. The answers share one set of [`CLASSES`] classes.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::Result;
use posenc_error::ensure;

/// Pixels a side of a patch.
pub const PATCH: usize = 4;
/// Values a patch holds: its pixels' red, green and blue, row after row.
pub const PATCH_VALUES: usize = PATCH * PATCH * 3;
/// Pixels a side of a shape.
pub const SIZE: usize = 5;
/// The least gap, in pixels, between the answer and any other.
pub const MARGIN: f64 = 2.0;
/// The fewest patches a side: room for four shapes.
pub const MIN_SIDE: usize = 4;
/// The most patches a side.
pub const MAX_SIDE: usize = 64;
/// Answer classes: no, yes, the four colours, the counts 0 to 3.
pub const CLASSES: usize = 10;
/// Rows of the question's embedding: six kinds, colour `a`, colour `b` or none.
pub const QUESTION_IDS: usize = 6 + 4 + 5;

/// The colours, one shape of each in a scene.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Colour {
    /// (1, 0, 0)
    Red,
    /// (0, 1, 0)
    Green,
    /// (0, 0, 1)
    Blue,
    /// (1, 1, 0)
    Yellow,
}

impl Colour {
    /// Every colour, in class order.
    pub const ALL: [Colour; 4] = [Colour::Red, Colour::Green, Colour::Blue, Colour::Yellow];

    /// Its red, green and blue.
    pub fn rgb(self) -> [f32; 3] {
        match self {
            Colour::Red => [1.0, 0.0, 0.0],
            Colour::Green => [0.0, 1.0, 0.0],
            Colour::Blue => [0.0, 0.0, 1.0],
            Colour::Yellow => [1.0, 1.0, 0.0],
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A shape's outline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// Every pixel of its square.
    Square,
    /// The pixels within `SIZE / 2` of its centre.
    Circle,
}

/// One shape on the canvas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Object {
    /// Its colour.
    pub colour: Colour,
    /// Its outline.
    pub shape: Shape,
    /// Its centre pixel's column and row.
    pub centre: [usize; 2],
}

impl Object {
    /// Whether the pixel `(x, y)` is in it.
    fn covers(&self, x: usize, y: usize) -> bool {
        let r = (SIZE / 2) as i64;
        let (dx, dy) = (
            x as i64 - self.centre[0] as i64,
            y as i64 - self.centre[1] as i64,
        );
        if dx.abs() > r || dy.abs() > r {
            return false;
        }
        match self.shape {
            Shape::Square => true,
            Shape::Circle => 4 * (dx * dx + dy * dy) <= (SIZE * SIZE) as i64,
        }
    }
}

/// A canvas of patches and its four shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scene {
    /// Patches down and across, `[rows, columns]`.
    pub grid: [usize; 2],
    /// One shape of each colour, in [`Colour::ALL`]'s order.
    pub objects: Vec<Object>,
}

/// What is asked, of the shape of colour `a` and, for a relation of two, of colour `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Question {
    /// Is `a` left of `b`?
    LeftOf {
        /// The subject.
        a: Colour,
        /// The other.
        b: Colour,
    },
    /// Is `a` above `b`?
    Above {
        /// The subject.
        a: Colour,
        /// The other.
        b: Colour,
    },
    /// Which colour is nearest to `a`?
    Nearest {
        /// The subject.
        a: Colour,
    },
    /// Which colour is farthest from `a`?
    Farthest {
        /// The subject.
        a: Colour,
    },
    /// How many shapes are left of `a`?
    CountLeft {
        /// The subject.
        a: Colour,
    },
    /// Is `a` in the left half of the canvas?
    LeftHalf {
        /// The subject.
        a: Colour,
    },
}

/// The names of the question kinds, in [`Question::kind`]'s order.
pub const KINDS: [&str; 6] = [
    "left_of",
    "above",
    "nearest",
    "farthest",
    "count_left",
    "left_half",
];

impl Question {
    /// Its kind's index into [`KINDS`].
    pub fn kind(&self) -> usize {
        match self {
            Question::LeftOf { .. } => 0,
            Question::Above { .. } => 1,
            Question::Nearest { .. } => 2,
            Question::Farthest { .. } => 3,
            Question::CountLeft { .. } => 4,
            Question::LeftHalf { .. } => 5,
        }
    }

    fn colours(&self) -> (Colour, Option<Colour>) {
        match *self {
            Question::LeftOf { a, b } | Question::Above { a, b } => (a, Some(b)),
            Question::Nearest { a }
            | Question::Farthest { a }
            | Question::CountLeft { a }
            | Question::LeftHalf { a } => (a, None),
        }
    }

    /// The three rows of the question's embedding it sums: its kind, colour `a`, colour `b`
    /// (or none).
    pub fn ids(&self) -> [u32; 3] {
        let (a, b) = self.colours();
        let b = b.map_or(4, Colour::index);
        [self.kind() as u32, 6 + a.index() as u32, 10 + b as u32]
    }

    /// A question drawn uniformly: its kind, then its colours (`b` other than `a`).
    pub fn random(rng: &mut impl Rng) -> Self {
        let a = Colour::ALL[rng.random_range(0..4)];
        let b = Colour::ALL[(a.index() + rng.random_range(1..4)) % 4];
        match rng.random_range(0..KINDS.len()) {
            0 => Question::LeftOf { a, b },
            1 => Question::Above { a, b },
            2 => Question::Nearest { a },
            3 => Question::Farthest { a },
            4 => Question::CountLeft { a },
            _ => Question::LeftHalf { a },
        }
    }
}

/// The class of an answer: no, yes, a colour, a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// No (class 0) or yes (class 1).
    YesNo(bool),
    /// A colour (classes 2–5).
    Colour(Colour),
    /// A count, 0 to 3 (classes 6–9).
    Count(usize),
}

impl Answer {
    /// Its class.
    pub fn class(self) -> u32 {
        match self {
            Answer::YesNo(yes) => u32::from(yes),
            Answer::Colour(c) => 2 + c.index() as u32,
            Answer::Count(n) => 6 + n as u32,
        }
    }
}

/// Checks a grid of patches: `MIN_SIDE` to `MAX_SIDE` a side.
///
/// # Errors
/// A side out of range, named.
pub fn check_grid([rows, columns]: [usize; 2]) -> Result<()> {
    ensure!(
        (MIN_SIDE..=MAX_SIDE).contains(&rows) && (MIN_SIDE..=MAX_SIDE).contains(&columns),
        "a grid must be {MIN_SIDE} to {MAX_SIDE} patches a side (room for four shapes), \
         got {rows} × {columns}"
    );
    Ok(())
}

/// Checks an image size in pixels, `[height, width]`: a multiple of the patch, and a grid
/// [`check_grid`] takes.
///
/// # Errors
/// A size that is not a multiple of [`PATCH`], or a grid out of range.
pub fn grid_of_pixels([height, width]: [usize; 2]) -> Result<[usize; 2]> {
    ensure!(
        height % PATCH == 0 && width % PATCH == 0,
        "an image of {height} × {width} pixels is not a whole number of {PATCH}-pixel patches"
    );
    let grid = [height / PATCH, width / PATCH];
    check_grid(grid)?;
    Ok(grid)
}

impl Scene {
    /// Four shapes on a canvas of `grid` patches: one of each colour, each shape a coin
    /// toss, each centre uniform over the canvas (the whole shape on it), drawn again
    /// until it is clear of the others by a pixel.
    ///
    /// # Errors
    /// A grid [`check_grid`] refuses.
    pub fn random(grid: [usize; 2], rng: &mut impl Rng) -> Result<Self> {
        check_grid(grid)?;
        let (height, width) = (grid[0] * PATCH, grid[1] * PATCH);
        let r = SIZE / 2;
        let mut objects: Vec<Object> = Vec::with_capacity(4);
        'scene: loop {
            objects.clear();
            for colour in Colour::ALL {
                for _ in 0..1000 {
                    let centre = [
                        rng.random_range(r..width - r),
                        rng.random_range(r..height - r),
                    ];
                    let clear = objects.iter().all(|o| {
                        o.centre[0].abs_diff(centre[0]) > SIZE
                            || o.centre[1].abs_diff(centre[1]) > SIZE
                    });
                    if clear {
                        let shape = match rng.random_bool(0.5) {
                            true => Shape::Square,
                            false => Shape::Circle,
                        };
                        objects.push(Object {
                            colour,
                            shape,
                            centre,
                        });
                        break;
                    }
                }
                if objects.last().map(|o| o.colour) != Some(colour) {
                    continue 'scene;
                }
            }
            return Ok(Self { grid, objects });
        }
    }

    fn object(&self, c: Colour) -> &Object {
        &self.objects[c.index()]
    }

    /// The answer to `q`, or `None` where it is within [`MARGIN`] of another.
    pub fn answer(&self, q: &Question) -> Option<Answer> {
        let x = |c: Colour| self.object(c).centre[0] as f64;
        let y = |c: Colour| self.object(c).centre[1] as f64;
        let clear = |d: f64| (d.abs() >= MARGIN).then_some(d);
        let (a, _) = q.colours();
        let others = || Colour::ALL.into_iter().filter(move |&c| c != a);
        let distance = |c: Colour| (x(c) - x(a)).hypot(y(c) - y(a));
        let extreme = |farthest: bool| {
            let mut d: Vec<(f64, Colour)> = others().map(|c| (distance(c), c)).collect();
            d.sort_by(|p, q| p.0.total_cmp(&q.0));
            if farthest {
                d.reverse();
            }
            clear(d[1].0 - d[0].0).map(|_| Answer::Colour(d[0].1))
        };
        match *q {
            Question::LeftOf { a, b } => clear(x(b) - x(a)).map(|d| Answer::YesNo(d > 0.0)),
            Question::Above { a, b } => clear(y(b) - y(a)).map(|d| Answer::YesNo(d > 0.0)),
            Question::Nearest { .. } => extreme(false),
            Question::Farthest { .. } => extreme(true),
            Question::CountLeft { a } => {
                let gaps: Option<Vec<f64>> = others().map(|c| clear(x(a) - x(c))).collect();
                gaps.map(|g| Answer::Count(g.iter().filter(|&&d| d > 0.0).count()))
            }
            Question::LeftHalf { a } => {
                // The middle of a canvas of `w` pixels, as a pixel's centre: (w − 1) / 2.
                let middle = (self.grid[1] * PATCH) as f64 / 2.0 - 0.5;
                clear(middle - x(a)).map(|d| Answer::YesNo(d > 0.0))
            }
        }
    }

    /// The canvas as patches in raster order (row after row of patches), each its
    /// [`PATCH_VALUES`] values: its pixels row after row, each red, green, blue.
    pub fn patches(&self) -> Vec<f32> {
        let [rows, columns] = self.grid;
        let mut out = vec![0f32; rows * columns * PATCH_VALUES];
        for o in &self.objects {
            let r = SIZE / 2;
            for y in o.centre[1] - r..=o.centre[1] + r {
                for x in o.centre[0] - r..=o.centre[0] + r {
                    if !o.covers(x, y) {
                        continue;
                    }
                    let patch = (y / PATCH) * columns + x / PATCH;
                    let at = patch * PATCH_VALUES + ((y % PATCH) * PATCH + x % PATCH) * 3;
                    out[at..at + 3].copy_from_slice(&o.colour.rgb());
                }
            }
        }
        out
    }
}

/// A scene, a question about it and its answer's class.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The scene.
    pub scene: Scene,
    /// The question.
    pub question: Question,
    /// The answer's class.
    pub answer: u32,
}

impl Example {
    /// A question drawn uniformly and a scene on `grid` it has a clear answer in (scenes
    /// are drawn again until one does).
    ///
    /// # Errors
    /// A grid [`check_grid`] refuses.
    pub fn random(grid: [usize; 2], rng: &mut impl Rng) -> Result<Self> {
        let question = Question::random(rng);
        loop {
            let scene = Scene::random(grid, rng)?;
            if let Some(answer) = scene.answer(&question) {
                return Ok(Self {
                    scene,
                    question,
                    answer: answer.class(),
                });
            }
        }
    }
}
