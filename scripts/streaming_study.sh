#!/usr/bin/env bash
# SmolLM2-135M past any window (StreamingLLM, Xiao et al. 2024):
#
#   perplexity  three windows of 16 384 tokens of the Shakespeare test plays, read whole and
#               a token at a time through a rolling cache of 1 024 positions with 4 sink
#               tokens and with none (about 40 minutes on two cores);
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
[ ${#parts[@]} -eq 0 ] && parts=(perplexity generate page)
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
    *) echo "unknown part $part (perplexity, generate, page)" >&2; exit 2 ;;
  esac
done
