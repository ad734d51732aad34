//! The seam: what a Transformer asks of its positional encoding.
//!
//! An encoding is a value that **declares** what it does and reads
//! ([`PositionalEncoding::capabilities`]), and implements the few **hooks** it needs, each
//! given one context that says where the tokens are ([`Positions`], as data):
//!
//! | hook | context | what it returns | who uses it |
//! |---|---|---|---|
//! | [`embed`](PositionalEncoding::embed) | [`EmbedContext`]: positions, token ids | `x + PE` for the embeddings | sinusoidal, learned, Abacus |
//! | [`rotate`](PositionalEncoding::rotate) | [`RotateContext`]: positions, query or key | turned queries or keys | RoPE, xPos, PoPE |
//! | [`bias`](PositionalEncoding::bias) | [`BiasContext`]: query and key positions, token ids | a bias on the scores | ALiBi, T5, Kerple, FIRE, windows, coupling |
//! | [`read_input`](PositionalEncoding::read_input) | [`InputContext`]: the layer's input | log-gates summed between query and key; `I − βwwᵀ` per token, turning the keys along the way | FoX, PaTH |
//! | [`score_bias`](PositionalEncoding::score_bias) | [`ScoreContext`]: queries, logits | a bias read from the scores | CoPE, SSMax |
//!
//! Every hook is the identity (or "no bias") by default. The model reads
//! [`Capabilities`] once, when it is given an encoding, and never runs a hook to learn what
//! an encoding does: what it reads (tokens, scores, the layer's input), whether it rotates
//! or biases, its sinks, its reach, its longest sequence and a per-layer pattern are all
//! fields of that value. Nothing outside an encoding's own file asks which kind it is.
//!
//! Composites add no hook of their own: [`crate::stack`] folds its entries' hooks (additions
//! add, rotations compose, biases add), and [`crate::layers`] declares a per-layer pattern
//! that the model resolves with [`crate::for_layer`].
//!
//! Positions are consecutive from an offset, so incremental decoding with a key/value
//! cache asks about positions `t, t+1, …` rather than starting again at 0, or any increasing
//! list, as randomized positional encodings train (Ruoss et al. 2023) and self-extend groups
//! them (Jin et al. 2024), or coordinates on several axes per token (an image's rows and
//! columns), which an encoding of one position per token refuses by name.

use std::fmt;
use std::sync::Arc;

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::householder::Householders;
use crate::{Error, Result};

/// Where the tokens of a sequence sit. Every sequence of a batch sits at the same positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positions<'a> {
    /// `offset, offset + 1, …`: consecutive, the usual case.
    From(usize),
    /// These positions, one per token, never decreasing: randomized positions (a sorted
    /// random subset of a range longer than the sequence, Ruoss et al. 2023), or grouped ones
    /// that several tokens share (self-extend's `⌊j / G⌋`, Jin et al. 2024).
    At(&'a [u32]),
    /// `offset, offset + 1, …`, a piece of a sequence read in pieces that will reach
    /// `total` positions (a long prompt read through the cache chunk by chunk): an encoding
    /// whose tables depend on the sequence's length (dynamic NTK) takes `total`'s, as one
    /// forward over the whole sequence would ([`Positions::reach`]).
    Within {
        /// The first position.
        offset: usize,
        /// The length the sequence reaches.
        total: usize,
    },
    /// Coordinates on `axes` axes, one tuple per token, token after token: token `i` sits
    /// at `coords[i·axes .. (i+1)·axes]` (an image patch's row and column; multimodal
    /// RoPE's time, height and width). An encoding of one position per token refuses them
    /// by name ([`Positions::check`]); one that reads them asks [`Positions::coord`].
    Coords {
        /// How many axes each token has.
        axes: usize,
        /// The coordinates, `axes` per token.
        coords: &'a [u32],
    },
}

impl From<usize> for Positions<'_> {
    fn from(offset: usize) -> Self {
        Self::From(offset)
    }
}

