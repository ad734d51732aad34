#!/usr/bin/env bash
# The quantized cache and the sliding window's skipped tiles: the old binary (1037187, built
# at OLD, default /tmp/old-target/release/posenc) and the new one alternated, nothing else
# running; writes docs/speed/ab-kv-cache-window/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ab_rounds.sh
ab_dir ab-kv-cache-window
prompt="Once upon a time, in a land far away,"
swa=runs/lm-swa/rope-swa16/seed-1337
: > "$d/identity.txt"
for b in old new; do
  "$(bin $b)" generate --temperature 0 --max-tokens 64 "$prompt" > "/tmp/ab-gen-$b.txt"
  "$(bin $b)" lm eval --model "$swa" --lengths 8192 --windows 1 --format json --quiet > "/tmp/ab-swa-$b.json"
  "$(bin $b)" lm eval --model smollm2 --lengths 1024 --windows 1 --format json --quiet > "/tmp/ab-smol-$b.json"
done
for f in gen-%s.txt swa-%s.json smol-%s.json; do
  a=/tmp/ab-$(printf "$f" old); n=/tmp/ab-$(printf "$f" new)
  if cmp -s "$a" "$n"; then echo "$(printf "$f" '*'): identical ($(wc -c < "$a") bytes)"; else echo "$(printf "$f" '*'): DIFFER"; fi >> "$d/identity.txt"
done
: > "$d/swa_eval_32768.txt"
ab_generate "$prompt"
for r in 1 2 3; do
  for b in old new; do
    /usr/bin/time -f "%e s, peak %M KB" -o /tmp/ab-time "$(bin $b)" lm eval --model "$swa" --lengths 32768 \
      --windows 1 --format json --quiet > /dev/null
    echo "$b $(cat /tmp/ab-time)" >> "$d/swa_eval_32768.txt"
  done
done
ab_bench_train
python3 scripts/ab_ratio.py "$d"
