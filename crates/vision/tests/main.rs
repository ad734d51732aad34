//! The tests of `posenc-vision`, one module a file, built as one test binary: each binary
//! links all of candle, so one per crate keeps the suite's build and link time down.

mod model;
mod scenes;
mod task;