impl Positions<'_> {
    /// The position of token `i` (for coordinates, its first axis: an encoding of one
    /// position per token refuses coordinates before it reads any, [`Positions::check`]).
    pub fn get(&self, i: usize) -> usize {
        self.coord(i, 0)
    }

    /// How many axes a token's position has: 1, or a [`Positions::Coords`]'s `axes`.
    pub fn axes(&self) -> usize {
        match self {
            Self::Coords { axes, .. } => *axes,
            _ => 1,
        }
    }

    /// Token `i`'s coordinate on `axis` (axis 0 of a one-dimensional position is the
    /// position itself).
    pub fn coord(&self, i: usize, axis: usize) -> usize {
        match self {
            Self::From(offset) | Self::Within { offset, .. } => offset + i,
            Self::At(list) => list[i] as usize,
            Self::Coords { axes, coords } => coords[i * axes + axis] as usize,
        }
    }

    /// These positions in words, for a message: `3 … 9`, `the 4 listed`, `4 rows of 3
    /// coordinates`.
    pub fn describe(&self, len: usize) -> String {
        match self {
            Self::From(offset) | Self::Within { offset, .. } => {
                format!("{offset} … {}", (offset + len).saturating_sub(1))
            }
            Self::At(list) => format!("the {} listed", list.len()),
            Self::Coords { axes, coords } => {
                format!("{} rows of {axes} coordinates", coords.len() / axes.max(&1))
            }
        }
    }

    /// One past the last position of a sequence of `len` tokens (for coordinates, one past
    /// the largest on any axis: the extent a table of positions must cover).
    pub fn end(&self, len: usize) -> usize {
        match self {
            Self::From(offset) | Self::Within { offset, .. } => offset + len,
            Self::At(list) => list.last().map_or(0, |&p| p as usize + 1),
            Self::Coords { coords, .. } => coords.iter().max().map_or(0, |&p| p as usize + 1),
        }
    }

    /// The length of the whole sequence these `len` tokens belong to, as far as is known:
    /// `total` for a piece read [`Positions::Within`] it, else [`Positions::end`].
    pub fn reach(&self, len: usize) -> usize {
        match self {
            Self::Within { total, .. } => (*total).max(self.end(len)),
            _ => self.end(len),
        }
    }

    /// The keys that `len` queries at these positions attend to in self-attention, and how
    /// many: for consecutive positions, every position from 0 (a cache holds the earlier
    /// ones); for a list, the same list.
    pub fn keys(&self, len: usize) -> (Self, usize) {
        match self {
            Self::From(offset) => (Self::From(0), offset + len),
            Self::Within { offset, total } => (
                Self::Within {
                    offset: 0,
                    total: *total,
                },
                offset + len,
            ),
            Self::At(_) | Self::Coords { .. } => (*self, len),
        }
    }

    /// Checks that these positions can hold `len` tokens for an encoding of one position
    /// per token: a list must have one position per token, never decreasing; coordinates
    /// are refused, naming the encoding.
    ///
    /// # Errors
    /// [`Error::Shape`], saying what is wrong.
    pub fn check(&self, kind: &'static str, len: usize) -> Result<()> {
        if let Self::Coords { axes, .. } = self {
            return Err(Self::not_coords(kind, *axes));
        }
        if let Self::At(list) = self {
            if list.len() != len || list.windows(2).any(|w| w[0] > w[1]) {
                return Err(Error::Shape {
                    kind,
                    msg: format!(
                        "{} positions for {len} tokens: need one per token, never decreasing",
                        list.len()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The refusal of `axes`-D coordinates by encoding `kind`, of one position per token.
    fn not_coords(kind: &'static str, axes: usize) -> Error {
        Error::Shape {
            kind,
            msg: format!("{axes}-D coordinates for its tokens: it reads one position per token"),
        }
    }

    /// Checks that these are coordinates on `axes` axes for `len` tokens, for an encoding
    /// that reads them (`axes` per token).
    ///
    /// # Errors
    /// [`Error::Shape`]: positions of another number of axes, or of too few or many tokens.
    pub fn check_coords(&self, kind: &'static str, len: usize, axes: usize) -> Result<()> {
        let fits = match self {
            Self::Coords { axes: a, coords } => *a == axes && coords.len() == len * axes,
            _ => axes == 1,
        };
        if !fits {
            let given = match self {
                Self::Coords { axes: a, coords } => {
                    format!("{a}-D coordinates ({} values)", coords.len())
                }
                _ => "one position per token".to_string(),
            };
            return Err(Error::Shape {
                kind,
                msg: format!("{given} for {len} tokens: it reads {axes} per token"),
            });
        }
        Ok(())
    }

    /// The `(row, column)` of each of `len` image patches, for encoding `kind` of a grid:
    /// two coordinates a token, or one position a token, a patch of row 0 at that column
    /// (a sequence is one row).
    ///
    /// # Errors
    /// [`Error::Shape`]: coordinates on another number of axes or for another number of
    /// tokens; a list of positions that is not one per token.
    pub fn patches(&self, kind: &'static str, len: usize) -> Result<Vec<(usize, usize)>> {
        let grid = matches!(self, Self::Coords { .. });
        match grid {
            true => self.check_coords(kind, len, 2)?,
            false => self.check(kind, len)?,
        }
        Ok((0..len)
            .map(|p| match grid {
                true => (self.coord(p, 0), self.coord(p, 1)),
                false => (0, self.get(p)),
            })
            .collect())
    }

    /// The coordinates of one image of `rows × columns` patches, row after row, for an
    /// encoding that reads `axes` a token ([`Capabilities::coords`]): `(row, column)` for 2,
    /// `(0, row, column)` for 3 (an image at time 0, as Qwen2-VL places one); empty for one
    /// position a token, whose patches sit in raster order, [`Positions::From`]`(0)`.
    ///
    /// ```
    /// assert_eq!(posenc::Positions::image_coords(2, [2, 2]), [0, 0, 0, 1, 1, 0, 1, 1]);
    /// assert_eq!(posenc::Positions::image_coords(3, [1, 2]), [0, 0, 0, 0, 0, 1]);
    /// ```
    pub fn image_coords(axes: usize, [rows, columns]: [usize; 2]) -> Vec<u32> {
        let cells = (0..rows as u32).flat_map(|y| (0..columns as u32).map(move |x| (y, x)));
        match axes {
            2 => cells.flat_map(|(y, x)| [y, x]).collect(),
            3 => cells.flat_map(|(y, x)| [0, y, x]).collect(),
            _ => Vec::new(),
        }
    }

    /// Rows of `table` (`(n, …)`, `n ≥ self.end(len)`) at these positions: a view for
    /// consecutive positions, a gather (differentiable) for a list. Coordinates are
    /// refused, as [`Positions::check`] (which the encodings call first) refuses them.
    pub(crate) fn select(&self, table: &Tensor, len: usize) -> Result<Tensor> {
        Ok(match self {
            Self::From(offset) | Self::Within { offset, .. } => table.narrow(0, *offset, len)?,
            Self::At(list) => {
                let idx = Tensor::new(*list, table.device())?;
                table.index_select(&idx, 0)?
            }
            Self::Coords { axes, .. } => return Err(Self::not_coords("positions", *axes)),
        })
    }
}

/// Which keys a query may see in the attention the encoding serves. Encodings whose paper
/// uses a different form in each (T5's buckets, ALiBi's distances) take their default
/// from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Every key: an encoder.
    #[default]
    Bidirectional,
    /// Keys at or before the query: a decoder or a causal language model.
    Causal,
}

/// A positional encoding: what it declares, and the hooks a Transformer calls, each the
/// identity by default.
///
/// Implementors override the hooks they need and declare them in
/// [`capabilities`](Self::capabilities). All hooks must be differentiable when their input
/// carries a gradient (`Tensor::track_op`), and may use candle's fused, gradient-less
/// kernels otherwise.
///
/// ```
/// use candle_core::{Device, Tensor};
/// use posenc::{EmbedContext, EncodingConfig, PositionalEncoding};
///
/// # fn main() -> posenc::Result<()> {
/// let enc = EncodingConfig::from_kind("sinusoidal")?.build_untrained(4, 1, &Device::Cpu)?;
/// let x = Tensor::zeros((1, 2, 4), candle_core::DType::F32, &Device::Cpu)?;
/// let pe = enc.embed(&x, &EmbedContext::at(0))?;
/// let row1 = pe.squeeze(0)?.get(1)?.to_vec1::<f32>()?;
/// assert!((row1[0] - 1f32.sin()).abs() < 1e-6 && (row1[1] - 1f32.cos()).abs() < 1e-6);
/// # Ok(()) }
/// ```
pub trait PositionalEncoding: std::fmt::Debug + Send + Sync {
    /// The config name of this encoding (`"sinusoidal"`, `"rope"`, …).
    fn kind(&self) -> &'static str;

    /// What this encoding does and reads, as a value: the model reads it once and picks
    /// its paths from it. Nothing by default.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// `x + PE` for the embeddings `x: (batch, seq, d_model)` of the tokens `cx` places.
    /// Identity by default. An encoding that reads the tokens
    /// ([`Capabilities::reads_tokens`]) is given them in [`EmbedContext::tokens`].
    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> Result<Tensor> {
        let _ = cx;
        Ok(x.clone())
    }

    /// Queries or keys `x: (batch, heads, seq, head_dim)` turned for their positions (an
    /// encoding may treat the two apart: [`RotateContext::role`]). Identity by default.
    fn rotate(&self, x: &Tensor, cx: &RotateContext) -> Result<Tensor> {
        let _ = cx;
        Ok(x.clone())
    }

    /// The bias (f32) added to the scores `QKᵀ/√d_k` of the queries against the keys `cx`
    /// places: `(heads, q_len, k_len)`, or `(batch, heads, q_len, k_len)` for a bias that
    /// differs between the sequences of a batch (one read from the tokens); `None` for none
    /// (the default).
    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        let _ = cx;
        Ok(None)
    }

    /// What the encoding reads from the layer's input ([`FromInput`]); nothing by default.
    /// Two things may be read: a [`Decay`], the log of a gate in (0, 1] per head and token
    /// that fades the keys before it (FoX), and [`Householders`], one transform
    /// `I − βwwᵀ` per token through which a query sees every key before it (PaTH).
    /// Declared by [`Capabilities::reads_input`], and [`Capabilities::transforms`] where
    /// transforms are among them. A key/value cache keeps each key's running sum of gates,
    /// its frame of turned keys and the rows of input a convolution reads, so generation
    /// reads the same as one forward over the whole.
    fn read_input(&self, cx: &InputContext) -> Result<FromInput> {
        let _ = cx;
        Ok(FromInput::default())
    }

    /// A bias read from the attention's own logits, of their shape, or `None` (the
    /// default): for an encoding whose positions depend on content (CoPE counts the keys
    /// whose gates a query opens). Attention forms the logits, and so takes its composite
    /// path, only for an encoding that declares [`Capabilities::reads_scores`].
    fn score_bias(&self, cx: &ScoreContext) -> Result<Option<Tensor>> {
        let _ = cx;
        Ok(None)
    }

    /// What this encoding produces for a sequence of `len` tokens, for inspection,
    /// analysis and plots. Not used by the model. An encoding that gives each layer its
    /// own gives the first layer's here, and every layer's in [`tables`](Self::tables).
    fn table(&self, len: usize) -> Result<Table>;

    /// What this encoding produces for the `len` tokens `at` (`posenc encoding show
    /// --positions`): [`table`](Self::table)'s for positions `0 … len − 1` (the default,
    /// which takes no others), and a kind's own at any positions it reads.
    ///
    /// # Errors
    /// Other positions, where the kind draws its table from 0 only; positions it refuses.
    fn table_at(&self, at: Positions, len: usize) -> Result<Table> {
        match at {
            Positions::From(0) => self.table(len),
            other => Err(Error::Shape {
                kind: self.kind(),
                msg: format!(
                    "its table is drawn at positions 0 … len − 1 only, not at {}",
                    other.describe(len)
                ),
            }),
        }
    }

    /// Every distinct table this encoding produces for `len` tokens: one per entry of a
    /// per-layer pattern ([`crate::layers`]), else just [`table`](Self::table)'s (the
    /// default).
    fn tables(&self, len: usize) -> Result<Vec<Table>> {
        Ok(vec![self.table(len)?])
    }
}

/// What an encoding does and reads, declared once ([`PositionalEncoding::capabilities`]).
///
/// The model picks its paths from these fields, never by running a hook: a cache keeps the
/// token ids for an encoding that reads them, attention forms the logits for one that reads
/// the scores, self-extend regroups only an encoding that rotates and does nothing else.
#[derive(Debug, Clone, Default)]
pub struct Capabilities {
    /// [`embed`](PositionalEncoding::embed) adds to the embeddings.
    pub adds: bool,
    /// [`rotate`](PositionalEncoding::rotate) turns queries and keys.
    pub rotates: bool,
    /// [`bias`](PositionalEncoding::bias) gives a bias.
    pub biases: bool,
    /// The hooks read the token ids ([`Tokens`]): Abacus, position coupling. A key/value
    /// cache then keeps the ids it has run.
    pub reads_tokens: bool,
    /// [`read_input`](PositionalEncoding::read_input) reads the layer's input (FoX, PaTH).
    pub reads_input: bool,
    /// [`score_bias`](PositionalEncoding::score_bias) reads the logits (CoPE, SSMax).
    pub reads_scores: bool,
    /// [`read_input`](PositionalEncoding::read_input) gives [`FromInput::transforms`] that
    /// turn the keys along the sequence (PaTH): attention forms its scores from them.
    pub transforms: bool,
    /// How many rows of the layer's input before the new ones the hooks read
    /// ([`InputContext::before`]): a short convolution's width less one. A cache keeps them.
    pub input_history: usize,
    /// The logits `(heads)` (f32) of each head's sinks ([`crate::sink`]): keys that every
    /// query sees, beside the real ones, whose value is zero, so that the weights on the
    /// real keys add up to less than 1. Empty for none; several weigh as one of logit
    /// `ln Σ e^s` ([`Capabilities::sink`]).
    pub sinks: Vec<Tensor>,
    /// How many keys a query sees, itself included, counting back from it, when the bias
    /// masks the ones further back (a sliding window), or `None`, every one. A hint, never
    /// the mask itself: attention's tiled kernel skips the key tiles wholly past it.
    pub reach: Option<usize>,
    /// The longest sequence the encoding can take, or `None` if its formula holds at every
    /// position: a table of learned rows has an end, and so does a scale that leaves f32's
    /// range.
    pub max_positions: Option<usize>,
    /// How many coordinates a token's position has for the hooks ([`Positions::Coords`]
    /// with this many axes: 3 for `mrope`'s time, row and column), or 0 for one position
    /// per token.
    pub coords: usize,
    /// The largest grid of patches its coordinates may span, `[rows, columns]`, where it has
    /// one (a learned table that may not resample), or `None`, any: what a task checks its
    /// test grids against before it trains.
    pub max_grid: Option<[usize; 2]>,
    /// A per-layer pattern: layer `i` of a stack uses entry `i mod n` instead of this
    /// encoding ([`crate::for_layer`]); empty when every layer uses this one. The other
    /// fields then describe the pattern as a whole.
    pub per_layer: Vec<Arc<dyn PositionalEncoding>>,
}

impl Capabilities {
    /// What several encodings acting together declare: they add, rotate, bias and read
    /// what any of them does; they reach as far as the narrowest and end where the
    /// shortest does; their sinks are all of theirs. The per-layer pattern is left empty.
    pub fn all<'a>(of: impl IntoIterator<Item = &'a Capabilities>) -> Capabilities {
        let mut all = Capabilities::default();
        for c in of {
            all.adds |= c.adds;
            all.rotates |= c.rotates;
            all.biases |= c.biases;
            all.reads_tokens |= c.reads_tokens;
            all.reads_input |= c.reads_input;
            all.reads_scores |= c.reads_scores;
            all.transforms |= c.transforms;
            all.input_history = all.input_history.max(c.input_history);
            all.coords = all.coords.max(c.coords);
            all.sinks.extend(c.sinks.iter().cloned());
            all.reach = min_some(all.reach, c.reach);
            all.max_positions = min_some(all.max_positions, c.max_positions);
            all.max_grid = match (all.max_grid, c.max_grid) {
                (Some(a), Some(b)) => Some([a[0].min(b[0]), a[1].min(b[1])]),
                (a, b) => a.or(b),
            };
        }
        all
    }

    /// The sinks as one logit per head, `ln Σ e^s` over them (two keys of value zero with
    /// logits `a` and `b` weigh as one of logit `ln(e^a + e^b)`), or `None` for none.
    ///
    /// # Errors
    /// Sinks of different numbers of heads.
    pub fn sink(&self) -> Result<Option<Tensor>> {
        let mut total: Option<Tensor> = None;
        for s in &self.sinks {
            total = Some(match total {
                Some(t) => Tensor::stack(&[&t, s], 0)?.log_sum_exp(0)?,
                None => s.clone(),
            });
        }
        Ok(total)
    }

    /// Whether attention needs the scores whole, and so its composite path: the encoding
    /// reads them, forms them from its transforms, or gives each head a sink.
    pub fn whole_scores(&self) -> bool {
        self.reads_scores || self.transforms || !self.sinks.is_empty()
    }
}

/// The smaller of two bounds, where either is set.
fn min_some(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Where the embedded tokens sit, and which they are ([`PositionalEncoding::embed`]).
#[derive(Debug, Clone, Copy)]
pub struct EmbedContext<'a> {
    /// The tokens' positions.
    pub at: Positions<'a>,
    /// The token ids, where the model has them (it always does for an encoding that
    /// [reads them](Capabilities::reads_tokens)).
    pub tokens: Option<Tokens<'a>>,
}

impl<'a> EmbedContext<'a> {
    /// Tokens at `at`, their ids not given.
    pub fn at(at: impl Into<Positions<'a>>) -> Self {
        Self {
            at: at.into(),
            tokens: None,
        }
    }

    /// The same context with the token ids.
    pub fn with_tokens(self, tokens: Tokens<'a>) -> Self {
        Self {
            tokens: Some(tokens),
            ..self
        }
    }
}

/// Whether projected vectors are queries or keys: an encoding may turn them apart (xPos
/// scales them by inverse factors, PoPE shifts the keys' phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Queries.
    Query,
    /// Keys.
    Key,
}

/// Where the turned vectors sit, and what they are ([`PositionalEncoding::rotate`]).
#[derive(Debug, Clone, Copy)]
pub struct RotateContext<'a> {
    /// The vectors' positions.
    pub at: Positions<'a>,
    /// Queries or keys.
    pub role: Role,
}

