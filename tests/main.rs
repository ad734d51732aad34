//! The tests of the `posenc` command line, one module a file, built as one test binary: each binary links
//! all of candle, so one per crate keeps the suite's build and link time down.

mod cli_encoding;
mod cli_experiment;
mod cli_faults;
mod cli_flags;
mod cli_generate;
mod cli_grid;
mod cli_lm;
mod cli_logs;
mod cli_shell;
mod cli_translate;
mod common;
mod doc_links;
mod import_graph;
mod packaging;
mod report;
mod throwaway_content_encoding;
mod throwaway_encoding;
