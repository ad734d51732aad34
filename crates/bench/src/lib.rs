//! # posenc-bench: speed against other implementations
//!
//! Only benchmarks live here (`benches/`), so that the implementations they compare
//! against (candle-transformers) are built by `cargo bench -p posenc-bench`, never by
//! `cargo test`:
//!
//! ```sh
//! bash scripts/fetch_minilm.sh
//! cargo bench -p posenc-bench --bench embed
//! ```

#![forbid(unsafe_code)]

/// The rounds a benchmark runs: the first number among its arguments, or `default`.
pub fn rounds(default: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}