impl<'a> RotateContext<'a> {
    /// Queries at `at`.
    pub fn query(at: impl Into<Positions<'a>>) -> Self {
        Self {
            at: at.into(),
            role: Role::Query,
        }
    }

    /// Keys at `at`.
    pub fn key(at: impl Into<Positions<'a>>) -> Self {
        Self {
            at: at.into(),
            role: Role::Key,
        }
    }
}

/// The queries and keys whose scores a bias is asked for ([`PositionalEncoding::bias`]).
#[derive(Debug, Clone, Copy)]
pub struct BiasContext<'a> {
    /// How many queries.
    pub q_len: usize,
    /// How many keys.
    pub k_len: usize,
    /// The queries' positions.
    pub q: Positions<'a>,
    /// The keys' positions.
    pub k: Positions<'a>,
    /// In self-attention, the ids of the `k_len` tokens ([`Tokens::before`] and
    /// [`Tokens::ids`]), whose last `q_len` are the queries; `None` where the model does
    /// not hold them (it does wherever an encoding [reads them](Capabilities::reads_tokens)).
    pub tokens: Option<Tokens<'a>>,
}

impl<'a> BiasContext<'a> {
    /// `q_len` queries at `q` against `k_len` keys at `k`, their ids not given.
    pub fn new(
        q_len: usize,
        k_len: usize,
        q: impl Into<Positions<'a>>,
        k: impl Into<Positions<'a>>,
    ) -> Self {
        Self {
            q_len,
            k_len,
            q: q.into(),
            k: k.into(),
            tokens: None,
        }
    }

