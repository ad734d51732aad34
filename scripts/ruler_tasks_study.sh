#!/usr/bin/env bash
# The three RULER-style tasks the first RULER study does not run, on SmolLM2-135M-Instruct
# (quantized, as shipped), unscaled, inside its 8 192-token window: frequent-words
# extraction (`fwe`), UUID needles among UUID needles (`niah_multikey_3`) and needle
# threading (`threading`, four hops), at 4 096 and 8 192 tokens, three seeds of the
# haystack and five samples each. The records go to docs/long-context/ruler-tasks/results.json,
# rewritten after each sample, so the script goes on where it stopped; results.md (the tables
# and the claims of claims.json, judged by the project's rule) is rendered by `posenc report`.
# About half an hour on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/long-context/ruler-tasks
mkdir -p "$out"
cargo build --release --quiet
target/release/posenc lm ruler --model smollm2 --tasks fwe,niah_multikey_3,threading \
  --lengths 4096,8192 --seeds 3 --samples 5 --quiet --out "$out/results.json" \
  --plot "$out/ruler.png" >/dev/null
target/release/posenc report "$out"
