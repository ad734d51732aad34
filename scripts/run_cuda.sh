#!/usr/bin/env bash
# Runs, on a machine with an NVIDIA GPU, what scripts/build_cuda.sh built elsewhere
# (target/cuda/carry/binaries.tar.xz, unpacked into target/cuda/bin): first whether the binaries find CUDA 13's libraries there, then the
# device tests, which run the models on the GPU and compare them with the CPU, and the
# fused ops' tests, which run `ops::with_grad` (the GPU's softmax, norms, linear layer and
# attention, each one node with its backward) on the GPU against f64 compositions.
#
#   scripts/run_cuda.sh                 # the device tests
#   scripts/run_cuda.sh posenc ARGS…    # the carried posenc, e.g. `generate --device cuda`
#   scripts/run_cuda.sh PATH ARGS…      # another binary, with the same libraries
#
# The libraries are looked for in the system toolkit (/usr/local/cuda) and in the `nvidia`
# wheels of the machine's Python (PyTorch's). Exits non-zero, naming what is missing, when a
# binary cannot load.
set -euo pipefail
cd "$(dirname "$0")/.."
archive=target/cuda/carry/binaries.tar.xz
[ -f "$archive" ] || { echo "no $archive: run scripts/build_cuda.sh first (on a machine with Rust)" >&2; exit 1; }
carry=target/cuda/bin
mkdir -p "$carry"
# Unpacked once per archive: processes started together (gpu_check.sh lm-cells) must not
# overwrite a binary another is running.
if [ ! "$carry/.unpacked" -nt "$archive" ]; then
  tar -xJf "$archive" -C "$carry"
  touch "$carry/.unpacked"
fi
wheels=$(python3 - <<'EOF' 2> /dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
libs = {d for r in roots for d in glob.glob(os.path.join(r, "nvidia", "**", "lib"), recursive=True)}
print(":".join(sorted(libs)))
EOF
)
export LD_LIBRARY_PATH=${wheels:+$wheels:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The driver compiles candle's PTX kernels for this GPU as a process first loads them
# (13 s of `lm train` on an H200, docs/gpu/startup.log); a cache of 4 GiB here keeps them for
# the next process on this machine.
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$PWD/target/cuda/jit-cache}
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
missing=0
for b in "$carry"/*; do
  if ldd "$b" | grep "not found"; then
    echo "$b cannot load the libraries above" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 1
if [ $# -gt 0 ]; then
  exe=$1
  shift
  # A carried binary by name, or any other (an older build, say) by its path.
  case $exe in
    */*) exec "$exe" "$@" ;;
    *) exec "$carry/$exe" "$@" ;;
  esac
fi
# Each crate's tests are one binary: the model's device tests, then the kernels' fused ops.
"$carry/transformer-tests" devices:: --test-threads 1
"$carry/kernels-tests" fused_ops:: --test-threads 1
