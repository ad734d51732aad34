#!/usr/bin/env bash
# The toy half of docs/long-context: a small character model with `rope`, trained on
# Shakespeare at L = 64 (three seeds), evaluated at 64 to 1 024 characters zero-shot without
# scaling and with each RoPE scaling at the factor that reaches each length; then fine-tuned
# at 256 for 150 steps (`lm train --from`) without scaling, with linear (PI) and with YaRN at
# factor 4, and evaluated again. Minutes on two cores.
#
#   scripts/toy_long_context.sh [OUT]     (default runs/long-context/toy)
#
# Runs go to runs/toy-long (git-ignored); every evaluation is one JSON file in OUT, skipped
# when it exists. `cargo run --release --example long_context_report` reads them.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/long-context/toy}
runs=runs/toy-long
mkdir -p "$out" "$runs"
scripts/fetch_shakespeare.sh
posenc=target/release/posenc
cargo build --release --quiet --bin posenc

scaling() { # kind factor original
  case $1 in
    none) echo "" ;;
    llama3) echo "{\"rope_type\":\"llama3\",\"factor\":$2,\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position_embeddings\":$3}" ;;
    *) echo "{\"rope_type\":\"$1\",\"factor\":$2,\"original_max_position_embeddings\":$3}" ;;
  esac
}

evaluate() { # name model lengths [scaling]
  [ -s "$out/$1.json" ] && return
  local flags=()
  [ -n "${4:-}" ] && flags=(--rope-scaling "$4")
  "$posenc" lm eval --quiet --model "$2" --lengths "$3" --windows 64 --format json "${flags[@]}" \
    > "$out/$1.json.tmp"
  mv "$out/$1.json.tmp" "$out/$1.json"
}

train() { # dir, then flags
  local dir=$1
  shift
  [ -s "$dir/model.safetensors" ] && return
  "$posenc" lm train --quiet --force --out "$dir" "$@"
}

for seed in 1 2 3; do
  base=$runs/rope-L64-s$seed
  train "$base" --encoding rope --context 64 --d-model 64 --layers 2 --heads 4 \
    --steps 1000 --seed "$seed"
  evaluate "zeroshot-none-s$seed" "$base" 64,128,256,512,1024
  for kind in linear dynamic yarn llama3; do
    for len in 128 256 512 1024; do
      evaluate "zeroshot-$kind-$len-s$seed" "$base" "$len" "$(scaling $kind $((len / 64)) 64)"
    done
  done
  for kind in none linear yarn; do
    tuned=$runs/tuned-$kind-L256-s$seed
    flags=()
    json=$(scaling $kind 4 64)
    [ -n "$json" ] && flags=(--rope-scaling "$json")
    train "$tuned" --from "$base" --context 256 --steps 150 --seed "$seed" "${flags[@]}"
    evaluate "tuned-$kind-s$seed" "$tuned" 64,128,256,512,1024
  done
done
