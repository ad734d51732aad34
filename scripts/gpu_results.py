#!/usr/bin/env python3
"""docs/gpu/results.csv from the logs scripts/gpu_check.sh wrote (copied into docs/gpu).

One row per figure: check, implementation, measure, value, unit, gpu. Standard library
only.

    python3 scripts/gpu_results.py docs/gpu
"""
import csv
import json
import re
import sys
from pathlib import Path


def gpu_of(text):
    """The GPU's name, from the nvidia-smi line run_cuda.sh prints first."""
    return text.splitlines()[0].split(",")[0].strip()


def rows_of_train(text, gpu):
    phases = ["forward", "backward", "optimizer", "step"]
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"[\d.]+", cells[1]):
            continue
        name = cells[0]
        who = "PyTorch" if name.startswith("PyTorch") else "posenc"
        config = "reference" if "reference" in name else "toy"
        for phase, value in zip(phases, cells[1:]):
            yield ["train " + config, who, phase, float(value), "ms", gpu]


def rows_of_embed(text, gpu):
    for line in text.splitlines():
        m = re.match(r"\| (posenc|PyTorch)[^|]* \| (\d+) \|", line)
        if m:
            yield ["embed all-MiniLM-L6-v2", m.group(1), "pass", float(m.group(2)), "ms", gpu]
        m = re.search(r"largest absolute difference ([\d.e+-]+), smallest cosine similarity "
                      r"([\d.]+)", line)
        if m:
            yield ["embed all-MiniLM-L6-v2", "posenc vs PyTorch", "max abs difference",
                   float(m.group(1)), "", gpu]
            yield ["embed all-MiniLM-L6-v2", "posenc vs PyTorch", "min cosine",
                   float(m.group(2)), "", gpu]


# SmolLM2's GGUF ends a sequence at `<|im_end|>`, where posenc stops; the run in docs/gpu
# cut transformers' text at its tokenizer's end token instead (`<|endoftext|>`), so its
# text is cut here where posenc's stops.
END = "<|im_end|>"


def rows_of_smollm2(text):
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    speed = next(r for r in records if "gpu" in r)
    gpu = speed["gpu"]
    for r in records:
        if "prompt" not in r:
            continue
        reference = r["transformers_cuda"].split(END)[0]
        for key in ["posenc_cuda_f32", "posenc_cuda_quantized", "posenc_cpu_f32"]:
            yield ["smollm2 greedy " + r["prompt"], key, "same text as transformers",
                   int(r[key] == reference), "", gpu]
    for who in ["transformers", "posenc_f32", "posenc_quantized"]:
        for measure in ["prompt_tok_s", "decode_tok_s"]:
            yield ["smollm2 speed", who, measure.removesuffix("_tok_s"),
                   round(speed[who][measure], 1), "tokens/s", gpu]


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/gpu")
    rows = []
    train = (d / "bench_train.log").read_text()
    rows += rows_of_train(train, gpu_of(train))
    embed = (d / "bench_embed.log").read_text()
    rows += rows_of_embed(embed, gpu_of(embed))
    rows += rows_of_smollm2((d / "smollm2.log").read_text())
    with open(d / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["check", "implementation", "measure", "value", "unit", "gpu"])
        w.writerows(rows)
    print(f"{len(rows)} rows in {d / 'results.csv'}")


if __name__ == "__main__":
    main()
