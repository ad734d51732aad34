#!/usr/bin/env bash
# Greedy text of SmolLM2-135M-Instruct (Q4_1), posenc's against llama.cpp's: installs
# llama-cpp-python 0.3.36 from its PyPI sdist (built here with GGML_NATIVE, as
# scripts/build_llama_cpp.sh builds llama-bench) into .cache/llama.cpp/venv, builds posenc,
# and runs scripts/compare_llama_cpp.py. Writes docs/generate/greedy.json.
#
#   scripts/compare_llama_cpp.sh      (the first run builds llama.cpp: minutes on two cores)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/llama.cpp/venv
bash scripts/fetch_smollm2.sh
if ! "$venv/bin/python" -c "import llama_cpp" 2> /dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet cmake
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=OFF" PATH="$PWD/$venv/bin:$PATH" \
    "$venv/bin/pip" install --quiet --no-binary llama-cpp-python llama-cpp-python==0.3.36
fi
cargo build --release --quiet -p posenc-cli
mkdir -p docs/generate
"$venv/bin/python" scripts/compare_llama_cpp.py --posenc target/release/posenc \
  --model .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out docs/generate/greedy.json "$@"
