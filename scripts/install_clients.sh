#!/usr/bin/env bash
# Installs the clients the tests read posenc's output with, each pinned:
# - for the chat endpoint's test (tests/openai/), OpenAI's Python client
#   (tests/openai/requirements.txt) by pip, in tests/openai/.venv;
# - for the training logs' test (tests/tensorboard/), TensorBoard's event reader
#   (tests/tensorboard/requirements.txt) by pip, in tests/tensorboard/.venv;
# - for the explorer's browser test (tests/browser/), Debian's chromium and chromium-driver
#   by apt and playwright-core (tests/browser/package-lock.json) by npm, which drives that
#   Chromium (it downloads no browser of its own).
#
# Where one cannot be installed (no root, no apt, no network), this says why in its
# directory's `.unavailable` and exits 0: that test then skips, printing the reason. Nothing
# else is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

# A Python client in tests/$1/.venv from tests/$1/requirements.txt; $2 imports it, $3 names it.
python_client() {
  local dir=tests/$1 module=$2 what=$3
  rm -f "$dir/.unavailable"
  if [ ! -x "$dir/.venv/bin/python" ] || ! "$dir/.venv/bin/python" -c "import $module" 2>/dev/null; then
    { python3 -m venv "$dir/.venv" >/dev/null 2>&1 \
        && "$dir/.venv/bin/pip" install -q --disable-pip-version-check -r "$dir/requirements.txt" >/dev/null 2>&1; } \
      || echo "install_clients.sh: pip could not install $dir/requirements.txt (no python3-venv or no network?)" | tee "$dir/.unavailable" >&2
  fi
  [ -f "$dir/.unavailable" ] || echo "$what: $module $("$dir/.venv/bin/python" -c "import $module; print($module.__version__)")"
}
# The Python clients first: the browser's steps below end the script when they give up.
python_client openai openai "chat endpoint test"
python_client tensorboard tensorboard "training logs test"

reason=tests/browser/.unavailable
rm -f "$reason"
give_up() { echo "install_clients.sh: $1" | tee "$reason" >&2; exit 0; }
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
