#!/usr/bin/env python3
"""llama.cpp's own passkey example (`llama-passkey`, built by scripts/build_llama_cpp.sh) as
the baseline of `posenc lm passkey --self-extend`: the same prompt (llama.cpp's text, which
posenc's passkey task copies), the same length to within a filler sentence, the same
depths, and self-extend with the same group (`--grp-attn-n`) and window (its batch,
`-b`, which is the window that example keeps at full resolution). One trial per depth and
seed. Its key is llama.cpp's own: the example draws it from `rand()` unseeded, so every run
has the same key (39384), and `--seed` seeds only the sampler, which is greedy here.

    scripts/llama_cpp_passkey.py --model .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        --length 16384 --depths 0.1,0.5,0.9 --seeds 0 --group 4 --window 2048 --out records.json

writes tidy records (pandas.read_json), one per trial: the prompt's tokens as llama.cpp
counted them, the depth, the key, the answer, whether its first number is the key, the
wall time, and the settings.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

# Tokens of one filler sentence under SmolLM2's tokenizer, and of the rest of the prompt
# (llama.cpp counts 2 464 tokens with 100 fillers and 16 192 with 672): the number of
# fillers that makes a prompt of the length asked for.
FILLER_TOKENS = 24.0
OVERHEAD = 64

ap = argparse.ArgumentParser()
ap.add_argument("--binary", default=os.path.join(os.environ.get("POSENC_CACHE", ".cache"),
                                                 "llama.cpp", "llama-passkey"))
ap.add_argument("--model", required=True)
ap.add_argument("--length", type=int, required=True)
ap.add_argument("--depths", default="0.1,0.5,0.9")
ap.add_argument("--seeds", default="0")
ap.add_argument("--group", type=int, required=True)
ap.add_argument("--window", type=int, required=True)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--out", required=True)
a = ap.parse_args()
if a.group < 1 or a.window < 1 or a.window % a.group:
    raise SystemExit(f"--window {a.window} must be a positive multiple of --group {a.group}")

junk = max(1, round((a.length - OVERHEAD) / FILLER_TOKENS))
records = []
for seed in [int(s) for s in a.seeds.split(",")]:
    for depth in [float(d) for d in a.depths.split(",")]:
        pos = min(junk - 1, int(depth * junk))
        cmd = [a.binary, "-m", a.model, "--junk", str(junk), "--pos", str(pos),
               "--grp-attn-n", str(a.group), "-b", str(a.window), "-ub", str(a.window),
               "-t", str(a.threads), "--seed", str(seed)]
        start = time.time()
        run = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.time() - start
        if run.returncode != 0:
            raise SystemExit(f"llama-passkey failed ({run.returncode}):\n{run.stderr[-2000:]}")
        # The log on standard error; the generated text alone on standard output.
        key = re.search(r"passkey = (\d+)", run.stderr).group(1)
        tokens = int(re.search(r"prompt tokens: (\d+)", run.stderr).group(1))
        answer = run.stdout.strip("\n").split("\n")[0]
        first = re.search(r"\d+", answer)
        records.append({
            "tool": "llama.cpp", "length": a.length, "tokens": tokens, "depth": depth,
            "seed": seed, "key": key, "answer": answer, "correct": bool(first and first.group(0) == key),
            "seconds": seconds, "group": a.group, "window": a.window, "junk": junk, "pos": pos,
        })
        print(json.dumps(records[-1]), flush=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.out)))
        with os.fdopen(fd, "w") as f:
            json.dump(records, f, indent=2)
            f.write("\n")
        os.replace(tmp, a.out)
