#!/usr/bin/env bash
# Attention sinks on the Shakespeare language model: RoPE and NoPE each with and without a
# learned sink per head (gpt-oss's), and ALiBi, three seeds each at the experiment's
# settings (context L = 64, 2 000 steps). Every test window (L to 16L) is read whole, then
# a token at a time through a rolling key/value cache of L positions with 0 and with 4
# sink tokens kept (StreamingLLM). Resumable: a rerun trains only what is missing.
#
#   scripts/sinks_study.sh            # about 40 minutes on two cores
#
# writes runs/lm-sinks, and docs/lm-experiment-sinks (results, figures, log) for the book;
# `posenc report docs/lm-experiment-sinks` renders its tables and claims.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
POSENC=target/release/posenc
ENCODINGS='rope,{"kind":"stack","of":["rope","sink"],"label":"rope-sink"},none,{"kind":"sink","label":"sink"},alibi'
mkdir -p docs/lm-experiment-sinks
"$POSENC" lm experiment --seeds 3 --factors 1,2,4,8,16 --window 64 --sinks 0,4 \
  --encodings "$ENCODINGS" --out runs/lm-sinks | tee docs/lm-experiment-sinks/log.txt
"$POSENC" lm experiment --pool runs/lm-sinks/results.json --out docs/lm-experiment-sinks
