# Sourced by the A/B scripts: the old binary and the new one alternated, three rounds each,
# writing into the directory $d. `bin old|new` names the binaries (OLD, default
# /tmp/old-target/release/posenc, and target/release/posenc).
bin() { case $1 in old) echo "${OLD:-/tmp/old-target/release/posenc}" ;; new) echo target/release/posenc ;; esac; }

# Greedy generation's timing line, $2 tokens (default 64) after $1.
ab_generate() {
  : > "$d/generate.txt"
  for r in 1 2 3; do
    for b in old new; do
      line=$("$(bin $b)" generate --timing --temperature 0 --max-tokens "${2:-64}" "$1" 2>&1 >/dev/null | grep "loaded in")
      echo "$b $line" >> "$d/generate.txt"
    done
  done
}

# `bench train`'s step times of the reference and the toy model, without PyTorch.
ab_bench_train() {
  : > "$d/bench_train.txt"
  for r in 1 2 3; do
    for b in old new; do
      out=$("$(bin $b)" bench train --steps 40 --no-torch 2>&1)
      step() { echo "$out" | grep "^| $1" | awk -F'|' '{print $6}'; }
      echo "$b  $(step reference) $(step toy)" >> "$d/bench_train.txt"
    done
  done
}
