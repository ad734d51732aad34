#!/usr/bin/env python3
"""The long-context toy's claims, judged by the project's rule from its records.

A claim "A below B at length n" holds when B's mean perplexity exceeds A's by more than
the two standard deviations added, with A below B in every seed, over at least 3 seeds.
Reads docs/long-context/results.json (the `toy` records) and writes
docs/long-context/toy_claims.md; standard library only.

    python3 scripts/toy_claims.py
"""
import json
import os
import statistics

ROOT = os.path.join(os.path.dirname(__file__), "..", "docs", "long-context")

# (ahead, behind, lengths): each the claim "ahead's perplexity is below behind's".
CLAIMS = [
    ("zero-shot none", "zero-shot linear", [128, 256, 512, 1024]),
    ("zero-shot yarn", "zero-shot none", [128, 256, 512, 1024]),
    ("zero-shot yarn", "zero-shot llama3", [128, 256, 512, 1024]),
    ("zero-shot dynamic", "zero-shot yarn", [128, 256, 512, 1024]),
    ("fine-tuned yarn", "fine-tuned none", [256]),
    ("fine-tuned none", "fine-tuned linear", [256]),
    ("fine-tuned yarn", "fine-tuned linear", [256]),
    ("fine-tuned none", "fine-tuned yarn", [1024]),
]


def main():
    with open(os.path.join(ROOT, "results.json")) as f:
        records = [r for r in json.load(f) if r["experiment"] == "toy"]

    def seeds(variant, length):
        return {r["seed"]: r["perplexity"] for r in records if r["variant"] == variant and r["length"] == length}

    lines = [
        "# The toy's claims, by the rule",
        "",
        "Written by `scripts/toy_claims.py` from `results.json`: a claim holds when the gap of",
        "the means exceeds both standard deviations added, with the same sign in every seed, over",
        "at least 3 seeds.",
        "",
        "| claim | length | ahead | behind | gap | spreads added | seeds ahead | verdict |",
        "|---|---:|---|---|---:|---:|---:|---|",
    ]
    for ahead, behind, lengths in CLAIMS:
        for n in lengths:
            a, b = seeds(ahead, n), seeds(behind, n)
            both = sorted(set(a) & set(b))
            (ma, sa), (mb, sb) = [(statistics.mean(x.values()), statistics.stdev(x.values())) for x in (a, b)]
            won = sum(a[s] < b[s] for s in both)
            held = mb - ma > sa + sb and won == len(both) and len(both) >= 3
            lines.append(
                f"| {ahead} below {behind} | {n} | {ma:.2f} ± {sa:.2f} | {mb:.2f} ± {sb:.2f} | "
                f"{mb - ma:+.2f} | {sa + sb:.2f} | {won} of {len(both)} | {'held' if held else '**not held**'} |"
            )
    with open(os.path.join(ROOT, "toy_claims.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
