#!/usr/bin/env bash
# The RULER study of SmolLM2-135M-Instruct (quantized, as shipped): every task at 4 096,
# 8 192 and 16 384 tokens unscaled, and at 16 384 with each scaling at factor 2 (YaRN,
# dynamic NTK, Llama 3, linear); self-extend (group 4, window 2 048) at 16 384 on three
# tasks; at 32 768, every task with YaRN at factor 4 and the single needle with self-extend
# (group 8, window 2 048). Three seeds of the haystack, one sample each. The records go to
# docs/long-context/ruler/results.json, rewritten after each sample, so the script goes on
# where it stopped; the grid of every scaling to ruler.png; results.md (the tables and the
# claims of claims.json, judged by the project's rule) is rendered by `posenc report`.
# Some hours on two cores, most of them at 32 768 tokens and with self-extend, which reads
# every score twice on the composite path.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/long-context/ruler
mkdir -p "$out"
cargo build --release --quiet
posenc=target/release/posenc
run() {
  "$posenc" lm ruler --model smollm2 --seeds 3 --quiet --out "$out/results.json" \
    --plot "$out/ruler.png" "$@" >/dev/null
}
run --lengths 4096,8192,16384
for scaling in yarn dynamic linear; do
  run --lengths 16384 --rope-scaling "{\"rope_type\": \"$scaling\", \"factor\": 2}"
done
# Llama 3's own low and high frequency factors.
run --lengths 16384 --rope-scaling \
  '{"rope_type": "llama3", "factor": 2, "low_freq_factor": 1, "high_freq_factor": 4}'
run --lengths 16384 --tasks niah_single,niah_multikey,vt --self-extend '{"group": 4, "window": 2048}'
run --lengths 32768 --rope-scaling '{"rope_type": "yarn", "factor": 4}'
run --lengths 32768 --tasks niah_single --self-extend '{"group": 8, "window": 2048}'
"$posenc" report "$out"
