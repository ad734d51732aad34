#!/usr/bin/env python3
"""docs/gpu/results.csv from the logs scripts/gpu_check.sh wrote (copied into docs/gpu).

One row per figure: check, implementation, measure, value, unit, gpu, run, log. Standard
library only. The first logs (bench_train, bench_embed, smollm2) are of commit 9b876a7. The A/B logs (ab_*.log) hold several runs of `bench train` / `bench embed`,
each headed `== BINARY`: `posenc-old` is the build of commit 9b876a7 (the first check);
`posenc` is, in ab_train_1/2 and ab_embed, commit 9156433 (AdamW stepping all weights at
once; that build also had cudarc's event tracking off, which changed nothing measurable
and was not kept), and in ab_train_3 commit 523f480 (that, and `ops::with_grad`). The
logs in h100/ are of two H100 leases: commit 56f6461, then b7e0e44 (bench_train_3.log). The `× ` rows are the logs' own
"speed relative to PyTorch" (the median of per-step or per-pass ratios, > 1: posenc faster).

    python3 scripts/gpu_results.py docs/gpu
"""
import csv
import json
import re
import sys
from pathlib import Path


OLD = "posenc 9b876a7"


def gpu_of(text):
    """The GPU's name, from the nvidia-smi line run_cuda.sh prints first."""
    return text.splitlines()[0].split(",")[0].strip()


def rows_of_train(text, gpu, posenc=OLD, run=1):
    phases = ["forward", "backward", "optimizer", "step"]
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"[\d.]+", cells[1]):
            continue
        name = cells[0]
        who = f"PyTorch beside {posenc}" if name.startswith("PyTorch") else posenc
        config = "reference" if "reference" in name else "toy"
        for phase, value in zip(phases, cells[1:]):
            yield ["train " + config, who, phase, float(value), "ms", gpu, run]
    # The median of the per-step ratios, PyTorch's time over ours (> 1: posenc faster).
    for phase, value in re.findall(r"(step|forward|backward) ([\d.]+)×", ratio_line(text)):
        yield ["train reference", posenc, f"{phase} speed vs PyTorch", float(value), "×", gpu, run]


def ratio_line(text):
    return next((l for l in text.splitlines() if l.startswith("speed relative to PyTorch")), "")


AB = {  # log: (build of `posenc`, first run number, build of `posenc-old`)
    "ab_train_1.log": ("posenc 9156433", 1, OLD),
    "ab_train_2.log": ("posenc 9156433", 3, OLD),
    "ab_embed.log": ("posenc 9156433", 1, OLD),
    "ab_train_3.log": ("posenc 523f480", 1, OLD),
    # scripts/gpu_check.sh train-ab: sections `== old, round N` and `== new, round N`.
    "ab_train_4.log": ("posenc 42551d8", 1, "posenc 68721ae"),
}


def runs_of(text, new, first, old=OLD):
    """The `== BINARY` sections of an A/B log: (build, run number, text); `first` numbers
    the first run of `new` (the old build's runs are numbered within each log)."""
    seen = {}
    for part in text.split("== ")[1:]:
        name, _, body = part.partition("\n")
        build = old if name.split(",")[0].strip() in ("posenc-old", "old") else new
        seen[build] = seen.get(build, 0) + 1
        yield build, first + seen[build] - 1, body


def rows_of_embed(text, gpu, posenc=OLD, run=1):
    for line in text.splitlines():
        m = re.match(r"\| (posenc|PyTorch)[^|]* \| (\d+) \|", line)
        if m:
            who = posenc if m.group(1) == "posenc" else f"PyTorch beside {posenc}"
            yield ["embed all-MiniLM-L6-v2", who, "pass", float(m.group(2)), "ms", gpu, run]
        m = re.search(r"largest absolute difference ([\d.e+-]+), smallest cosine similarity "
                      r"([\d.]+)", line)
        if m:
            yield ["embed all-MiniLM-L6-v2", f"{posenc} vs PyTorch", "max abs difference",
                   float(m.group(1)), "", gpu, run]
            yield ["embed all-MiniLM-L6-v2", f"{posenc} vs PyTorch", "min cosine",
                   float(m.group(2)), "", gpu, run]
    m = re.search(r": ([\d.]+)×", ratio_line(text))
    if m:
        yield ["embed all-MiniLM-L6-v2", posenc, "pass speed vs PyTorch", float(m.group(1)), "×",
               gpu, run]


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
                   int(r[key] == reference), "", gpu, 1]
    for who in [k for k in speed if isinstance(speed[k], dict)]:
        for measure in ["prompt_tok_s", "decode_tok_s"]:
            yield ["smollm2 speed", who, measure.removesuffix("_tok_s"),
                   round(speed[who][measure], 1), "tokens/s", gpu, 1]


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/gpu")
    rows = []
    train = (d / "bench_train.log").read_text()
    rows += [r + ["bench_train.log"] for r in rows_of_train(train, gpu_of(train))]
    embed = (d / "bench_embed.log").read_text()
    rows += [r + ["bench_embed.log"] for r in rows_of_embed(embed, gpu_of(embed))]
    rows += [r + ["smollm2.log"] for r in rows_of_smollm2((d / "smollm2.log").read_text())]
    # The A/B logs (ab_train_2/3 and ab_embed with OMP_WAIT_POLICY=PASSIVE, so that
    # neither side's idle threads spin while the other works). Runs of 9b876a7 are
    # numbered per log.
    for name, (new, first, old) in AB.items():
        parse = rows_of_embed if "embed" in name else rows_of_train
        for build, run, body in runs_of((d / name).read_text(), new, first, old):
            rows += [r + [name] for r in parse(body, gpu_of(train), build, run)]
    # The H100 leases (h100/): `bench train` twice of build 56f6461, then once of build
    # b7e0e44 (the kernels in a crate of their own, same code).
    for run, build in ((1, "56f6461"), (2, "56f6461"), (3, "b7e0e44")):
        name = f"h100/bench_train_{run}.log"
        text = (d / name).read_text()
        rows += [r + [name] for r in rows_of_train(text, gpu_of(text), f"posenc {build}", run)]
    with open(d / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["check", "implementation", "measure", "value", "unit", "gpu", "run", "log"])
        w.writerows(rows)
    print(f"{len(rows)} rows in {d / 'results.csv'}")


if __name__ == "__main__":
    main()