    /// A sequence of `len` tokens at `at` against itself.
    pub fn square(len: usize, at: impl Into<Positions<'a>>) -> Self {
        let at = at.into();
        Self::new(len, len, at, at)
    }

    /// The same context with the token ids, where there are any.
    pub fn with_tokens(self, tokens: Option<Tokens<'a>>) -> Self {
        Self { tokens, ..self }
    }
}

/// The layer's input a decay or a path of transforms is read from
/// ([`PositionalEncoding::read_input`]).
#[derive(Debug, Clone, Copy)]
pub struct InputContext<'a> {
    /// The attention's input `(batch, seq, d_model)`, after the layer's norm where it has one.
    pub input: &'a Tensor,
    /// The rows of the input just before these, `(batch, earlier, d_model)`, at most
    /// [`Capabilities::input_history`] of them (a cache keeps them), or `None` where `input`
    /// starts its sequences: what a short convolution over the input reads.
    pub before: Option<&'a Tensor>,
}

impl<'a> InputContext<'a> {
    /// An input that starts its sequences.
    pub fn new(input: &'a Tensor) -> Self {
        Self {
            input,
            before: None,
        }
    }
}

/// The attention's own contents a bias is read from ([`PositionalEncoding::score_bias`]).
#[derive(Debug, Clone, Copy)]
pub struct ScoreContext<'a> {
    /// The queries `(batch, heads, q_len, head_dim)`.
    pub q: &'a Tensor,
    /// The logits `(batch, heads, q_len, k_len)`: the scaled scores plus any position
    /// bias, masked keys at the most negative f32.
    pub logits: &'a Tensor,
}

