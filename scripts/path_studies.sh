#!/usr/bin/env bash
# PaTH (with and without its forget gate), QK-norm on NoPE and on RoPE, and the four
# presets, three seeds each, in the settings of the length-generalization studies (copy and
# sort: 3 layers, width 64, trained on lengths 1–10) and of the Shakespeare extrapolation
# (4 layers, width 128, L = 64, read at 1L–8L). Each study's records are pooled, for its
# claims, with the same setting's earlier studies (RoPE, FoX, ALiBi, NoPE). Writes
# docs/lengthgen/{copy,sort}/path and docs/lm-experiment-path, results.md rendered by
# `posenc report` from the claims declared before the runs. About 1.5 hours on two cores.
# Pass a stage (copy, sort, lm) to run only that one.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
posenc=target/release/posenc
encs='path,path:forget_gate=true:label=path-gate,qk-norm:label=none-qk-norm,{"kind":"stack","of":["rope","qk-norm"],"label":"rope-qk-norm"},llama4,gpt-oss,gemma3,rnope-swa'
stages=${1:-copy sort lm}
for task in copy sort; do
  case " $stages " in *" $task "*) ;; *) continue ;; esac
  runs=runs/lengthgen-path/$task
  $posenc lengthgen experiment --task "$task" --seeds 3 --encodings "$encs" --out "$runs" --quiet
  out=docs/lengthgen/$task/path
  mkdir -p "$out"
  cp "$runs/results.json" "$runs/accuracy_by_length.png" "$out/"
  $posenc report "$out"
done
case " $stages " in *" lm "*)
  $posenc lm experiment --seeds 3 --encodings "$encs" --out runs/lm-path --quiet
  $posenc lm experiment --pool docs/lm-experiment/results.json docs/lm-experiment-fox/results.json runs/lm-path/results.json --out docs/lm-experiment-path
  $posenc report docs/lm-experiment-path
  ;;
esac
