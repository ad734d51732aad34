#!/usr/bin/env bash
# One task protocol (posenc_train::job): the old binary (OLD, built before it) and the new
# one train, continue and run experiments to the same bytes, and the new one continues
# and reads runs the old one wrote (docs/speed/ab-jobs/identity.txt). `timing` runs only
# `bench train` alternated, $ROUNDS rounds (bench_train.txt), and each binary's peak memory
# there (peak_memory.log).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ab_rounds.sh
ab_dir ab-jobs
if [ "${1:-}" = timing ]; then
  ab_bench_train
  : > "$d/peak_memory.log"
  for b in old new; do
    kb=$(/usr/bin/time -f %M "$(bin $b)" bench train --steps 10 --no-torch 2>&1 >/dev/null | tail -n 1)
    echo "$b | bench train --steps 10 --no-torch | $((kb / 1024)) MB" >> "$d/peak_memory.log"
  done
  cat "$d/bench_train.txt" "$d/peak_memory.log"
  exit 0
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
out="$d/identity.txt"
: > "$out"
same() { if cmp -s "$2" "$3"; then echo "$1: identical"; else echo "$1: DIFFER"; fi >> "$out"; }
# The weights and optimizer state of two run directories, file by file.
same_runs() {
  for file in model training; do
    tensors "$2/$file.safetensors" > "$t/a.bin"
    tensors "$3/$file.safetensors" > "$t/b.bin"
    same "$1: $file.safetensors" "$t/a.bin" "$t/b.bin"
  done
}
# A run's history without its timings, which differ between any two runs.
history() {
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
for r in s["history"]:
    r.pop("elapsed_s", None)
print(json.dumps([s["config"], s["step"], s["tokens"], s["history"]], sort_keys=True))' "$1/trainer.json"
}
ab_text 400 "$t/text.txt"
lg=(lengthgen train --task addition --warmup 10 --batch-size 8 --d-model 32 --layers 2 --heads 2 --seed 3 --quiet)
lm=(lm train --text "$t/text.txt" --context 32 --batch-size 4 --warmup 5 --d-model 32 --layers 2 --heads 2 --seed 3 --quiet)
kt=(kotoba train --warmup 5 --batch-size 8 --seed 3 --quiet --eval-every 10 --save-every 10)
for b in old new; do
  # Straight through, and trained half the steps then continued to all of them (by the same
# binary; the cosine schedules of lengthgen and the LM then differ from a straight run's,
# as the learning rate decays to each run's own end).
  "$(bin $b)" "${lg[@]}" --encoding alibi --steps 40 --out "$t/lg-$b" > /dev/null
  "$(bin $b)" "${lg[@]}" --encoding alibi --steps 20 --out "$t/lg-half-$b" > /dev/null
  "$(bin $b)" lengthgen train --task addition --resume --steps 40 --quiet --out "$t/lg-half-$b" > /dev/null
  "$(bin $b)" "${lm[@]}" --encoding rope --steps 30 --out "$t/lm-$b" > /dev/null
  "$(bin $b)" "${lm[@]}" --encoding rope --steps 15 --out "$t/lm-half-$b" > /dev/null
  "$(bin $b)" lm train --resume --steps 30 --quiet --out "$t/lm-half-$b" > /dev/null
  "$(bin $b)" "${kt[@]}" --encoding sinusoidal --steps 20 --out "$t/kt-$b" > /dev/null
  "$(bin $b)" "${kt[@]}" --encoding sinusoidal --steps 10 --out "$t/kt-half-$b" > /dev/null
  "$(bin $b)" kotoba train --resume --steps 20 --quiet --out "$t/kt-half-$b" > /dev/null
done
for task in lg lm kt; do
  same_runs "$task, old against new" "$t/$task-old" "$t/$task-new"
  same_runs "$task, resumed, old against new" "$t/$task-half-old" "$t/$task-half-new"
  history "$t/$task-old" > "$t/a.json"
  history "$t/$task-new" > "$t/b.json"
  same "$task, old against new: trainer.json's config, steps, tokens and history" "$t/a.json" "$t/b.json"
done
# A run the old binary wrote, continued by the new one, against the old one's continuation.
for task in lg lm kt; do
  rm -rf "$t/$task-half-new"
done
"$(bin old)" "${lg[@]}" --encoding alibi --steps 20 --out "$t/lg-half-new" > /dev/null
"$(bin new)" lengthgen train --task addition --resume --steps 40 --quiet --out "$t/lg-half-new" > /dev/null
"$(bin old)" "${lm[@]}" --encoding rope --steps 15 --out "$t/lm-half-new" > /dev/null
"$(bin new)" lm train --resume --steps 30 --quiet --out "$t/lm-half-new" > /dev/null
"$(bin old)" "${kt[@]}" --encoding sinusoidal --steps 10 --out "$t/kt-half-new" > /dev/null
"$(bin new)" kotoba train --resume --steps 20 --quiet --out "$t/kt-half-new" > /dev/null
for task in lg lm kt; do
  same_runs "$task, started by old and continued by new, against old throughout" "$t/$task-half-old" "$t/$task-half-new"
done
# Experiments: two encodings by two seeds, every run's weights and the records.
for b in old new; do
  "$(bin $b)" lengthgen experiment --task addition --encodings none,rope --seeds 2 --steps 30 --warmup 5 --batch-size 8 --d-model 32 --layers 2 --heads 2 --quiet --out "$t/lgx-$b" > /dev/null
done
for run in none/seed-1 none/seed-2 rope/seed-1 rope/seed-2; do
  same_runs "lengthgen experiment $run" "$t/lgx-old/$run" "$t/lgx-new/$run"
done
python3 -c '
import json, sys
r = json.load(open(sys.argv[1])); r.pop("runs", None)
print(json.dumps(r["records"], sort_keys=True))' "$t/lgx-old/results.json" > "$t/a.json"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1])); r.pop("runs", None)
print(json.dumps(r["records"], sort_keys=True))' "$t/lgx-new/results.json" > "$t/b.json"
same "lengthgen experiment: results.json's records" "$t/a.json" "$t/b.json"
# The old binary's runs read by the new one, and the new one's manifests carry their kind.
"$(bin new)" lengthgen eval --model "$t/lg-old" --test-lengths 3,6 --test-instances 20 > "$t/a.txt"
"$(bin old)" lengthgen eval --model "$t/lg-old" --test-lengths 3,6 --test-instances 20 > "$t/b.txt"
same "lengthgen eval of an old run, new against old" "$t/a.txt" "$t/b.txt"
for task in lg lm kt; do
  echo "$task, new manifest's kind: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("kind"))' "$t/$task-new/manifest.json")" >> "$out"
done
cat "$out"
