# Sourced by the A/B scripts: the old binary and the new one alternated, $ROUNDS rounds each
# (default 3), the old one first in odd rounds and the new one first in even ones, so that
# neither always runs on a machine the other has just warmed; writing into the directory $d. `bin old|new` names the binaries (OLD, default
# /tmp/old-target/release/posenc, and target/release/posenc).

# The A/B record's directory, docs/speed/$1, made and named $d; the fetched models and
# corpora in the checkout's .cache unless POSENC_CACHE says otherwise.
ab_dir() {
  export POSENC_CACHE=${POSENC_CACHE:-$PWD/.cache}
  d=docs/speed/$1
  mkdir -p "$d"
}

# $1 lines of twelve words drawn (seed 0) from a vocabulary of eighteen, into $2: a corpus
# both binaries read the same.
ab_text() {
  python3 -c "
import random, sys; random.seed(0)
w = 'the cat dog sat on mat and ran far away from home to see a big red sun'.split()
print('\n'.join(' '.join(random.choice(w) for _ in range(12)) for _ in range(int(sys.argv[1]))))" "$1" > "$2"
}

# The LM task's default config for the corpus $1, the model's fields updated from the
# JSON object $2 and the training's from $3, into $4.
ab_lm_config() {
  "$(bin new)" lm train --text "$1" --out "$(dirname "$4")/unused" --print-config |
    python3 -c "import json, sys; c = json.load(sys.stdin); c['model'].update(json.loads(sys.argv[1])); c.update(json.loads(sys.argv[2])); print(json.dumps(c))" "$2" "$3" > "$4"
}

bin() { case $1 in old) echo "${OLD:-/tmp/old-target/release/posenc}" ;; new) echo target/release/posenc ;; esac; }

# The rounds, and the binaries in round $1's order.
rounds() { seq "${ROUNDS:-3}"; }
order() { if [ $(($1 % 2)) = 1 ]; then echo old new; else echo new old; fi; }

# Greedy generation's timing line, $2 tokens (default 64) after $1.
ab_generate() {
  : > "$d/generate.txt"
  for r in $(rounds); do
    for b in $(order "$r"); do
      line=$("$(bin $b)" generate --timing --temperature 0 --max-tokens "${2:-64}" "$1" 2>&1 >/dev/null | grep "loaded in")
      echo "$b $line" >> "$d/generate.txt"
    done
  done
}

# `bench train`'s step times of the reference and the toy model, without PyTorch.
ab_bench_train() {
  : > "$d/bench_train.txt"
  for r in $(rounds); do
    for b in $(order "$r"); do
      out=$("$(bin $b)" bench train --steps 40 --no-torch 2>&1)
      step() { echo "$out" | grep "^| $1" | awk -F'|' '{print $6}'; }
      echo "$b  $(step reference) $(step toy)" >> "$d/bench_train.txt"
    done
  done
}

# `bench embed`'s milliseconds per pass (MiniLM), without PyTorch.
ab_bench_embed() {
  : > "$d/bench_embed.txt"
  for r in $(rounds); do
    for b in $(order "$r"); do
      out=$("$(bin $b)" bench embed --rounds 3 --no-torch 2>&1)
      echo "$b $(echo "$out" | grep "^| posenc" | awk -F'|' '{print $3}')" >> "$d/bench_embed.txt"
    done
  done
}

# A checkpoint's header names its run (a fresh id each run): its tensors' table and bytes.
tensors() {
  python3 -c '
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n]); header.pop("__metadata__", None)
sys.stdout.buffer.write(json.dumps(header, sort_keys=True).encode() + raw[8 + n:])' "$1"
}
