#!/usr/bin/env bash
# The GPU checks, run on the GPU machine with what scripts/build_cuda.sh built (carried in
# target/cuda/carry) and the models in .cache where they are there. Each stage writes its
# log to $LOGS (default target/cuda/logs) and prints it.
#
#   scripts/gpu_check.sh tests      # the device tests, then `bench train --device cuda`
#                                   # against PyTorch on the same GPU
#   scripts/gpu_check.sh train-ab OLD.tar.xz [ROUNDS]  # `bench train --device cuda` of an
#                                   # older posenc (the archive holds its `posenc`) and of
#                                   # this one, alternating, ROUNDS (default 2) each
#   scripts/gpu_check.sh embed      # all-MiniLM-L6-v2 (.cache/all-MiniLM-L6-v2):
#                                   # `bench embed --device cuda` against transformers there
#   scripts/gpu_check.sh generate [--speed-only]  # SmolLM2 (.cache/smollm2):
#                                   # scripts/gpu_smollm2.py
#   scripts/gpu_check.sh lm         # the Shakespeare corpus (.cache/shakespeare): 20 steps
#                                   # of `lm train` on the GPU and on the CPU (their losses
#                                   # should agree to float tolerance), then
#   scripts/gpu_check.sh lm-experiment [ARGS…]  # the LM extrapolation experiment at a size
#                                   # the CPU cannot reach (scripts/gpu_lm_base.json: width
#                                   # 512, 8 layers, context 256, 300 steps, evaluated to
#                                   # 16 × 256): 4 encodings × 2 seeds; ARGS are added to
#                                   # `lm experiment` (e.g. --steps 1000). On an H200 a run
#                                   # took 57–76 s, 26–35 s of it training and about 26 s
#                                   # its final checkpoint, which AdamW::state's fix since
#                                   # removed (docs/gpu/h100/startup.log); the 8 runs took
#                                   # two calls. On the H100 a 1 200-step run trained in
#                                   # 112–151 s. A call that stops leaves the runs it
#                                   # finished and the checkpoints (every 500 steps) of
#                                   # the one it was in, which the next call reuses or
#                                   # resumes (same machine only). ENCODINGS, SEEDS and EXPERIMENT_OUT replace
#                                   # the encodings, the number of seeds (2) and the
#                                   # output directory: NoPE and FIRE
#                                   # need more than 300 steps to leave the plateau (README),
#                                   # e.g. ENCODINGS=none,fire EXPERIMENT_OUT=target/cuda/lm-1200
#                                   # scripts/gpu_check.sh lm-experiment --steps 1200
#   scripts/gpu_check.sh lm-cells SECONDS ENCODING@SEED…  # the same experiment, one
#                                   # process per cell (an encoding and a seed), JOBS
#                                   # (default 1) at once on the one GPU, each in its own
#                                   # directory (and log, DIR.log) of EXPERIMENT_OUT (default
#                                   # target/cuda/lm-cells), STEPS (default 1200) steps; a
#                                   # cell starts only with more than 60 s left and is cut
#                                   # at SECONDS; the GPU's load and memory are logged every
#                                   # 5 s (gpu_load.log), and the finished cells' results
#                                   # are packed into $OUT/lm-cells.tar.gz when $OUT is set.
#                                   # Pool the cells with `posenc lm experiment --pool`. One
#                                   # process already keeps the GPU busy: three at once took
#                                   # 3.6 times as long each (docs/gpu/README.md), so JOBS=1
#                                   # unless that changes
#   scripts/gpu_check.sh startup    # three two-step `lm train` processes at the experiment's
#                                   # size (CUDA's JIT cache emptied first, then warm, then
#                                   # warm at batch 1), each line of output and each change
#                                   # in the GPU's memory (nvidia-smi, about every 50 ms)
#                                   # with its time: where a process's time and memory go
#                                   # (docs/gpu/startup.log)
#   scripts/gpu_check.sh all SECONDS   # what a lent session still has to check, in one call
#                                   # ending before SECONDS have passed, in this order:
#                                   # tests (the device tests and the training ratio),
#                                   # generate and embed (where their models are in
#                                   # .cache), then lm-experiment with ENCODINGS (default
#                                   # t5, the first encoding docs/gpu/lm-1200 lacks; it has
#                                   # NoPE, FIRE, RoPE and ALiBi) and STEPS (default 1200)
#                                   # with the time left; each stage is
#                                   # cut at the deadline, and the logs (and the experiment's
#                                   # results) are packed into $OUT/gpu.tar.gz when $OUT is set
#
# Where a call cannot carry a model whole (64 MiB, the repository included),
# scripts/carry_pieces.py cuts it into pieces here and joins them there.
# PyTorch and transformers are the machine's own `python3` (POSENC_PYTHON overrides it);
# the SmolLM2 stage needs the `gguf` package too (transformers reads the GGUF with it),
# installed from the wheel in target/cuda/carry.
# posenc finds the repository's scripts and caches at the path it was built in: when the
# checkout here is elsewhere, that path is made a link to it.
set -euo pipefail
cd "$(dirname "$0")/.."
logs=${LOGS:-target/cuda/logs}
mkdir -p "$logs"
# The checkout's path where the binaries were built (scripts/build_cuda.sh writes it).
built=$(cat target/cuda/carry/built-in 2> /dev/null || echo "$PWD")
if [ "$built" != "$PWD" ] && [ ! -e "$built" ]; then
  mkdir -p "$(dirname "$built")"
  ln -s "$PWD" "$built"