/// The token ids an encoding that [reads them](Capabilities::reads_tokens) is given.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    /// The ids `(batch, seq)` of the embeddings, any integer dtype.
    pub ids: &'a Tensor,
    /// The ids `(batch, earlier)` that come before them in their sequences (a cache keeps
    /// them), or `None` where `ids` start their sequences.
    pub before: Option<&'a Tensor>,
}

impl<'a> Tokens<'a> {
    /// Ids that start their sequences.
    pub fn new(ids: &'a Tensor) -> Self {
        Self { ids, before: None }
    }
}

/// What an encoding reads from the layer's input ([`PositionalEncoding::read_input`]).
#[derive(Debug, Clone, Default)]
pub struct FromInput {
    /// Log-gates summed between query and key, or `None`.
    pub decay: Option<Decay>,
    /// Transforms that turn the keys along the sequence, or `None`.
    pub transforms: Option<Householders>,
}

impl FromInput {
    /// What two encodings acting together read: their decays add (gates multiply); at most
    /// one of them may turn the keys, since two paths of transforms do not compose into one.
    ///
    /// # Errors
    /// Two sets of transforms; decays that do not add ([`Decay::add`]).
    pub fn and(self, other: FromInput) -> Result<FromInput> {
        let decay = match (self.decay, other.decay) {
            (Some(a), Some(b)) => Some(a.add(&b)?),
            (a, b) => a.or(b),
        };
        let transforms = match (self.transforms, other.transforms) {
            (Some(_), Some(_)) => return Err(Error::Config(
                "a stack holds at most one encoding that turns keys along the sequence (`path`)"
                    .into(),
            )),
            (a, b) => a.or(b),
        };
        Ok(FromInput { decay, transforms })
    }
}

