#!/usr/bin/env python3
"""How far each model's loss past the trained context sits above its level just inside it.

    python3 scripts/octave_gaps.py docs/lm-experiment/alibi-by-position/loss_by_position.csv [--context 64]

reads a `loss_by_position.csv` (scripts/loss_by_position.py: model, length, windows,
position, loss) and prints, for each model, the mean loss of each octave past the context
(64–127, 128–255, …, within each window length that reaches it) minus the same window
length's mean over the context's second half (32–63): the smallest and the largest such
gap, and over all models the range of every gap. These are the figures the book quotes.
"""
import argparse
import collections
import csv

parser = argparse.ArgumentParser()
parser.add_argument("csv")
parser.add_argument("--context", type=int, default=64)
args = parser.parse_args()
L = args.context

loss = collections.defaultdict(dict)
for r in csv.DictReader(open(args.csv)):
    loss[(r["model"], int(r["length"]))][int(r["position"])] = float(r["loss"])


def mean(pos, a, b):
    return sum(pos[p] for p in range(a, b)) / (b - a)


gaps = collections.defaultdict(list)
for (model, length), pos in sorted(loss.items()):
    if length <= L:
        continue
    inside = mean(pos, L // 2, L)
    a = L
    while a * 2 <= length:
        gaps[model].append(mean(pos, a, 2 * a) - inside)
        a *= 2

print("| model | smallest gap | largest gap |\n|---|---:|---:|")
for model, g in gaps.items():
    print(f"| {model} | {min(g):.3f} | {max(g):.3f} |")
every = [x for g in gaps.values() for x in g]
print(f"\nevery gap: {min(every):.3f} to {max(every):.3f} nats; the largest per model: "
      f"{min(max(g) for g in gaps.values()):.3f} to {max(max(g) for g in gaps.values()):.3f}")
