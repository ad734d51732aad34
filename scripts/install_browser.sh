#!/usr/bin/env bash
# Installs what the explorer's browser tests (tests/browser/) need: Debian's chromium and
# chromium-driver by apt, and playwright-core (pinned in tests/browser/package-lock.json)
# by npm, which drives that Chromium; it downloads no browser of its own.
#
# Where Chromium cannot be installed (no root, no apt, no network), this says why and exits
# 0: the browser test then skips, printing that reason. Nothing else is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
reason=tests/browser/.unavailable
rm -f "$reason"
give_up() { echo "install_browser.sh: $1" | tee "$reason" >&2; exit 0; }
if ! command -v chromium >/dev/null; then
  command -v apt-get >/dev/null || give_up "no chromium and no apt-get to install it"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null 2>&1 || give_up "apt-get update failed (no root or no network?)"
  $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 \
    || give_up "apt-get install chromium chromium-driver failed"
fi
command -v node >/dev/null || give_up "no node to run playwright-core"
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  (cd tests/browser && npm ci --silent --no-audit --no-fund >/dev/null 2>&1) \
    || give_up "npm ci in tests/browser failed"
fi
echo "browser tests: $(chromium --version), playwright-core $(node -p "require('./tests/browser/node_modules/playwright-core/package.json').version")"