/// The log-gates an encoding reads from the layer's input
/// ([`PositionalEncoding::read_input`]), `(batch, heads, seq)` each, f32, every entry ≤ 0.
///
/// Query `i`'s score on key `j ≤ i` gains the logs of the gates of the tokens after the key
/// up to the query, `Σ_{l=j+1..i} g_l`; in bidirectional attention a second set of gates
/// does the same for keys after the query.
#[derive(Debug, Clone)]
pub struct Decay {
    /// How much each token lets the keys before it fade: `ln f_l`, summed over the tokens
    /// `j < l ≤ i` between key `j` and query `i`.
    pub before: Tensor,
    /// For bidirectional attention, how much each token lets the keys after it fade, summed
    /// over the tokens `i < l ≤ j` between query `i` and key `j`; `None` in causal
    /// attention.
    pub after: Option<Tensor>,
}

impl Decay {
    /// The sum of two decays (a stack of two encodings that decay): gates multiply.
    ///
    /// # Errors
    /// Gates of different shapes, or one bidirectional and one not.
    pub fn add(&self, other: &Decay) -> Result<Decay> {
        let after = match (&self.after, &other.after) {
            (Some(a), Some(b)) => Some((a + b)?),
            (None, None) => None,
            _ => {
                return Err(Error::Config(
                    "two decays in one stack must both be causal or both bidirectional".into(),
                ))
            }
        };
        Ok(Decay {
            before: (&self.before + &other.before)?,
            after,
        })
    }

