//! The tests of `posenc-kernels`, one module a file, built as one test binary: each binary links
//! all of candle, so one per crate keeps the suite's build and link time down.

mod fused_ops;
mod kv_blocks;
mod quantized;
