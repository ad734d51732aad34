#!/usr/bin/env bash
# PaTH's attention a chunk of queries at a time: the old binary (OLD, default
# /tmp/old-target/release/posenc, built at 6716074, which formed a layer's scores whole)
# and the new one, trained and read with a cache, and how far apart they are; then what PaTH costs
# against RoPE at 512, 2 048 and 8 192 tokens, time and peak memory, both binaries
# alternating. Writes docs/speed/ab-turned/ (identity.txt, cost.csv, cost.md). Pass
# `identity` to run only the identity part.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ab_rounds.sh
ab_dir ab-turned
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
# How far the two binaries' outputs are apart: identical, or the largest difference.
same() { echo "$1: $(python3 scripts/ab_close.py "$2" "$3")" >> "$d/identity.txt"; }
: > "$d/identity.txt"
ab_text 3000 "$t/text.txt"
ab_lm_config "$t/text.txt" '{"dropout": 0.0, "d_model": 32, "d_ff": 64, "layers": 3, "heads": 4, "context": 160}' \
  '{"steps": 20, "batch_size": 2, "warmup": 5}' "$t/lm.json"
# PaTH alone, with its forget gate, and beside a position bias; a decoder (lengthgen, the
# LM task, whose 160-token context crosses two chunk boundaries) and an encoder (the toy
# translation, bidirectional).
encs='path {"kind":"path","forget_gate":true} {"kind":"stack","of":["path","alibi"]}'
for enc in $encs; do
  for b in old new; do
    "$(bin $b)" lengthgen train --task addition --encoding "$enc" --steps 30 --warmup 5 --batch-size 8 --d-model 32 --layers 2 --heads 2 --seed 3 --quiet --out "$t/lg-$b" > /dev/null
    "$(bin $b)" lm train --config "$t/lm.json" --text "$t/text.txt" --encoding "$enc" --seed 3 --quiet --out "$t/lm-$b" > /dev/null
    "$(bin $b)" kotoba train --encoding "$enc" --steps 10 --batch-size 8 --seed 3 --quiet --out "$t/ko-$b" > /dev/null
    # Read with a cache: windows past the 512-token prefill chunk go through it.
    "$(bin $b)" lm eval --model "$t/lm-$b" --text "$t/text.txt" --lengths 160,512,700 --windows 2 --format json > "$t/eval-$b.json"
    # The old binary's model read by each binary: the forward alone.
    "$(bin $b)" lm eval --model "$t/lm-old" --text "$t/text.txt" --lengths 160,512,700 --windows 2 --format json > "$t/read-$b.json"
  done
  for task in lg lm ko; do
    for file in model training; do
      same "$task $enc: $file.safetensors" "$t/$task-old/$file.safetensors" "$t/$task-new/$file.safetensors"
    done
  done
  same "lm eval $enc, each binary's model (160, 512 and 700 tokens)" "$t/eval-old.json" "$t/eval-new.json"
  same "lm eval $enc, one model read by each binary" "$t/read-old.json" "$t/read-new.json"
  rm -rf "$t"/lg-* "$t"/lm-* "$t"/ko-*
done
cat "$d/identity.txt"
[ "${1:-}" = identity ] && exit 0
# The cost: a model of RoPE and one of PaTH (4 layers, d_model 128, 4 heads, trained 2
# steps at 512 tokens: the weights do not change what a token costs), each read at 512,
# 2 048 and 8 192 tokens by `lm eval` (8 192 tokens at each length: 16, 4 and 1 windows;
# windows past 512 tokens go through the cache, 512 at a time), and a training run of 3
# steps of one sequence at 512 and 2 048 tokens; the whole process timed,
# with its peak resident memory, the binaries alternating over $ROUNDS rounds.
echo "round,binary,encoding,what,tokens,seconds,peak_mb" > "$d/cost.csv"
for enc in rope path; do
  "$(bin new)" lm train --text "$t/text.txt" --encoding "$enc" --d-model 128 --layers 4 --heads 4 --context 512 --steps 2 --warmup 1 --batch-size 1 --seed 1 --quiet --out "$t/cost-$enc" > /dev/null
done
timed() {
  local r=$1 b=$2 enc=$3 what=$4 n=$5; shift 5
  /usr/bin/time -f "%e %M" -o "$t/time" "$@" > /dev/null
  read -r secs kb < "$t/time"
  echo "$r,$b,$enc,$what,$n,$secs,$((kb / 1024))" >> "$d/cost.csv"
}
for r in $(rounds); do
  for b in $(order "$r"); do
    for enc in rope path; do
      for n in 512 2048 8192; do
        timed "$r" "$b" "$enc" eval "$n" "$(bin $b)" lm eval --model "$t/cost-$enc" --text "$t/text.txt" --lengths "$n" --windows $((8192 / n)) --format json
      done
      for n in 512 2048; do
        timed "$r" "$b" "$enc" train "$n" "$(bin $b)" lm train --text "$t/text.txt" --encoding "$enc" --d-model 128 --layers 4 --heads 4 --context "$n" --steps 3 --warmup 1 --batch-size 1 --seed 1 --quiet --force --out "$t/train-$b"
      done
    done
  done
done
python3 - "$d/cost.csv" > "$d/cost.md" <<'PY'
import csv, statistics, sys
from collections import defaultdict
cells = defaultdict(list)
for row in csv.DictReader(open(sys.argv[1])):
    cells[(row["what"], int(row["tokens"]), row["encoding"], row["binary"])].append(row)
cols = [(e, b) for e in ("rope", "path") for b in ("old", "new")]
print("| what | tokens | " + " | ".join(f"{e} {b}: s, MB" for e, b in cols) + " |")
print("|---|---:|" + "---:|" * len(cols))
for what, n in sorted({(w, n) for w, n, _, _ in cells}):
    med = lambda rows, f: statistics.median(float(r[f]) for r in rows)
    vals = [cells[(what, n, e, b)] for e, b in cols]
    print(f"| {what} | {n} | " + " | ".join(f"{med(v, 'seconds'):.2f}, {med(v, 'peak_mb'):.0f}" for v in vals) + " |")
PY
cat "$d/cost.md"
