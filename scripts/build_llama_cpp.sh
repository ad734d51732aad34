#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench`, `llama-simple`, `llama-passkey` and `llama-perplexity` from
# the PyPI sdist of llama-cpp-python (which vendors llama.cpp) into .cache/llama.cpp/: the
# baselines of `posenc bench generate`, of self-extend's passkey study
# (scripts/self_extend_study.sh) and of the quantized cache's (scripts/kv_cache_study.sh).
# cmake comes from PyPI into a private virtual environment when it is missing; a C++
# compiler (g++ from Debian) must be there.
#
# It builds for this CPU (GGML_NATIVE) and runs llama-bench on a short prompt of the SmolLM2
# GGUF (when scripts/fetch_smollm2.sh has fetched it). A CPU may advertise instructions its guest does
# not enable (AMX on some Intel guests), and the native build then dies by a signal: the
# script then builds again with the AVX levels the CPU reports named one by one and AMX off.
# Which build it kept, and why, is in .cache/llama.cpp/build.txt.
#
#   scripts/build_llama_cpp.sh     (minutes on two cores; does nothing once built)
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
cache=${POSENC_CACHE:-.cache}
dest=$cache/llama.cpp
tools="llama-bench llama-simple llama-passkey llama-perplexity"
missing=""
for tool in $tools; do
  [ -x "$dest/$tool" ] || missing="$missing $tool"
done
[ -z "$missing" ] && exit 0
command -v g++ > /dev/null || { echo "llama.cpp needs a C++ compiler: apt-get install g++" >&2; exit 1; }
mkdir -p "$dest"
if ! command -v cmake > /dev/null; then
  python3 -m venv "$dest/venv"
  "$dest/venv/bin/pip" install --quiet cmake
  export PATH="$(cd "$dest" && pwd)/venv/bin:$PATH"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The sdist (only it from source: `--no-binary :all:` would also build its build
# dependencies, cmake among them, from source just to read its metadata).
python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
  "llama-cpp-python==$version" -d "$tmp"
tar -xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp"
src="$tmp/llama_cpp_python-$version/vendor/llama.cpp"
common="-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF"
# Builds the missing tools with these cmake flags into $tmp/build-$1.
build() {
  local name=$1
  shift
  cmake -S "$src" -B "$tmp/build-$name" $common "$@" > /dev/null
  # Compiler warnings go to a log: the vendored sources print thousands.
  cmake --build "$tmp/build-$name" --target $missing llama-bench -j "$(nproc)" > "$tmp/build.log" 2>&1 \
    || { tail -n 40 "$tmp/build.log" >&2; exit 1; }
}
# llama-bench reading a 32-token prompt of the shipped GGUF and generating one token (a
# prompt takes the batched products, where a hidden instruction shows: on one Intel guest
# llama-simple's single token ran and llama-bench's prompt died by SIGSEGV); its exit
# status, above 128 when a signal killed it.
model=$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
probe() {
  [ -f "$model" ] || return 0
  local rc=0
  "$tmp/build-$1/bin/llama-bench" -m "$model" -p 32 -n 1 -r 1 -t "$(nproc)" \
    > "$tmp/probe.log" 2>&1 || rc=$?
  return $rc
}
# The AVX levels this CPU reports, each named, AMX off: the build that runs where the
# guest hides an instruction the CPU advertises.
named_levels() {
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  local out="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  for pair in avx:GGML_AVX avx2:GGML_AVX2 fma:GGML_FMA f16c:GGML_F16C avx512f:GGML_AVX512 \
    avx512_vbmi:GGML_AVX512_VBMI avx512_vnni:GGML_AVX512_VNNI avx512_bf16:GGML_AVX512_BF16 \
    avx_vnni:GGML_AVX_VNNI; do
    if printf '%s\n' "$flags" | tr ' ' '\n' | grep -qx "${pair%%:*}"; then
      out="$out -D${pair#*:}=ON"
    else
      out="$out -D${pair#*:}=OFF"
    fi
  done
  printf '%s' "$out"
}
build native -DGGML_NATIVE=ON
kept=native
flags="-DGGML_NATIVE=ON"
why="llama-bench read a 32-token prompt of $model and generated a token"
[ -f "$model" ] || why="not probed: no GGUF at $model (scripts/fetch_smollm2.sh fetches it)"
rc=0
probe native || rc=$?
if [ "$rc" -gt 128 ]; then
  signal=$((rc - 128))
  flags=$(named_levels)
  echo "llama.cpp's native build died by signal $signal in llama-bench; building with $flags" >&2
  # shellcheck disable=SC2086
  build named $flags
  rc=0
  probe named || rc=$?
  if [ "$rc" -gt 128 ]; then
    echo "the build with the levels named died by signal $((rc - 128)) too" >&2
    exit 1
  fi
  kept=named
  why="the native build died by signal $signal in llama-bench on $model; this one ran it"
elif [ "$rc" -ne 0 ]; then
  tail -n 20 "$tmp/probe.log" >&2
  echo "llama-bench on $model failed (exit $rc), not by a signal: see above" >&2
  exit 1
fi
for tool in $missing; do
  cp "$tmp/build-$kept/bin/$tool" "$dest/$tool.tmp"
  mv "$dest/$tool.tmp" "$dest/$tool"
done
printf 'llama-cpp-python %s, build %s\ncmake %s %s\n%s\n' "$version" "$kept" "$common" "$flags" "$why" \
  > "$dest/build.txt.tmp"
mv "$dest/build.txt.tmp" "$dest/build.txt"
echo "llama.cpp (llama-cpp-python $version, $kept build) in $dest:$missing built"
