#!/usr/bin/env bash
# Builds posenc and the device tests with `--features cuda` on a machine without a GPU, to
# carry to one (the lent H100/H200 has CUDA but no Rust). Nothing here needs a GPU.
#
#   scripts/build_cuda.sh                          # sm_90 (Hopper): binaries in target/cuda/carry
#   CUDA_COMPUTE_CAP=80 scripts/build_cuda.sh      # another GPU generation
#   scripts/build_cuda.sh --check                  # compile-check only (no linking)
#
# - nvcc, the CUDA headers and CCCL come from PyPI, pinned to CUDA 13.0, into
#   .cache/cuda/venv; their `nvidia/cu13` directory is the CUDA root (bin, include, lib).
# - candle's CUDA kernels are compiled by that nvcc for the given compute capability (PTX
#   embedded in the binary; the quantized GEMM kernels as device code).
# - candle's bindings (cudarc, `dynamic-linking`) link against libcuda, libcublas,
#   libcublasLt, libcurand and libnvrtc. Those come with a GPU's driver and toolkit, not with
#   these wheels, so the link takes stubs: a library of each name and soname (CUDA 13's)
#   defining the functions the compiled crates call, made here from their undefined
#   symbols. The binaries then load the real libraries of the machine they run on, binding
#   each function at its first call (`-C relro-level=partial`), so a function that machine's
#   libraries lack fails only if it is called.
# - The binaries (`posenc`, and the test binaries of posenc-transformer, with the device
#   tests, and of posenc-kernels, with the fused ops, whose `with_grad` test also runs on each
#   GPU present) are stripped into
#   target/cuda/bin and packed, xz-compressed, into target/cuda/carry/binaries.tar.xz,
#   checked against the 64 MiB that a device run can carry (200 MB stripped, 23 packed),
#   with the wheel of the `gguf` package that scripts/gpu_check.sh installs there.
#
# A fresh build takes about 17 minutes on two cores (candle's kernels in nvcc are a third),
# 400 MB of wheels and several GB of target/cuda. Run the carried binaries with
# scripts/run_cuda.sh on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cap=${CUDA_COMPUTE_CAP:-90}
venv=.cache/cuda/venv
check=false
[ "${1:-}" = --check ] && check=true

if ! "$venv/bin/python" -c "import nvidia" 2> /dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
root=$site/nvidia/cu13
# cudarc searches $CUDA_ROOT/lib/stubs for the libraries it links: the stubs go there, and
# the directory must exist before its build script runs.
stubs=$root/lib/stubs
mkdir -p "$stubs"
ln -sf "$root/lib/libcudart.so.13" "$root/lib/libcudart.so"
export PATH=$root/bin:$PATH CUDA_ROOT=$root CUDA_PATH=$root CUDA_HOME=$root
export CUDA_COMPUTE_CAP=$cap CARGO_TARGET_DIR=$PWD/target/cuda
export RUSTFLAGS="-C relro-level=partial"
nvcc --version | tail -2

if $check; then
  cargo check --workspace --all-targets --features cuda
  echo "the CUDA build compiles (sm_$cap)"
  exit 0
fi

# Everything but the executables, then the stubs from what it calls.
cargo build --release --features cuda -p posenc-cli --lib
syms=$(mktemp)
nm -u --format=just-symbols "$CARGO_TARGET_DIR"/release/deps/*.rlib \
  "$CARGO_TARGET_DIR"/release/build/candle-kernels-*/out/*.a 2> /dev/null | sort -u > "$syms"
stub() { # name soname pattern [exclude]
  # Each returns 100, CUDA_ERROR_NO_DEVICE: run against the stubs, a binary sees no GPU.
  grep -E "$3" "$syms" | grep -vE "${4:-^$}" | sed 's/.*/int &(void) { return 100; }/' > "$stubs/$1.c"
  cc -shared -fPIC -Wl,-soname,"$2" -o "$stubs/lib$1.so" "$stubs/$1.c"
  echo "stub lib$1.so ($2): $(wc -l < "$stubs/$1.c") functions"
}
stub cuda libcuda.so.1 '^cu[A-Z]'
stub nvrtc libnvrtc.so.13 '^nvrtc'
stub curand libcurand.so.10 '^curand'
stub cublasLt libcublasLt.so.13 '^cublasLt'
stub cublas libcublas.so.13 '^cublas' '^cublasLt'
rm -f "$syms"

cargo build --release --features cuda -p posenc-cli --bin posenc
# Each crate's tests are one binary, `tests`: carried as `<crate folder>-tests`.
tests=$(cargo test --release --features cuda -p posenc-transformer -p posenc-kernels --test tests \
  --no-run --message-format=json | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        crate = os.path.basename(os.path.dirname(m["manifest_path"]))
        print(crate + "-tests=" + m["executable"])')
bin=$CARGO_TARGET_DIR/bin
rm -rf "$bin" && mkdir -p "$bin"
cp "$CARGO_TARGET_DIR/release/posenc" "$bin/posenc"
for t in $tests; do
  cp "${t#*=}" "$bin/${t%%=*}"
done
strip "$bin"/*
# Stripped, they are 200 MB (candle's kernels for the GPU are most of it); compressed, what
# a device run carries.
carry=$CARGO_TARGET_DIR/carry
rm -rf "$carry" && mkdir -p "$carry"
tar -C "$bin" -cf - . | xz -T2 -6 > "$carry/binaries.tar.xz"
# Where posenc looks for the repository's scripts and caches (scripts/gpu_check.sh links it).
echo "$PWD" > "$carry/built-in"
# transformers reads a GGUF with the `gguf` package, which the GPU machine's Python lacks
# and cannot fetch (gpu_check.sh installs it from here): pure Python, 120 kB.
python3 -m pip download --quiet --no-deps gguf==0.19.0 -d "$carry"
du -b "$bin"/* "$carry"/* | awk '{ printf "%6.1f MiB  %s\n", $1 / 1048576, $2 }
  index($2, "/carry/") { carried += $1 } END { exit carried > 64 * 1048576 }' ||
  { echo "target/cuda/carry is past the 64 MiB a device run carries" >&2; exit 1; }
echo "linked against stubs; carry target/cuda/carry, then on the GPU machine: scripts/run_cuda.sh"
