//! `abacus`: each digit embedded by its place within its number (McLeish et al. 2024,
//! "Transformers Can Do Arithmetic with the Right Embeddings").
//!
//! ```text
//! place(t) = 1 + place(t − 1)   if token t is a digit (place(−1) = 0)
//!          = 0                  otherwise
//! PE(t, ·) = W[place(t) + k · [place(t) > 0], ·],   W ∈ R^(rows × d_model), learned
//! ```
//!
//! With numbers written least significant digit first, a digit's place is its
//! significance, so the digits of one place in both operands and in the sum share a
//! vector, and attention can find a place's operands by content, at any length. While
//! training, every digit's place is shifted by one offset `k`, drawn uniformly from
//! `0..=max_offset` for each batch ([`crate::draws`]), so the rows past the trained lengths
//! are trained too; at inference `k = 0`. The paper draws `k` up to 99 and trains on 20
//! digits; its repository's `Abacus` module is the reference
//! (`scripts/make_abacus_fixtures.py` checks this file against that definition).
//!
//! The places are read from the tokens ([`crate::Capabilities::reads_tokens`]), so its
//! [`embed`](PositionalEncoding::embed) refuses to act without them. The
//! attention's own positions are left to another encoding (`none` in the paper's best
//! runs, or a stack such as `["abacus", "fire"]`).

use std::sync::Arc;

use candle_core::{DType, Tensor};
use candle_nn::{Embedding, VarBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::encoding::{check_embeddings, check_end, PositionalEncoding, Table, Tokens};
use crate::{Capabilities, EmbedContext};
use crate::{EncodingSpec, Error, Positions, Result, Target};

/// The settings of `abacus`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AbacusConfig {
    /// The digits' token ids, `[first, last]`, inclusive (default `[4, 13]`, the digits of
    /// `posenc lengthgen`'s vocabulary).
    #[serde(default = "AbacusConfig::default_digits")]
    pub digits: [u32; 2],
    /// The largest offset drawn while training (the paper's `max_k`, default 100).
    #[serde(default = "AbacusConfig::default_max_offset")]
    pub max_offset: usize,
    /// Rows in the table: places `0..rows` (default 256). Training reaches
    /// `max_offset` + the longest number trained on.
    #[serde(default = "AbacusConfig::default_rows")]
    pub rows: usize,
}

impl AbacusConfig {
    fn default_digits() -> [u32; 2] {
        [4, 13]
    }
    fn default_max_offset() -> usize {
        100
    }
    fn default_rows() -> usize {
        256
    }
}

impl EncodingSpec for AbacusConfig {
    const KIND: &'static str = "abacus";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        Ok(Arc::new(Abacus::new(self, target.d_model, vb)?))
    }

    fn parameter_count(&self, target: &Target) -> u128 {
        self.rows as u128 * target.d_model as u128
    }
}

/// Abacus embeddings; the weight is `weight: (rows, d_model)` under the given
/// [`VarBuilder`].
#[derive(Debug, Clone)]
pub struct Abacus {
    embedding: Embedding,
    digits: [u32; 2],
    max_offset: usize,
    rows: usize,
    d_model: usize,
    /// Whether the offset moves every token's row, not the digits' only: position
    /// coupling ([`crate::coupling`]), whose operators sit beside the units.
    shift_all: bool,
    kind: &'static str,
}

impl Abacus {
    /// Loads or creates the `(rows, d_model)` table.
    ///
    /// # Errors
    /// A zero `rows` or `d_model`; digits whose first id is past their last; a
    /// `max_offset` that leaves no row for a digit (`max_offset + 1 ≥ rows`).
    pub fn new(cfg: &AbacusConfig, d_model: usize, vb: VarBuilder) -> Result<Self> {
        Self::build(cfg, d_model, vb, false, AbacusConfig::KIND)
    }

    /// The table of `cfg`, its offset moving every token's row where `shift_all`
    /// ([`crate::coupling`]), known as `kind`.
    pub(crate) fn build(
        cfg: &AbacusConfig,
        d_model: usize,
        vb: VarBuilder,
        shift_all: bool,
        kind: &'static str,
    ) -> Result<Self> {
        for (value, what) in [(cfg.rows, "rows"), (d_model, "d_model")] {
            if value == 0 {
                return Err(Error::Zero { kind, what });
            }
        }
        crate::limits::check("rows", cfg.rows, crate::limits::MAX_POSITIONS)?;
        let [first, last] = cfg.digits;
        if first > last {
            return Err(Error::Config(format!(
                "{kind} digits [{first}, {last}]: the first id is past the last"
            )));
        }
        if cfg.max_offset + 1 >= cfg.rows {
            return Err(Error::Config(format!(
                "{kind} max_offset {} leaves no room in its {} rows: a one-digit number \
                 shifted by it needs row {}",
                cfg.max_offset,
                cfg.rows,
                cfg.max_offset + 1
            )));
        }
        Ok(Self {
            embedding: candle_nn::embedding(cfg.rows, d_model, vb)?,
            digits: cfg.digits,
            max_offset: cfg.max_offset,
            rows: cfg.rows,
            d_model,
            shift_all,
            kind,
        })
    }

