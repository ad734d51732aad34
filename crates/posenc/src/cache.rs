//! Position tables that grow on demand: no hard maximum length.

use std::sync::RwLock;

use candle_core::Tensor;

use crate::{Positions, Result};

/// Rows `0..capacity` of one or more per-position tables, rebuilt larger when a longer
/// sequence asks. Reads share the lock; only growth takes it exclusively.
#[derive(Debug, Default)]
pub(crate) struct GrowingTables {
    tables: RwLock<Vec<Tensor>>,
}

impl GrowingTables {
    /// The rows at `at` (`len` of them) of every table, building rows `0..n` with
    /// `build(n)` first if the cached tables are too short.
    pub(crate) fn rows(
        &self,
        at: Positions,
        len: usize,
        build: impl Fn(usize) -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        let end = at.end(len);
        let narrow = |tables: &[Tensor]| -> Result<Vec<Tensor>> {
            tables.iter().map(|t| at.select(t, len)).collect()
        };
        {
            let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
            if tables.first().is_some_and(|t| t.dim(0).unwrap_or(0) >= end) {
                return narrow(&tables);
            }
        }
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        if tables.first().is_none_or(|t| t.dim(0).unwrap_or(0) < end) {
            *tables = build(end.next_power_of_two().max(64))?;
        }
        narrow(&tables)
    }
}

/// The last few tensors computed for a `(q_len, k_len, q_offset, k_offset)` geometry of
/// consecutive positions: position biases and bucket indices depend on nothing else, and a
/// model asks for the same few shapes over and over. (Listed positions, drawn afresh for
/// every batch, are computed each time.)
#[derive(Debug, Default)]
pub(crate) struct GeometryCache {
    entries: std::sync::Mutex<Vec<(Geometry, Tensor)>>,
}

/// `(q_len, k_len, q_offset, k_offset)`.
pub(crate) type Geometry = (usize, usize, usize, usize);

impl GeometryCache {
    /// How many geometries are kept; the oldest goes first.
    const CAPACITY: usize = 16;

    /// The tensor of `q_len` queries at `q` against `k_len` keys at `k`, computed by
    /// `build` the first time a geometry of consecutive positions is asked for.
    pub(crate) fn get(
        &self,
        kind: &'static str,
        (q_len, k_len): (usize, usize),
        (q, k): (Positions, Positions),
        build: impl FnOnce() -> Result<Tensor>,
    ) -> Result<Tensor> {
        q.check(kind, q_len)?;
        k.check(kind, k_len)?;
        let geometry: Geometry = match (q, k) {
            (Positions::From(qo), Positions::From(ko)) => (q_len, k_len, qo, ko),
            _ => return build(),
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, t)) = entries.iter().find(|(g, _)| *g == geometry) {
            return Ok(t.clone());
        }
        let t = build()?;
        if entries.len() == Self::CAPACITY {
            entries.remove(0);
        }
        entries.push((geometry, t.clone()));
        Ok(t)
    }
}
