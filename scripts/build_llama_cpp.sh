#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench`, `llama-simple`, `llama-passkey` and `llama-perplexity` from
# the PyPI sdist of llama-cpp-python (which vendors llama.cpp) into .cache/llama.cpp/: the
# baselines of `posenc bench generate`, of self-extend's passkey study
# (scripts/self_extend_study.sh) and of the quantized cache's (scripts/kv_cache_study.sh).
# cmake comes from PyPI into a private virtual environment when it is missing; a C++
# compiler (g++ from Debian) must be there.
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
cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF > /dev/null
# Compiler warnings go to a log: the vendored sources print thousands.
cmake --build "$tmp/build" --target $missing -j "$(nproc)" > "$tmp/build.log" 2>&1 \
  || { tail -n 40 "$tmp/build.log" >&2; exit 1; }
for tool in $missing; do
  cp "$tmp/build/bin/$tool" "$dest/$tool.tmp"
  mv "$dest/$tool.tmp" "$dest/$tool"
done
echo "llama.cpp (llama-cpp-python $version) in $dest:$missing built"
