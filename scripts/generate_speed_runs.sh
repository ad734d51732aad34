#!/usr/bin/env bash
# Three invocations of `posenc bench generate` (SmolLM2-135M-Instruct Q4_1 against
# llama.cpp's llama-bench, 3 alternating rounds each, its defaults), one after another,
# each log kept as printed (generate-1.txt …), with the machine and llama.cpp's build
# settings (machine.txt), in docs/generate/runs-<date>/ or DIR. A log is written whole, so
# an interrupted run leaves none; a log already there is kept. Run it with nothing else on
# the cores, or say what shared them in POSENC_SHARED. The table of the logs is
# `python3 scripts/speed_table.py DIR`.
#
#   bash scripts/build_llama_cpp.sh && cargo build --release && bash scripts/generate_speed_runs.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/generate/runs-$(date -u +%F)}
bin=target/release/posenc
[ -x "$bin" ] || { echo "build it first: cargo build --release" >&2; exit 1; }
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) posenc $(git rev-parse --short HEAD), ${POSENC_SHARED:-nothing else running}"
  lscpu | grep -E '^(CPU\(s\)|Model name):'
  grep -q avx512f /proc/cpuinfo && echo "Flags: (avx512f present)"
  grep -q avx512_vnni /proc/cpuinfo && echo "Flags: (avx512_vnni present)"
  echo "llama.cpp: llama-cpp-python's vendored sources, built by scripts/build_llama_cpp.sh:"
  cat "${POSENC_CACHE:-.cache}/llama.cpp/build.txt" 2>/dev/null \
    || echo "(no build.txt: built before the script recorded its build)"
} > "$out/machine.txt"
for i in 1 2 3; do
  log=$out/generate-$i.txt
  [ -s "$log" ] && continue
  "$bin" bench generate > "$log.tmp"
  mv "$log.tmp" "$log"
done
echo "$out"
