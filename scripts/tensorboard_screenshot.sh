#!/usr/bin/env bash
# Draws docs/tensorboard.png: trains a small character model on Shakespeare for 300 steps
# with its logs in a temporary directory, serves them with TensorBoard (the pinned one that
# scripts/install_clients.sh installs in tests/tensorboard/.venv) and photographs its
# scalars in Chromium through playwright-core (tests/browser). Needs
# scripts/fetch_shakespeare.sh and scripts/install_clients.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
tb=tests/tensorboard/.venv/bin/tensorboard
[ -x "$tb" ] || { echo "no $tb: run bash scripts/install_clients.sh" >&2; exit 1; }
cargo build --release --quiet
work=$(mktemp -d)
trap 'kill ${pid:-} 2>/dev/null; rm -rf "$work"' EXIT
cat >"$work/lm.json" <<'JSON'
{"model": {"d_model": 64, "heads": 4, "d_ff": 256, "layers": 2, "context": 64},
 "steps": 300, "batch_size": 16, "eval_every": 25, "save_every": 300}
JSON
./target/release/posenc lm train --quiet --encoding rope --config "$work/lm.json" \
  --out "$work/run" --log-dir "$work/logs/rope"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$tb" --logdir "$work/logs" --host 127.0.0.1 --port "$port" >"$work/tb.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.2; done
node - "http://127.0.0.1:$port/?darkMode=false#scalars" docs/tensorboard.png <<'JS'
const { chromium } = require(process.cwd() + "/tests/browser/node_modules/playwright-core");
(async () => {
  const [url, out] = process.argv.slice(2);
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium" });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1180 } });
  await page.goto(url, { waitUntil: "networkidle" });
  // The charts draw once every card has its data.
  await page.waitForTimeout(8000);
  await page.screenshot({ path: out + ".tmp.png" });
  await browser.close();
  require("fs").renameSync(out + ".tmp.png", out);
})().catch((e) => { console.error(e); process.exit(1); });
JS
echo "wrote docs/tensorboard.png"
