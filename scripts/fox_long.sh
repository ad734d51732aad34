#!/usr/bin/env bash
# FoX and RoPE read past their context at inference: one 8 192- and one 32 768-character
# window of the test plays, through the key/value cache and the tiled kernel (FoX's decay
# bias asked for tile by tile from the cached sums), each run under /usr/bin/time for its
# peak memory. Needs the FoX and sinks studies' runs (runs/lm-fox, runs/lm-sinks).
#
#   scripts/fox_long.sh [out-dir]     (default docs/lm-experiment-fox/long)
#
# Each record is `lm eval --format json`'s row without its per-position losses, plus the
# wall time and peak resident memory: records.json (pandas.read_json).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/lm-experiment-fox/long}
posenc=${POSENC:-target/release/posenc}
mkdir -p "$out"
rows=()
for kind in fox rope; do
  case $kind in
    fox) model=runs/lm-fox/fox/seed-1337 ;;
    rope) model=runs/lm-sinks/rope/seed-1337 ;;
  esac
  for len in 8192 32768; do
    /usr/bin/time -v "$posenc" lm eval --model "$model" --lengths "$len" --windows 1 \
      --format json --quiet > "$out/$kind-$len.json.tmp" 2> "$out/$kind-$len.time"
    rows+=("$kind" "$len")
  done
done
python3 - "$out" "${rows[@]}" <<'PY'
import json, os, re, sys
out, args = sys.argv[1], sys.argv[2:]
records = []
for kind, length in zip(args[::2], args[1::2]):
    row = json.load(open(f"{out}/{kind}-{length}.json.tmp"))[0]
    log = open(f"{out}/{kind}-{length}.time").read()
    h, m, s = (["0"] + re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", log).group(1).split(":"))[-3:]
    records.append({"kind": kind, "model": row["model"], "length": int(length), "loss": row["loss"],
                    "perplexity": row["perplexity"], "wall_s": int(h) * 3600 + int(m) * 60 + float(s),
                    "peak_mb": int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log).group(1)) / 1024})
    os.remove(f"{out}/{kind}-{length}.json.tmp")
json.dump(records, open(f"{out}/records.json", "w"), indent=2)
for r in records:
    print(f"| {r['kind']} | {r['length']} | {r['perplexity']:.2f} | {r['wall_s']:.1f} | {r['peak_mb']:.0f} |")
PY