    /// The bias `(batch, heads, seq, seq)` (f32) the gates put on the scores of a sequence
    /// against itself, from the running sums `c_i = Σ_{l ≤ i} g_l` (and `r` of the gates
    /// after):
    ///
    /// ```text
    /// D_ij = c_i − c_j = Σ_{l=j+1..i} g_l        for j ≤ i
    /// D_ij = r_j − r_i = Σ_{l=i+1..j} g'_l       for j > i (bidirectional; else c_i − c_j, masked)
    /// ```
    ///
    /// as x-transformers' `DataDependentAlibi` forms it.
    ///
    /// # Errors
    /// Gates that are not `(batch, heads, seq)`.
    pub fn bias(&self) -> Result<Tensor> {
        let c = Self::running_sums(&self.before)?;
        let forward = Self::between(&c, &c)?;
        let Some(after) = &self.after else {
            return Ok(forward);
        };
        let r = Self::running_sums(after)?;
        let backward = Self::between(&r, &r)?.neg()?;
        let n = c.dim(2)?;
        // tril(forward) + triu(backward): the diagonal is 0 in both.
        let lower = Tensor::tril2(n, c.dtype(), c.device())?;
        let upper = (Tensor::ones((n, n), c.dtype(), c.device())? - &lower)?;
        Ok((forward.broadcast_mul(&lower)? + backward.broadcast_mul(&upper)?)?)
    }

    /// The running sums of `gates` along their last axis, `c_i = Σ_{l ≤ i} g_l`, of the same
    /// shape, differentiable.
    ///
    /// candle's `cumsum` multiplies by an `n × n` triangle, which at 32 768 tokens is 4 GB;
    /// this one sums blocks of [`Decay::BLOCK`] that way, then the blocks' totals, so its
    /// memory and work grow linearly with `n`.
    ///
    /// # Errors
    /// A tensor of rank 0.
    pub fn running_sums(gates: &Tensor) -> Result<Tensor> {
        let dims = gates.dims().to_vec();
        let Some((&n, outer)) = dims.split_last() else {
            return Err(Error::Config("running sums of a scalar".into()));
        };
        if n <= Self::BLOCK {
            return Ok(gates.cumsum(dims.len() - 1)?);
        }
        let blocks = n.div_ceil(Self::BLOCK);
        let padded = gates.pad_with_zeros(dims.len() - 1, 0, blocks * Self::BLOCK - n)?;
        let mut shape = outer.to_vec();
        shape.extend([blocks, Self::BLOCK]);
        let within = padded.reshape(shape.as_slice())?.cumsum(shape.len() - 1)?;
        let totals = within
            .narrow(shape.len() - 1, Self::BLOCK - 1, 1)?
            .squeeze(shape.len() - 1)?;
        // Each block starts from the totals of the blocks before it.
        let before = (Self::running_sums(&totals)? - &totals)?;
        let sums = within.broadcast_add(&before.unsqueeze(shape.len() - 1)?)?;
        Ok(sums.reshape(padded.shape())?.narrow(dims.len() - 1, 0, n)?)
    }

    /// The block of [`Decay::running_sums`].
    pub const BLOCK: usize = 64;

    /// `a_i − b_j`, `(batch, heads, i, j)`, of running sums `a (batch, heads, i)` and
    /// `b (batch, heads, j)`: the causal decay bias of queries whose sums are `a` against
    /// keys whose sums are `b` (a cache keeps the keys' sums).
    ///
    /// # Errors
    /// Sums that are not `(batch, heads, len)`, or whose batch or heads differ.
    pub fn between(a: &Tensor, b: &Tensor) -> Result<Tensor> {
        Ok(a.unsqueeze(3)?.broadcast_sub(&b.unsqueeze(2)?)?)
    }
}

/// How the two members of each (sin, cos) or rotation pair are laid out in a vector of width `d`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum PairLayout {
    /// Pair `i` occupies dimensions `(i, i + d/2)`: tensor2tensor, Marian, Llama/GPT-NeoX rotary.
    #[default]
    Halves,
    /// Pair `i` occupies dimensions `(2i, 2i + 1)`: the paper's formula, GPT-J/RoFormer rotary.
    Interleaved,
}

/// What an encoding produces for one sequence, in the form it acts in, with what a reader
/// needs to show it: every command prints and plots a table without asking which encoding
/// made it. All tensors are f32.
#[derive(Debug, Clone)]
pub struct Table {
    /// What the values are, in the documents' notation (`PE(pos, i)`, `bias(query, key)`).
    pub title: String,
    /// The values, in the form of the hook that uses them.
    pub form: Form,
}

/// The values of a [`Table`], by the hook that uses them.
#[derive(Debug, Clone)]
pub enum Form {
    /// The `(len, d_model)` matrix added to the embeddings.
    Additive {
        /// `PE(pos, i)`.
        values: Tensor,
        /// The columns that form (sin, cos) pairs turning together, `(sin, cos)`; empty
        /// when the encoding has no such pairs.
        pairs: Vec<(usize, usize)>,
    },
    /// Rotary angles: `cos` and `sin`, each `(len, rotary_dim / 2)`.
    Rotary {
        /// `cos(pos · θ_i)`.
        cos: Tensor,
        /// `sin(pos · θ_i)`.
        sin: Tensor,
    },
    /// A `(heads, len, len)` bias added to the attention scores.
    Bias {
        /// `bias(query, key)` per head.
        bias: Tensor,
        /// When the bias is looked up in a learned table (T5): the index it looks up with.
        index: Option<Index>,
    },
}