    /// The learned table `(rows, d_model)`.
    pub fn weight(&self) -> &Tensor {
        self.embedding.embeddings()
    }

    /// The place of every token of `tokens`, row by row, `(batch, seq)` flattened: a digit
    /// is one past the token before it (counting the digits that end `tokens.before`),
    /// anything else 0.
    ///
    /// # Errors
    /// Ids that are not `(batch, seq)`, or whose batch differs from those before them.
    pub fn places(&self, tokens: Tokens) -> Result<Vec<u32>> {
        places(self.kind, self.digits, tokens)
    }
}

/// The place of every token of `tokens`, row by row, `(batch, seq)` flattened: a digit (an
/// id in `digits`, inclusive) is one past the token before it (counting the digits that
/// end `tokens.before`), anything else 0. `kind` names the encoding in errors.
pub(crate) fn places(kind: &'static str, digits: [u32; 2], tokens: Tokens) -> Result<Vec<u32>> {
    let is_digit = |id: u32| (digits[0]..=digits[1]).contains(&id);
    let rows = |t: &Tensor| -> Result<Vec<Vec<u32>>> {
        if t.rank() != 2 {
            return Err(Error::Shape {
                kind,
                msg: format!("token ids must be (batch, seq), got {:?}", t.dims()),
            });
        }
        Ok(t.to_dtype(DType::U32)?.to_vec2::<u32>()?)
    };
    let ids = rows(tokens.ids)?;
    let before = match tokens.before {
        Some(b) => rows(b)?,
        None => vec![Vec::new(); ids.len()],
    };
    if before.len() != ids.len() {
        return Err(Error::Shape {
            kind,
            msg: format!(
                "{} sequences of ids after {} sequences of earlier ones",
                ids.len(),
                before.len()
            ),
        });
    }
    let mut places = Vec::with_capacity(ids.len() * ids.first().map_or(0, Vec::len));
    for (row, earlier) in ids.iter().zip(&before) {
        let mut run = earlier.iter().rev().take_while(|&&id| is_digit(id)).count() as u32;
        for &id in row {
            run = if is_digit(id) { run + 1 } else { 0 };
            places.push(run);
        }
    }
    Ok(places)
}

impl PositionalEncoding for Abacus {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            adds: true,
            reads_tokens: true,
            ..Capabilities::default()
        }
    }

    /// `x + W[place + k]`, with `k` drawn while training ([`crate::draws`]) and 0
    /// otherwise, added to the digits' places (and, coupled, to every token's).
    ///
    /// # Errors
    /// No tokens: without them there are no places.
    fn embed(&self, x: &Tensor, cx: &EmbedContext) -> Result<Tensor> {
        let Some(tokens) = cx.tokens else {
            return Err(Error::Config(format!(
                "{} reads each digit's place from the tokens: it acts only where it is given them",
                self.kind
            )));
        };
        let seq = check_embeddings(self.kind, x, self.d_model)?;
        let batch = x.dim(0)?;
        if tokens.ids.dims() != [batch, seq] {
            return Err(Error::Shape {
                kind: self.kind,
                msg: format!(
                    "ids {:?} for embeddings {:?}: need one id per embedding",
                    tokens.ids.dims(),
                    x.dims()
                ),
            });
        }
        let mut places = self.places(tokens)?;
        let k = match x.track_op() && self.max_offset > 0 {
            true => crate::draws::up_to(self.max_offset) as u32,
            false => 0,
        };
        for p in places.iter_mut().filter(|p| self.shift_all || **p > 0) {
            *p += k;
        }
        if let Some(&far) = places.iter().max().filter(|&&p| p as usize >= self.rows) {
            return Err(Error::Config(format!(
                "a run of digits reaches place {far} (offset {k} included), past the {} \
                 table's {} rows: raise `rows`",
                self.kind, self.rows
            )));
        }
        let idx = Tensor::from_vec(places, batch * seq, x.device())?;
        let rows = self.weight().index_select(&idx, 0)?;
        let rows = rows.reshape((batch, seq, self.d_model))?;
        Ok(x.broadcast_add(&rows.to_dtype(x.dtype())?)?)
    }

    /// The rows of places `0, 1, …, len − 1`: what a run of `len − 1` digits after one other
    /// token is given.
    fn table(&self, len: usize) -> Result<Table> {
        check_end(self.kind, Positions::From(0), len, self.rows)?;
        let values = self.weight().narrow(0, 0, len)?.to_dtype(DType::F32)?;
        Ok(Table::additive(
            "PE(place, i) = W[place, i], learned (place: a digit's within its number)",
            values,
            Vec::new(),
        ))
    }
}
