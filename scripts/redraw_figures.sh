#!/usr/bin/env bash
# Redraws every figure in docs/ that a posenc command makes from committed records (each
# experiment's results.json) or from the encodings themselves, with the chart rules of
# posenc_plot::chart. Look at each one before committing it.
#
#   scripts/redraw_figures.sh [POSENC]     # default: target/release/posenc (built here)
#
# With ATTENTION=1 it also trains the toy's `none` and `sinusoidal` models (seed 42, 1 000
# steps, about two minutes on two cores) and redraws their attention maps
# (docs/attention-*.png). Not redrawn here, since their inputs are not in the repository:
# the long-context loss by position (docs/long-context/by_position.png, from the raw runs
# of scripts/long_context.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=${1:-target/release/posenc}
[ -x "$posenc" ] || cargo build --release --quiet
for kind in alibi binary fraction rope sine-single sinusoidal t5; do
  "$posenc" plot encoding --encoding "$kind" --out "docs/encoding-$kind.png" > /dev/null
done
for dir in docs/experiment docs/experiment-randomized; do
  "$posenc" plot experiment --results "$dir/results.json" --out "$dir" > /dev/null
done
for results in $(grep -l '"eval_windows"' $(find docs -name results.json | sort)); do
  dir=$(dirname "$results")
  # A directory of cells pooled elsewhere keeps its records only.
  case $dir in docs/gpu/h200/lm_cells_1200/*) continue ;; esac
  "$posenc" plot lm-experiment --results "$results" --out "$dir" > /dev/null
done
for results in $(find docs/lengthgen -name results.json | sort); do
  dir=$(dirname "$results")
  [ -f "$dir/accuracy_by_length.png" ] || continue
  "$posenc" plot lengthgen --results "$results" --out "$dir" > /dev/null
done
# Every sort run in one figure: the first grid, FIRE's and ALiBi's later runs, more seeds.
"$posenc" plot lengthgen --results docs/lengthgen/sort/results.json \
  docs/lengthgen/sort/after-alibi/results.json docs/lengthgen/sort/more-seeds/results.json \
  --out docs/lengthgen/sort/pooled > /dev/null
if [ "${ATTENTION:-0}" = 1 ]; then
  runs=$(mktemp -d)
  trap 'rm -rf "$runs"' EXIT
  "$posenc" kotoba experiment --encodings none,sinusoidal --out "$runs" > /dev/null
  for kind in none sinusoidal; do
    "$posenc" plot attention --model "$runs/$kind" --out "docs/attention-$kind.png" \
      --sentence "the small cat sees the dog in the park" > /dev/null
  done
fi
# SmolLM2's RoPE figures from their records.
cargo run --release --quiet --example smollm2_rope -- --from-records docs/smollm2-rope > /dev/null
# The long-context report from its records: its tables, passkey grid, perplexity and toy.
cargo run --release --quiet --example long_context_report -- --from-records docs/long-context > /dev/null
git status --short -- docs | grep '\.png$' || echo "no figure changed"
