//! The explorer's tests: its JSON API against a server on an ephemeral 127.0.0.1 port, and
//! the page in a real headless Chromium. One test binary (each links all of candle).

mod api;
mod browser;
mod common;
mod openai;
