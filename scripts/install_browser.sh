#!/usr/bin/env bash
# Installs the clients the explorer's tests drive it with: for the browser test
# (tests/browser/), Debian's chromium and chromium-driver by apt and playwright-core (pinned
# in tests/browser/package-lock.json) by npm, which drives that Chromium (it downloads no
# browser of its own); for the chat endpoint's test (tests/openai/), OpenAI's Python client
# (pinned in tests/openai/requirements.txt) by pip, in tests/openai/.venv.
#
# Where one cannot be installed (no root, no apt, no network), this says why in its
# directory's `.unavailable` and exits 0: that test then skips, printing the reason. Nothing
# else is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
# The OpenAI client first: the browser's steps below end the script when they give up.
openai_reason=tests/openai/.unavailable
rm -f "$openai_reason"
if [ ! -x tests/openai/.venv/bin/python ] || ! tests/openai/.venv/bin/python -c "import openai" 2>/dev/null; then
  { python3 -m venv tests/openai/.venv >/dev/null 2>&1 \
      && tests/openai/.venv/bin/pip install -q --disable-pip-version-check -r tests/openai/requirements.txt >/dev/null 2>&1; } \
    || echo "install_browser.sh: pip could not install tests/openai/requirements.txt (no python3-venv or no network?)" | tee "$openai_reason" >&2
fi
[ -f "$openai_reason" ] || echo "chat endpoint test: openai $(tests/openai/.venv/bin/python -c 'import openai; print(openai.__version__)')"
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
