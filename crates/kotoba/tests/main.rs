//! The tests of `posenc-kotoba`, one module a file, built as one test binary: each binary links
//! all of candle, so one per crate keeps the suite's build and link time down.

mod experiment;
mod inspect;
mod kotoba;
mod metrics;
mod run;
