#!/usr/bin/env bash
# Installs mdbook from crates.io (pinned), to build the book: `mdbook build docs` writes
# target/book. Neither CI nor the tests need it.
set -euo pipefail
cargo install --locked mdbook@0.5.4
