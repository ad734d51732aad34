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