/// The `(len, len)` u32 index of each query/key pair into a table of learned biases.
#[derive(Debug, Clone)]
pub struct Index {
    /// What the index is called (`bucket`).
    pub name: String,
    /// The index of each (query, key) pair.
    pub values: Tensor,
}

impl Table {
    /// A table of the `(heads, len, len)` bias added to the attention scores.
    pub fn bias(title: impl Into<String>, bias: Tensor) -> Self {
        Self {
            title: title.into(),
            form: Form::Bias { bias, index: None },
        }
    }

    /// A table of `(len, d_model)` vectors added to the embeddings.
    pub fn additive(title: impl Into<String>, values: Tensor, pairs: Vec<(usize, usize)>) -> Self {
        Self {
            title: title.into(),
            form: Form::Additive { values, pairs },
        }
    }
}

/// An error naming the first of the `len` positions `at` at or past `max_positions`, the
/// end of encoding `kind`, if any is.
pub(crate) fn check_end(
    kind: &'static str,
    at: Positions,
    len: usize,
    max_positions: usize,
) -> Result<()> {
    if at.end(len) <= max_positions {
        return Ok(());
    }
    let first = (0..len).map(|i| at.get(i)).find(|&p| p >= max_positions);
    Err(Error::PositionOutOfRange {
        kind,
        position: first.unwrap_or(max_positions),
        max_positions,
    })
}

/// The `(q_len, k_len)` f32 distances of `q_len` queries at `q` from `k_len` keys at `k`:
/// `|i − j|`, or `max(i − j, 0)` for causal attention, where later keys are masked anyway.
pub(crate) fn distances(
    direction: Direction,
    q_len: usize,
    k_len: usize,
    q: Positions,
    k: Positions,
    device: &Device,
) -> Result<Tensor> {
    let mut d = Vec::with_capacity(q_len * k_len);
    for qi in 0..q_len {
        let i = q.get(qi) as f64;
        for kj in 0..k_len {
            let j = k.get(kj) as f64;
            d.push(match direction {
                Direction::Bidirectional => (i - j).abs(),
                Direction::Causal => (i - j).max(0.0),
            } as f32);
        }
    }
    Ok(Tensor::from_vec(d, (q_len, k_len), device)?)
}

/// Checks a rule of an encoding's settings: `Ok` if `holds`, else a config error naming
/// the kind and saying what is needed and what came (`"base > 1, got 0.5"`).
pub(crate) fn require(kind: &str, holds: bool, needed: impl fmt::Display) -> Result<()> {
    if holds {
        Ok(())
    } else {
        Err(Error::Config(format!("`{kind}` needs {needed}")))
    }
}

/// The wavelength base of sinusoidal and rotary encodings must be finite and above 1.
pub(crate) fn check_base(kind: &str, base: f64) -> Result<()> {
    require(
        kind,
        base.is_finite() && base > 1.0,
        format!("base > 1, got {base}"),
    )
}

/// A width that pairs dimensions (sin/cos, rotation planes) must be even and positive.
pub(crate) fn check_even(kind: &'static str, dim: usize, what: &'static str) -> Result<()> {
    if dim == 0 {
        return Err(Error::Zero { kind, what });
    }
    if !dim.is_multiple_of(2) {
        return Err(Error::OddDimension { kind, dim, what });
    }
    Ok(())
}

/// Checks that `x` is `(batch, seq, width)` and returns `seq`.
pub(crate) fn check_embeddings(kind: &'static str, x: &Tensor, width: usize) -> Result<usize> {
    match x.dims() {
        &[_, seq, w] if w == width => Ok(seq),
        dims => Err(Error::Shape {
            kind,
            msg: format!("expected embeddings of shape (batch, seq, {width}), got {dims:?}"),
        }),
    }
}

/// Adds a `(seq, d)` f32 table to `x: (batch, seq, d)`, cast to `x`'s dtype after computing.
pub(crate) fn add_table(x: &Tensor, table: &Tensor) -> Result<Tensor> {
    Ok(x.broadcast_add(&table.to_dtype(x.dtype())?.unsqueeze(0)?)?)
}

/// A `(rows, cols)` f32 tensor from a row-major generator computed in f64.
pub(crate) fn tensor_from_fn(
    rows: usize,
    cols: usize,
    device: &Device,
    f: impl Fn(usize, usize) -> f64,
) -> Result<Tensor> {
    let data: Vec<f32> = (0..rows * cols)
        .map(|i| f(i / cols, i % cols) as f32)
        .collect();
    Ok(Tensor::from_vec(data, (rows, cols), device)?)
}

/// Inverse frequencies `θ_i = base^(−2i/dim)` for `i = 0 … dim/2 − 1`, shared by the
/// sinusoidal and rotary encodings (Vaswani et al. 2017 §3.5; Su et al. 2021 eq. 15).
pub fn inverse_frequencies(dim: usize, base: f64) -> Vec<f64> {
    (0..dim / 2)
        .map(|i| base.powf(-((2 * i) as f64) / dim as f64))
        .collect()
}
