//! Position tables that grow on demand: no hard maximum length.

use std::sync::RwLock;

use candle_core::Tensor;

use crate::Result;

/// Rows `0..capacity` of one or more per-position tables, rebuilt larger when a longer
/// sequence asks. Reads share the lock; only growth takes it exclusively.
#[derive(Debug, Default)]
pub(crate) struct GrowingTables {
    tables: RwLock<Vec<Tensor>>,
}

impl GrowingTables {
    /// Rows `offset..offset + len` of every table, building rows `0..n` with `build(n)`
    /// first if the cached tables are shorter than `offset + len`.
    pub(crate) fn rows(
        &self,
        offset: usize,
        len: usize,
        build: impl Fn(usize) -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        let end = offset + len;
        let narrow = |tables: &[Tensor]| -> Result<Vec<Tensor>> {
            tables
                .iter()
                .map(|t| Ok(t.narrow(0, offset, len)?))
                .collect()
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
