//! The tests of `posenc-lm`, one module a file, built as one test binary: each binary links
//! all of candle, so one per crate keeps the suite's build and link time down.

mod corpus;
mod lm_train;
mod passkey;
mod ruler;
mod sample;
mod streaming;
