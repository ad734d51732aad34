#!/usr/bin/env python3
"""Reference answers of SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to f32 by
transformers) to a fixed set of `posenc lm ruler` prompts.

The prompts are the ones `posenc lm ruler --print-prompts` builds (token ids): every task
at seed 0, the needle and tracking tasks at 512 tokens, common words at 2 600 (its ten
common words, thirty times each, take over 2 000 tokens with this tokenizer). transformers
reads each prompt and continues it greedily for the task's budget, stopping at the
end-of-sequence token; the answers are written with the prompts to
crates/lm/tests/fixtures/ruler.json. The test `ruler::answers_match_transformers` builds
the same prompts and checks posenc's greedy answers (the GGUF at f32) against these.

Needs the GGUF in .cache/smollm2 (scripts/fetch_smollm2.sh), the release binary
(`cargo build --release`), and the packages of scripts/requirements.txt.
"""
import json
import os
import subprocess

import torch
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(__file__), "..")
DIR = os.path.join(ROOT, ".cache", "smollm2")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "crates", "lm", "tests", "fixtures", "ruler.json")
POSENC = os.path.join(ROOT, "target", "release", "posenc")
EOS = 2

SETS = [
    ("niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt", "512"),
    ("cwe", "2600"),
]


def prompts():
    out = []
    for tasks, length in SETS:
        text = subprocess.run(
            [POSENC, "lm", "ruler", "--model", "smollm2", "--tasks", tasks,
             "--lengths", length, "--seeds", "0", "--print-prompts"],
            check=True, capture_output=True, text=True, cwd=ROOT,
        ).stdout
        out.extend(json.loads(text))
    return out


def main():
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file=GGUF, dtype=torch.float32)
    model.eval()
    records = []
    for p in prompts():
        x = torch.tensor([p["ids"]])
        with torch.no_grad():
            out = model.generate(
                x,
                max_new_tokens=p["max_new"],
                do_sample=False,
                attention_mask=torch.ones_like(x),
                pad_token_id=EOS,
                eos_token_id=EOS,
            )
        answer = out[0, len(p["ids"]):].tolist()
        if answer and answer[-1] == EOS:
            answer = answer[:-1]
        records.append({**p, "answer_ids": answer})
        print(p["task"], len(p["ids"]), "tokens,", len(answer), "answer tokens")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT + ".part", "w") as f:
        json.dump(records, f)
        f.write("\n")
    os.replace(OUT + ".part", OUT)


if __name__ == "__main__":
    main()
