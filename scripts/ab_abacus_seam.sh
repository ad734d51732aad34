#!/usr/bin/env bash
# The seam's token-reading hook (Abacus): the old binary (at OLD, default
# /tmp/old-target/release/posenc, built at the commit before it) and the new one give the same
# bytes for runs of encodings that read no token, and alternate for speed; writes
# docs/speed/ab-abacus-seam/. Pass `identity` to run only the identity part.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ab_rounds.sh
ab_dir ab-abacus-seam
prompt="Once upon a time, in a land far away,"
t=$(mktemp -d)
# A Shakespeare model with dropout, so that dropout's draws are compared too.
"$(bin new)" lm train --encoding alibi --steps 60 --out "$t/unused" --print-config |
  python3 -c "import json, sys; c = json.load(sys.stdin); c['model']['dropout'] = 0.1; print(json.dumps(c))" > "$t/lm.json"
: > "$d/identity.txt"
for b in old new; do
  "$(bin $b)" generate --temperature 0 --max-tokens 48 "$prompt" > "$t/gen-$b.txt"
  "$(bin $b)" lengthgen train --task copy --encoding rope --steps 200 --quiet --out "$t/copy-$b" > /dev/null
  "$(bin $b)" lm train --config "$t/lm.json" --quiet --out "$t/lm-$b" > /dev/null
  "$(bin $b)" kotoba train --encoding sinusoidal --steps 60 --quiet --out "$t/kotoba-$b" > /dev/null
done
same() { if cmp -s "$2" "$3"; then echo "$1: identical ($(wc -c < "$2") bytes)"; else echo "$1: DIFFER"; fi >> "$d/identity.txt"; }
same "generate (SmolLM2, greedy)" "$t/gen-old.txt" "$t/gen-new.txt"
for run in copy lm kotoba; do
  tensors "$t/$run-old/model.safetensors" > "$t/$run-old.bin"
  tensors "$t/$run-new/model.safetensors" > "$t/$run-new.bin"
  same "$run: trained weights" "$t/$run-old.bin" "$t/$run-new.bin"
done
cat "$d/identity.txt"
[ "${1:-}" = identity ] && exit 0
ab_generate "$prompt" 256
ab_bench_train
python3 scripts/ab_ratio.py "$d"
