#!/usr/bin/env python3
"""Pools the tidy records of several `lm experiment` results.json files (runs of the same
setting made in different calls or leases) into one table of mean ± sd over seeds, and
judges FIRE against NoPE by the project's rule: a difference is held when the gap of the
means exceeds both standard deviations added, with the same sign in every seed.

A run that appears in two files (the same encoding and seed) must hold the same figures in
both (the GPU runs are deterministic); it is counted once. Standard library only.

    python3 scripts/gpu_lm_pool.py OUT_DIR RESULTS.json...

writes OUT_DIR/records.csv (one row per run and length) and OUT_DIR/results.md.
"""
import csv
import json
import math
import sys
from pathlib import Path

FIELDS = ["label", "seed", "context", "length", "loss", "perplexity", "loss_past_context",
          "valid_loss", "train_s", "source"]


def mean_sd(xs):
    """Mean and sample standard deviation (0 for one value)."""
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def cell(xs, decimals):
    m, sd = mean_sd(xs)
    return f"{m:.{decimals}f}" if len(xs) == 1 else f"{m:.{decimals}f} ± {sd:.{decimals}f}"


def load(paths):
    runs = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        steps = data["config"]["base"]["steps"]
        for r in data["records"]:
            key = (r["label"], r["seed"], r["length"])
            row = {f: r.get(f) for f in FIELDS if f != "source"}
            row["source"] = str(Path(path).parent.name)
            row["steps"] = steps
            if key in runs:
                old = runs[key]
                same = all(old[f] == row[f] for f in ["loss", "perplexity", "valid_loss"])
                if not same:
                    sys.exit(f"{key} differs between {old['source']} and {row['source']}")
                continue
            runs[key] = row
    steps = {r["steps"] for r in runs.values()}
    if len(steps) != 1:
        sys.exit(f"the files train for different numbers of steps: {sorted(steps)}")
    return sorted(runs.values(), key=lambda r: (r["label"], r["seed"], r["length"]))


def main():
    out, paths = Path(sys.argv[1]), sys.argv[2:]
    rows = load(paths)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "records.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS + ["steps"])
        w.writeheader()
        w.writerows(rows)
    labels = sorted({r["label"] for r in rows}, key=["none", "fire", "rope", "alibi"].index)
    lengths = sorted({r["length"] for r in rows})
    longest = lengths[-1]

    def values(label, length, field):
        return [r[field] for r in rows if r["label"] == label and r["length"] == length]

    def seeds(label):
        return sorted({r["seed"] for r in rows if r["label"] == label})

    lines = [
        f"Pooled by `scripts/gpu_lm_pool.py` from {', '.join(sorted({r['source'] for r in rows}))};"
        f" {rows[0]['steps']} steps, context {rows[0]['context']}; mean ± sample sd over seeds.",
        "",
        "| encoding | seeds | valid loss | "
        + " | ".join(f"ppl @ {n}" for n in lengths)
        + f" | loss past {rows[0]['context']} @ {longest} | train s |",
        "|---|---|---:|" + "---:|" * (len(lengths) + 2),
    ]
    for label in labels:
        cells = [label, ", ".join(map(str, seeds(label))), cell(values(label, lengths[0], "valid_loss"), 4)]
        cells += [cell(values(label, n, "perplexity"), 2) for n in lengths]
        cells += [cell(values(label, longest, "loss_past_context"), 3),
                  cell(values(label, lengths[0], "train_s"), 0)]
        lines.append("| " + " | ".join(cells) + " |")
    if {"none", "fire"} <= set(labels):
        lines += ["", f"FIRE against NoPE, perplexity by length (seeds paired: {', '.join(map(str, seeds('fire')))}):", "",
                  "| length | NoPE − FIRE | sum of sds | same sign in every seed | held |",
                  "|---:|---:|---:|---|---|"]
        for n in lengths:
            a = {r["seed"]: r["perplexity"] for r in rows if r["label"] == "none" and r["length"] == n}
            b = {r["seed"]: r["perplexity"] for r in rows if r["label"] == "fire" and r["length"] == n}
            both = sorted(set(a) & set(b))
            (ma, sa), (mb, sb) = mean_sd(list(a.values())), mean_sd(list(b.values()))
            gap = ma - mb
            signs = {math.copysign(1, a[s] - b[s]) for s in both}
            same = len(signs) == 1 and len(both) == len(a) == len(b)
            held = abs(gap) > sa + sb and same and len(both) >= 3
            lines.append(f"| {n} | {gap:+.2f} | {sa + sb:.2f} | {'yes' if same else 'no'} | {'held' if held else 'not held'} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print((out / "results.md").read_text())


if __name__ == "__main__":
    main()
