#!/usr/bin/env python3
"""Reference tables and rotations of HoPE (Chen et al. 2025, "HoPE: A Novel Positional
Encoding Without Long-Term Decay for Enhanced Context Awareness and Extrapolation", ACL
2025), from its formula in f64: no reference implementation ships.

A rotary pair i of a head of width d turns at θ_i = base^(−2i/d); HoPE keeps the pairs
that turn a full circle within the trained context L (2π/θ_i ≤ L) and makes the others
position-independent (θ_i = 0). For each case this writes the cos and sin of p·θ_i for
positions 0 .. len−1, and one head's vectors x rotated at those positions with the
half-split layout (pair i is dimensions i and i + d/2, as Llama's rotate_half):

    out[i]       = x[i] cos − x[i + d/2] sin
    out[i + d/2] = x[i + d/2] cos + x[i] sin

Standard library only; nothing here comes from posenc. crates/posenc/tests/rope_scaling.rs
compares the `hope` encoding against it.

    python3 scripts/make_hope_fixtures.py

writes crates/posenc/tests/fixtures/hope.json.
"""
import json
import math
import os
import random

OUT = os.path.join(
    os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures", "hope.json"
)

# (name, head_dim, context L, base, len)
CASES = [
    ("hope-d32-L64", 32, 64, 10000.0, 80),
    ("hope-d16-L16", 16, 16, 10000.0, 40),
    ("hope-d32-L4096", 32, 4096, 10000.0, 24),
    ("hope-d8-L4-base100", 8, 4, 100.0, 12),
]


def case(name, d, context, base, length, rng):
    theta = [base ** (-2.0 * i / d) for i in range(d // 2)]
    theta = [t if 2.0 * math.pi / t <= context else 0.0 for t in theta]
    cos = [[math.cos(p * t) for t in theta] for p in range(length)]
    sin = [[math.sin(p * t) for t in theta] for p in range(length)]
    half = d // 2
    x = [[rng.uniform(-1.0, 1.0) for _ in range(d)] for _ in range(length)]
    rotated = []
    for p in range(length):
        out = [0.0] * d
        for i in range(half):
            a, b = x[p][i], x[p][i + half]
            out[i] = a * cos[p][i] - b * sin[p][i]
            out[i + half] = b * cos[p][i] + a * sin[p][i]
        rotated.append(out)
    return {
        "name": name,
        "encoding": {"kind": "hope", "base": base, "context": context},
        "head_dim": d,
        "len": length,
        "turning_pairs": sum(1 for t in theta if t > 0.0),
        "cos": cos,
        "sin": sin,
        "x": x,
        "rotated": rotated,
    }


def main():
    rng = random.Random(0)
    cases = [case(*c, rng) for c in CASES]
    with open(OUT, "w") as f:
        json.dump({"source": "the HoPE formula in f64 (scripts/make_hope_fixtures.py)", "cases": cases}, f)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}: " + ", ".join(f"{c['name']} ({c['turning_pairs']} of {c['head_dim'] // 2} pairs turn)" for c in cases))


if __name__ == "__main__":
    main()
