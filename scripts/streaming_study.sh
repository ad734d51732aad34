#!/usr/bin/env bash
# SmolLM2-135M past any window (StreamingLLM, Xiao et al. 2024):
#
#   perplexity  three windows of 16 384 tokens of the Shakespeare test plays, read whole and
#               a token at a time through a rolling cache of 1 024 positions with 4 sink
#               tokens and with none (about 40 minutes on two cores);
#   perplexity-64k  one window of 65 536 tokens of the test plays (8 times the model's
#               context), a token at a time through the rolling cache with 4 sinks and
#               with none (about 35 minutes), each under /usr/bin/time; added to
#               perplexity.json beside the others;
#   generate    65 536 tokens generated with that rolling cache, and 8 192 with the
#               ordinary growing cache as the baseline: decode speed and resident memory
#               every 1 024 tokens (about 35 minutes);
#   page        both records joined into results.json with NOTE (what else ran on the
#               machine), and its page rendered by `posenc report`.
#
#   NOTE="…" scripts/streaming_study.sh [perplexity|generate|page]...   # all when none
#
# writes docs/long-context/streaming/{perplexity.json,generate.json,results.json,results.md}.
# Needs scripts/fetch_smollm2.sh first. Each part rewrites its record whole, atomically.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin posenc --example streaming
OUT=docs/long-context/streaming
mkdir -p "$OUT"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(perplexity perplexity-64k generate page)
for part in "${parts[@]}"; do
  case "$part" in
    perplexity)
      tmp=$(mktemp -d "$OUT/.perplexity.XXXXXX")
      eval_16k() { target/release/posenc lm eval --model smollm2 --split test --lengths 16384 \
        --windows 3 --format json --quiet "$@"; }
      eval_16k > "$tmp/whole.json"
      eval_16k --window 1024 --sinks 4 > "$tmp/sinks4.json"
      eval_16k --window 1024 --sinks 0 > "$tmp/sinks0.json"
      python3 -c 'import json,sys; print(json.dumps([r for f in sys.argv[1:] for r in json.load(open(f))], indent=1))' \
        "$tmp"/whole.json "$tmp"/sinks4.json "$tmp"/sinks0.json > "$tmp/all.json"
      mv "$tmp/all.json" "$OUT/perplexity.json"
      rm -rf "$tmp"
      ;;
    perplexity-64k)
      # Each reading under /usr/bin/time (its peak resident memory beside its record):
      # perplexity-65536-sinks{4,0}.{json,time}, kept, and skipped when present.
      out=$OUT
      # shellcheck source=scripts/timed.sh
      . scripts/timed.sh
      for sinks in 4 0; do
        timed "perplexity-65536-sinks$sinks" target/release/posenc lm eval --model smollm2 \
          --split test --lengths 65536 --windows 1 --format json --quiet --window 1024 \
          --sinks "$sinks"
      done
      # perplexity.json: the records of other lengths as they are, those of 65 536 replaced,
      # each with its process's peak memory.
      python3 - "$OUT" > "$OUT/.perplexity.json.tmp" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = [r for r in json.load(open(os.path.join(out, "perplexity.json"))) if r["len"] != 65536]
for sinks in (4, 0):
    name = os.path.join(out, f"perplexity-65536-sinks{sinks}")
    peak = json.load(open(name + ".time"))["peak_rss_kb"] / 1024
    rows += [dict(r, peak_rss_mb=peak) for r in json.load(open(name + ".json"))]
print(json.dumps(rows, indent=1))
PY
      mv "$OUT/.perplexity.json.tmp" "$OUT/perplexity.json"
      ;;
    generate)
      target/release/examples/streaming --model smollm2 --tokens 65536 --window 1024 --sinks 4 \
        --grow 8192 --every 1024 --out "$OUT/generate.json"
      ;;
    page)
      NOTE="${NOTE:-SmolLM2-135M-Instruct (Q4_1 GGUF, f16 cache) on two cores.}" python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
study = {
    "note": os.environ["NOTE"],
    "perplexity": json.load(open(os.path.join(out, "perplexity.json"))),
    "generate": json.load(open(os.path.join(out, "generate.json"))),
}
tmp = os.path.join(out, ".results.json.tmp")
with open(tmp, "w") as f:
    json.dump(study, f, indent=1)
os.replace(tmp, os.path.join(out, "results.json"))
PY
      target/release/posenc report "$OUT"
      ;;
    *) echo "unknown part $part (perplexity, perplexity-64k, generate, page)" >&2; exit 2 ;;
  esac
done
