#!/usr/bin/env bash
# The RULER study of SmolLM2-135M-Instruct (quantized, as shipped): every task at 4 096,
# 8 192 and 16 384 tokens unscaled, and at 16 384 with each scaling at factor 2 (YaRN,
# dynamic NTK, Llama 3, linear), three seeds of the haystack, one sample each. The records go to docs/long-context/ruler/results.json,
# rewritten after each sample, so the script goes on where it stopped; the grid of every
# scaling to ruler.png; results.md (the tables and the claims of claims.json, judged by
# the project's rule) is rendered by `posenc report`. About 90 minutes on two cores, most
# of it at 16 384 tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/long-context/ruler
mkdir -p "$out"
cargo build --release --quiet
posenc=target/release/posenc
run() {
  "$posenc" lm ruler --model smollm2 --seeds 0,1,2 --quiet --out "$out/results.json" \
    --plot "$out/ruler.png" "$@" >/dev/null
}
run --lengths 4096,8192,16384
for scaling in yarn dynamic linear; do
  run --lengths 16384 --rope-scaling "{\"rope_type\": \"$scaling\", \"factor\": 2}"
done
# Llama 3's own low and high frequency factors.
run --lengths 16384 --rope-scaling \
  '{"rope_type": "llama3", "factor": 2, "low_freq_factor": 1, "high_freq_factor": 4}'
"$posenc" report "$out"
