#!/usr/bin/env bash
# Self-extend on SmolLM2-135M past its 8 192 tokens: posenc's `lm passkey --self-extend`
# and llama.cpp's own passkey example with the same group and window, one after the other
# (never sharing the cores with each other), each under /usr/bin/time.
#
#   SEED=0 scripts/self_extend_study.sh [out-dir]     (default docs/long-context/self-extend)
#
# Needs scripts/fetch_smollm2.sh and scripts/build_llama_cpp.sh first; the table is
# rendered from the records by scripts/self_extend_table.py.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/long-context/self-extend}
mkdir -p "$out"
posenc=${POSENC:-target/release/posenc}
gguf=$(ls .cache/smollm2/*.gguf | head -n 1)
length=${LENGTH:-16384}
group=${GROUP:-4}
window=${WINDOW:-2048}
depths=${DEPTHS:-0.1,0.5,0.9}
# One key per depth and seed: posenc's from its key seed, llama.cpp's from its --seed.
seed=${SEED:-0}
[[ $seed =~ ^[0-9]+$ ]] || { echo "SEED: one seed a run, got $seed" >&2; exit 1; }
tag="$length-g$group-w$window-s$seed"
/usr/bin/time -v "$posenc" lm passkey --model smollm2 --lengths "$length" --depths "$depths" \
  --trials 1 --seed "$seed" --self-extend "{\"group\": $group, \"window\": $window}" \
  --format json --quiet > "$out/posenc-$tag.json.tmp" 2> "$out/posenc-$tag.time"
mv "$out/posenc-$tag.json.tmp" "$out/posenc-$tag.json"
/usr/bin/time -v python3 scripts/llama_cpp_passkey.py --model "$gguf" --length "$length" \
  --depths "$depths" --seeds "$seed" --group "$group" --window "$window" \
  --out "$out/llama-cpp-$tag.json" > /dev/null 2> "$out/llama-cpp-$tag.time"