fi
export POSENC_PYTHON=${POSENC_PYTHON:-python3}
# Each step's failure is reported, and the next step still runs.
status=0
step() {
  local log=$1
  shift
  "$@" 2>&1 | tee "$logs/$log" || { echo "FAILED: $*" >&2; status=1; }
}

# The `startup` stage's three processes, into $1; fails if one of them did.
startup() {
  local logs=$1 failed=0 probe name sampler t0
  for probe in "cold JIT cache, batch 32:" "warm JIT cache, batch 32:" "warm JIT cache, batch 1:--batch-size 1"; do
    name=${probe%%:*}
    # The memory in use and each output line, stamped with the wall clock, merged by time.
    while :; do
      echo "$EPOCHREALTIME [GPU memory $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) MiB]"
      sleep 0.03
    done > "$logs/startup_memory.log" &
    sampler=$!
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086 # the probe's extra flags, split on purpose
    scripts/run_cuda.sh posenc lm train --config scripts/gpu_lm_base.json --device cuda \
      --steps 2 --force --out target/cuda/startup ${probe#*:} 2>&1 |
      while IFS= read -r line; do echo "$EPOCHREALTIME $line"; done > "$logs/startup_output.log" ||
      { echo "FAILED: lm train, $name" >&2; failed=1; }
    kill "$sampler"
    echo "== $name"
    sort -n "$logs/startup_memory.log" "$logs/startup_output.log" |
      awk -v t0="$t0" '/^[0-9.]+ \[GPU memory / { if (seen && $4 == last) next; seen = 1; last = $4 }
        { t = $1; $1 = ""; printf "%7.2f s %s\n", t - t0, $0 }'
  done
  return $failed
}

stage=${1:?"which stage: tests, train-ab, embed, generate, lm, lm-experiment, lm-cells, startup or all"}
case $stage in
  all)
    seconds=${2:?"how many seconds the stages may take"}
    deadline=$((SECONDS + seconds))
    pack() {
      [ -n "${OUT:-}" ] || return 0
      # The experiments' results and figures, not their runs' weights.
      tar -czf "$OUT/gpu.tar.gz" "$logs" $(ls target/cuda/lm-experiment*/results.* target/cuda/lm-experiment*/*.png 2> /dev/null) 2> /dev/null || true
    }
    # Each stage in a process of its own, cut at the deadline; 124 is a stage that ran out.
    within() {
      local left=$((deadline - SECONDS))
      if [ "$left" -le 10 ]; then
        echo "== skipped (out of time): $*" | tee -a "$logs/all.log"
        return 0
      fi
      echo "== $* ($left s left, $(date +%T))" | tee -a "$logs/all.log"
      timeout "$left" "$PWD/scripts/gpu_check.sh" "$@" || { echo "== exit $?: $*" | tee -a "$logs/all.log"; status=1; }
      pack
    }
    within tests
    if ls .cache/smollm2/*.gguf > /dev/null 2>&1; then
      within generate
    else
      echo "== skipped (no GGUF in .cache/smollm2): generate" | tee -a "$logs/all.log"
    fi
    if [ -f .cache/all-MiniLM-L6-v2/model.safetensors ]; then
      within embed
    else
      echo "== skipped (no .cache/all-MiniLM-L6-v2): embed" | tee -a "$logs/all.log"
    fi
    ENCODINGS=${ENCODINGS:-t5} EXPERIMENT_OUT=${EXPERIMENT_OUT:-target/cuda/lm-experiment-${STEPS:-1200}} \
      within lm-experiment --steps "${STEPS:-1200}"
    pack
    ;;
  tests)
    step devices.log scripts/run_cuda.sh
    step bench_train.log scripts/run_cuda.sh posenc bench train --device cuda --steps 40
    ;;
  train-ab)
    old=${2:?"the archive of the older posenc"}
    [ -f "$old" ] || { echo "no archive $old (a tar.xz holding an older posenc)" >&2; exit 2; }
    mkdir -p target/cuda/old
    tar -xJf "$old" -C target/cuda/old
    for round in $(seq "${3:-2}"); do
      for which in old new; do
        exe=posenc
        [ $which = old ] && exe=target/cuda/old/posenc
        echo "== $which, round $round" | tee -a "$logs/train_ab.log"
        step train_ab_run.log scripts/run_cuda.sh "$exe" bench train --device cuda --steps 40
        cat "$logs/train_ab_run.log" >> "$logs/train_ab.log"
      done
    done
    ;;
  embed)
    step bench_embed.log scripts/run_cuda.sh posenc bench embed --device cuda --rounds 5 \
      --model .cache/all-MiniLM-L6-v2
    ;;
  generate)
    # The machine's python3 has no `gguf` (transformers reads the GGUF with it): the wheel
    # scripts/build_cuda.sh put beside the binaries, into that python3 (not a `pip` on the
    # path, which may be another Python's: on the H100 it was).
    if ! python3 -c "import gguf" 2> /dev/null; then
      python3 -m pip install --quiet --no-deps target/cuda/carry/gguf-*.whl ||
        { echo "python3 has no gguf package, and none is in target/cuda/carry (scripts/build_cuda.sh)" >&2; exit 1; }
    fi
    step smollm2.log python3 scripts/gpu_smollm2.py "${@:2}"
    ;;
  lm)
    for device in cuda cpu; do
      step "lm_train_$device.log" scripts/run_cuda.sh posenc lm train --quiet --force \
        --out "target/cuda/lm-$device" --steps 20 --device "$device"
    done
    ;;
  lm-cells)
    seconds=${2:?"how many seconds the cells may take"}
    [ $# -gt 2 ] || { echo "which cells: ENCODING@SEED, e.g. alibi@1337" >&2; exit 2; }
    # In epoch seconds: each cell runs in a shell of its own, whose SECONDS start at 0.
    deadline=$(($(date +%s) + seconds))
    out=${EXPERIMENT_OUT:-target/cuda/lm-cells}
    mkdir -p "$out"
    # Unpacked and checked once, before the cells start together.
    scripts/run_cuda.sh /bin/true
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 \
      > "$logs/gpu_load.log" 2>&1 &
    sampler=$!
    cell() { # ENCODING@SEED
      local encoding=${1%@*} seed=${1#*@} left=$((deadline - $(date +%s))) dir
      dir=$out/$(echo "$encoding" | tr -c 'A-Za-z0-9.\n-' _)-$seed
      if [ "$left" -le 60 ]; then
        echo "$(date +%T) skipped $1 ($left s left)"
        return 0
      fi
      echo "$(date +%T) start $1 ($left s left)"
      timeout "$left" scripts/run_cuda.sh posenc lm experiment --device cuda \
        --base scripts/gpu_lm_base.json --seeds 1 --seed "$seed" --encodings "$encoding" \
        --factors 1,2,4,8,16 --steps "${STEPS:-1200}" --out "$dir" > "$dir.log" 2>&1
      echo "$(date +%T) $1: exit $?"
    }
    export -f cell
    export deadline out
    printf '%s\n' "${@:3}" | xargs -P "${JOBS:-1}" -I{} bash -c 'cell "$1"' _ {} | tee "$logs/lm_cells.log"
    kill "$sampler" 2> /dev/null || true
    if [ -n "${OUT:-}" ]; then
      tar -czf "$OUT/lm-cells.tar.gz" "$logs" \
        $(ls "$out"/*.log "$out"/*/results.* "$out"/*/*.png 2> /dev/null) || true
    fi
    ;;
  startup)
    rm -rf target/cuda/jit-cache
    startup "$logs" 2>&1 | tee "$logs/startup.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    ;;
  lm-experiment)
    step lm_experiment.log scripts/run_cuda.sh posenc lm experiment --device cuda \
      --base scripts/gpu_lm_base.json --seeds "${SEEDS:-2}" --out "${EXPERIMENT_OUT:-target/cuda/lm-experiment}" \
      --encodings "${ENCODINGS:-none,rope,alibi,fire}" --factors 1,2,4,8,16 "${@:2}"
    ;;
  *)
    echo "unknown stage $stage: tests, train-ab, embed, generate, lm, lm-experiment, lm-cells, startup or all" >&2
    exit 2
    ;;
esac
exit $status
