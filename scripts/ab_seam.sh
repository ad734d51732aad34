#!/usr/bin/env bash
# The seam as a declaration and five hooks: the old binary (at OLD, default
# /tmp/old-target/release/posenc, built at 264b01b) and the new one give the same bytes,
# and alternate for speed; writes docs/speed/ab-seam/. Pass `identity` to run only the
# identity part.
set -euo pipefail
cd "$(dirname "$0")/.."
# Peak resident memory of one run of each timed command, per binary (`peaks` alone runs
# only this).
ab_peaks() {
  : > "$d/peak_memory.log"
  for b in old new; do
    for cmd in "bench train --steps 10 --no-torch" "bench embed --rounds 1 --no-torch" \
      "generate --timing --temperature 0 --max-tokens 256 Once"; do
      # shellcheck disable=SC2086
      kb=$(/usr/bin/time -f %M "$(bin $b)" $cmd 2>&1 >/dev/null | tail -n 1)
      echo "$b | $cmd | $((kb / 1024)) MB" >> "$d/peak_memory.log"
    done
  done
  cat "$d/peak_memory.log"
}
source scripts/ab_rounds.sh
ab_dir ab-seam
if [ "${1:-}" = peaks ]; then ab_peaks; exit 0; fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
same() { if cmp -s "$2" "$3"; then echo "$1: identical"; else echo "$1: DIFFER"; fi >> "$d/identity.txt"; }
: > "$d/identity.txt"
# Every built-in kind and four composites, trained by lengthgen and by the LM task (the
# latter with dropout 0.1, so dropout's draws are compared too).
ab_text 400 "$t/text.txt"
ab_lm_config "$t/text.txt" '{"dropout": 0.1, "d_model": 32, "d_ff": 64, "layers": 3, "heads": 2, "context": 32}' \
  '{"steps": 30, "batch_size": 4, "warmup": 5}' "$t/lm.json"
kinds=$("$(bin new)" encoding list --format json | python3 -c "import json, sys; print(' '.join(k['kind'] for k in json.load(sys.stdin)))")
composites='{"kind":"stack","of":["fox","sink","alibi"]} {"kind":"layers","pattern":["rope",{"kind":"stack","of":["fox","cope"]},"none"]} {"kind":"stack","of":["coupling-bias","ssmax"]} {"kind":"stack","of":["rope","sink","window"]}'
for enc in $kinds $composites; do
  for b in old new; do
    "$(bin $b)" lengthgen train --task addition --encoding "$enc" --steps 60 --warmup 10 --batch-size 8 --d-model 32 --layers 3 --heads 2 --seed 3 --quiet --out "$t/lg-$b" > /dev/null
    "$(bin $b)" lm train --config "$t/lm.json" --text "$t/text.txt" --encoding "$enc" --seed 3 --quiet --out "$t/lm-$b" > /dev/null
  done
  for task in lg lm; do
    for file in model training; do
      tensors "$t/$task-old/$file.safetensors" > "$t/old.bin"
      tensors "$t/$task-new/$file.safetensors" > "$t/new.bin"
      same "$task $enc: $file.safetensors" "$t/old.bin" "$t/new.bin"
    done
    rm -rf "$t/$task-old" "$t/$task-new"
  done
done
# SmolLM2 through every reading path, and MiniLM's embeddings.
prompt=$(python3 -c "print(('The quick brown fox jumps over the lazy dog. ' * 40) + 'Once upon a time')")
modes=('--temperature 0' '--temperature 0.8 --seed 7' '--temperature 0 --self-extend {"group":4,"window":128}' '--temperature 0 --window 96 --sinks 4' '--temperature 0 --kv-cache q8_0' '--temperature 0 --kv-cache q4_0-hadamard' '--temperature 0 --f32' '--temperature 0 --rope-scaling {"rope_type":"yarn","factor":2.0,"original_max_position_embeddings":2048}')
for mode in "${modes[@]}"; do
  for b in old new; do
    # shellcheck disable=SC2086
    "$(bin $b)" generate --max-tokens 32 $mode -- "$prompt" > "$t/gen-$b.txt"
  done
  same "generate (SmolLM2) $mode" "$t/gen-old.txt" "$t/gen-new.txt"
done
for i in $(seq 64); do echo "sentence $i: the cat sat on the mat while a dog ran far away from home"; done > "$t/sentences.txt"
for b in old new; do "$(bin $b)" embed --model "$POSENC_CACHE/all-MiniLM-L6-v2" < "$t/sentences.txt" > "$t/embed-$b.txt"; done
same "embed (MiniLM, 64 sentences)" "$t/embed-old.txt" "$t/embed-new.txt"
grep -c identical "$d/identity.txt" | sed 's/$/ identical/'
if grep DIFFER "$d/identity.txt"; then exit 1; fi
[ "${1:-}" = identity ] && exit 0
ab_peaks
ab_generate "Once upon a time, in a land far away," 256
ab_bench_train
ab_bench_embed
python3 scripts/ab_ratio.py "$d"
