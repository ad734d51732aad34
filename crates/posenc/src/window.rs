//! `window`: sliding-window attention, as a bias on the scores.
//!
//! A query sees only the keys within `size` positions of it: the `size` most recent ones
//! (itself included) in causal attention, those less than `size` away on either side in
//! bidirectional attention. The keys further away take a bias of `f32::MIN / 2`, far below
//! any score yet finite, so that a key masked twice (by the window and by causality or
//! padding) is still a finite number and no row is ever masked whole (a query always sees
//! itself). Mistral's and Gemma's local layers work this way.
//!
//! With `chunked`, the windows do not slide: the sequence is cut into chunks of `size`
//! positions from position 0, and a query sees only the keys of its own chunk (causally,
//! those up to it), as Llama 4's layers that rotate do (`attention_chunk_size`, transformers'
//! `chunked_overlay`: key `j` and query `i` attend when `j / size = i / size`).
//!
//! It carries no position of its own. Beside one (`stack`) and in a per-layer pattern
//! (`layers`) it gives the hybrids of 2025:
//!
//! ```text
//! RoPE in a window of 64:                      {"kind": "stack", "of": ["rope", {"kind": "window", "size": 64}]}
//! RNoPE-SWA (Yang et al. 2025, Cohere):        {"kind": "layers", "pattern": [
//!     {"kind": "stack", "of": ["rope", {"kind": "window", "size": 64}]},
//!     {"kind": "stack", "of": ["rope", {"kind": "window", "size": 64}]},
//!     {"kind": "stack", "of": ["rope", {"kind": "window", "size": 64}]},
//!     "none"]}
//! ```

use std::sync::Arc;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cache::GeometryCache;
use crate::encoding::{require, PositionalEncoding, Table};
use crate::{BiasContext, Capabilities};
use crate::{Direction, EncodingSpec, Positions, Result, Target};

/// The bias of a key outside the window: far below any score, and finite.
pub const OUTSIDE: f32 = f32::MIN / 2.0;

/// The settings of `window`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// How many positions a query sees: itself and the `size − 1` before it (causal), or
    /// those less than `size` away (bidirectional).
    #[serde(default = "WindowConfig::default_size")]
    pub size: usize,
    /// Chunks of `size` positions from position 0 instead of a sliding window: a query
    /// sees the keys of its own chunk alone (Llama 4's chunked attention).
    #[serde(default)]
    pub chunked: bool,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            size: Self::default_size(),
            chunked: false,
        }
    }
}

impl WindowConfig {
    fn default_size() -> usize {
        16
    }
}

impl EncodingSpec for WindowConfig {
    const KIND: &'static str = "window";

    fn build(&self, target: &Target, vb: VarBuilder) -> Result<Arc<dyn PositionalEncoding>> {
        require(
            Self::KIND,
            self.size >= 1,
            "a window of at least 1 position (the query itself), got 0",
        )?;
        crate::limits::check("size", self.size, crate::limits::MAX_POSITIONS)?;
        Ok(Arc::new(Window {
            size: self.size,
            chunked: self.chunked,
            heads: target.heads,
            direction: target.direction,
            device: vb.device().clone(),
            cache: GeometryCache::default(),
        }))
    }
}

/// Keys past the window masked by a bias.
#[derive(Debug)]
pub struct Window {
    size: usize,
    chunked: bool,
    heads: usize,
    direction: Direction,
    device: Device,
    cache: GeometryCache,
}

impl Window {
    /// Whether a key at `j` is outside the window of a query at `i`.
    fn outside(&self, i: usize, j: usize) -> bool {
        if self.chunked {
            return i / self.size != j / self.size;
        }
        let apart = match self.direction {
            Direction::Causal => i.saturating_sub(j),
            Direction::Bidirectional => i.abs_diff(j),
        };
        apart >= self.size
    }

    /// The bias of `q_len` queries at `q` against `k_len` keys at `k`, `masked` where a key
    /// is outside the window.
    fn compute(
        &self,
        (q_len, k_len): (usize, usize),
        (q, k): (Positions, Positions),
        masked: f32,
    ) -> Result<Tensor> {
        let mut row = Vec::with_capacity(q_len * k_len);
        for qi in 0..q_len {
            let i = q.get(qi);
            for kj in 0..k_len {
                row.push(match self.outside(i, k.get(kj)) {
                    true => masked,
                    false => 0.0,
                });
            }
        }
        let one = Tensor::from_vec(row, (1, q_len, k_len), &self.device)?;
        Ok(one.repeat((self.heads, 1, 1))?)
    }
}

impl PositionalEncoding for Window {
    fn kind(&self) -> &'static str {
        WindowConfig::KIND
    }

    /// The window: keys `size` or more positions back are masked (in chunks, some nearer
    /// ones too).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            biases: true,
            reach: Some(self.size),
            ..Capabilities::default()
        }
    }

    fn bias(&self, cx: &BiasContext) -> Result<Option<Tensor>> {
        let (lens, at) = ((cx.q_len, cx.k_len), (cx.q, cx.k));
        let bias = self.cache.get(WindowConfig::KIND, lens, at, || {
            self.compute(lens, at, OUTSIDE)
        })?;
        Ok(Some(bias))
    }

    /// The window for inspection: −∞ (drawn as a cell with no value) where the model's
    /// bias is `f32::MIN / 2`, so tables and figures show the mask rather than its number.
    fn table(&self, len: usize) -> Result<Table> {
        let bias = self.compute((len, len), (0.into(), 0.into()), f32::NEG_INFINITY)?;
        let what = match self.chunked {
            true => format!(
                "0 in the query's chunk of {} positions, −inf outside it (masked)",
                self.size
            ),
            false => format!(
                "0 within {} positions of the query, −inf past them (masked)",
                self.size
            ),
        };
        Ok(Table::bias(what, bias))
    }
}
