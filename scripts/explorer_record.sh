#!/usr/bin/env bash
# Records the explorer in Chromium: starts the release `posenc serve` on a free port, runs
# the browser test's walk through the page (tests/browser/explorer.mjs), and keeps its
# screenshots and measurements (the redraw time of a d_model 512 × 2 048 encoding, fetch
# and drawing) in docs/explorer/. Needs scripts/install_clients.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/explorer
mkdir -p "$out"
cargo build --release --quiet
log=$(mktemp)
./target/release/posenc serve --port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q http "$log" && break; sleep 0.1; done
url=$(grep -o 'http://[^ ]*' "$log" | head -n 1)
measured=$(node tests/browser/explorer.mjs "$url" "$out")
printf '%s\n' "$measured" | python3 -c '
import json, sys, os
record = json.loads(sys.stdin.read())
record["cores"] = os.cpu_count()
record["build"] = "release"
print(json.dumps(record, indent=1))' >"$out/browser.json.tmp"
mv "$out/browser.json.tmp" "$out/browser.json"
cat "$out/browser.json"
