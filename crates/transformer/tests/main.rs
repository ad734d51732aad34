//! The tests of `posenc-transformer`, one module a file, built as one test binary: each binary links
//! all of candle, so one per crate keeps the suite's build and link time down.

mod bad_input;
mod blocks;
mod checkpoint;
mod claims;
mod common;
mod devices;
mod dropout;
mod fox;
mod incremental;
mod lm;
mod long_context;
mod masks;
mod packed;
mod path;
mod pytorch;
mod self_extend;
mod sinks;
mod stacks;
mod streaming;
mod training;
