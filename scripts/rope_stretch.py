#!/usr/bin/env python3
"""How much each RoPE scaling slows each rotary dimension of SmolLM2-135M (head_dim 64, base
100 000, trained on L = 8 192 tokens): the stretch θ_i / θ'_i of dimension pair i, from the
formulas of transformers' `modeling_rope_utils.py` (the ones `crates/posenc/src/rope_scaling.rs`
is tested against; the angles `posenc encoding show` gives agree to 1e-7), and what a
distance becomes in the angles of the slowest dimensions.

    python3 scripts/rope_stretch.py [OUT.csv]
    python3 scripts/rope_stretch.py --mix SCALING:FIRST-LAST [SCALING:FIRST-LAST …]

Prints a Markdown table (one row per dimension pair: its trained wavelength in tokens, then
each scaling's stretch at a 16 384-token sequence), then, for the passkey distances of
docs/long-context/more-trials, each distance divided by each scaling's smallest stretch
over the pairs that never turn once within L: the distance those pairs see, in tokens of
the trained model. With OUT.csv, also writes the table as tidy records (scaling, factor,
length, pair, wavelength, stretch; `pandas.read_csv`).

`--mix` prints a `--rope-scaling` for `posenc` instead: LongRoPE's per-pair divisors
(`long_factor`, used past L) set, on each range of pairs FIRST–LAST, to the stretch of
SCALING there (`yarn` ×2, or `dynamic` ×2 at 16 384 tokens), the ranges covering every pair
once, with no attention factor (1). `dynamic:0-31` is dynamic NTK's frequencies; `yarn:0-31`
YaRN's, less its attention factor; `dynamic:0-19 yarn:20-31` dynamic NTK's on the pairs that
turn within L and YaRN's on the others. Standard library only.
"""
import json
import math
import signal
import sys

import eval_records

DIM, BASE, L = 64, 100_000.0, 8_192
# (label, rope_type, factor), each at the length it is run at (dynamic NTK depends on it).
SCALINGS = [("YaRN ×2", "yarn", 2), ("Llama 3 ×2", "llama3", 2), ("dynamic NTK ×2", "dynamic", 2),
            ("YaRN ×4", "yarn", 4), ("Llama 3 ×4", "llama3", 4)]
LENGTH = 16_384
DISTANCES = [16_300, 14_700, 11_400, 8_200]


def plain(base=BASE):
    """RoFormer's frequencies θ_i = base^(−2i/d), one per pair."""
    return [base ** (-2 * i / DIM) for i in range(DIM // 2)]


def yarn(factor, beta_fast=32.0, beta_slow=1.0):
    def correction(turns):
        return DIM * math.log(L / (turns * 2 * math.pi)) / (2 * math.log(BASE))
    lo, hi = math.floor(correction(beta_fast)), math.ceil(correction(beta_slow))
    lo, hi = max(lo, 0), min(hi, DIM - 1)
    hi = hi + 0.001 if lo == hi else hi
    out = []
    for i, f in enumerate(plain()):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        out.append(f / factor * ramp + f * (1 - ramp))
    return out


def llama3(factor, low=1.0, high=4.0):
    out = []
    for f in plain():
        wave = 2 * math.pi / f
        if wave > L / low:
            out.append(f / factor)
        elif wave < L / high:
            out.append(f)
        else:
            smooth = (L / wave - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def dynamic(factor, length):
    if length <= L:
        return plain()
    return plain(BASE * (factor * length / L - (factor - 1)) ** (DIM / (DIM - 2)))


def frequencies(kind, factor, length):
    return {"yarn": lambda: yarn(factor), "llama3": lambda: llama3(factor),
            "dynamic": lambda: dynamic(factor, length)}[kind]()


def stretch_of(kind, factor):
    """θ_i / θ'_i of every pair, for a scaling at a LENGTH-token sequence."""
    return [f / g for f, g in zip(plain(), frequencies(kind, factor, LENGTH))]


def main(out):
    stretch = {label: stretch_of(kind, factor) for label, kind, factor in SCALINGS}
    waves = [2 * math.pi / f for f in plain()]
    print(f"stretch θ_i/θ'_i at a {LENGTH}-token sequence, by dimension pair i:\n")
    print("| pair | trained wavelength (tokens) | " + " | ".join(stretch) + " |")
    print("|---:|---:|" + "---:|" * len(stretch))
    for i, wave in enumerate(waves):
        print(f"| {i} | {wave:,.0f} | " + " | ".join(f"{s[i]:.2f}" for s in stretch.values()) + " |")
    slow = [i for i, wave in enumerate(waves) if wave > L]
    print(f"\nthe pairs that never turn once in {L} tokens: {slow[0]}–{slow[-1]}; a distance "
          "in their trained angles (the distance ÷ their smallest stretch):\n")
    print("| distance | " + " | ".join(stretch) + " |")
    print("|---:|" + "---:|" * len(stretch))
    for d in DISTANCES:
        print(f"| {d:,} | " + " | ".join(f"{d / min(s[i] for i in slow):,.0f}"
                                          for s in stretch.values()) + " |")
    if out:
        eval_records.write_csv(
            out, ["scaling", "factor", "length", "pair", "wavelength", "stretch"],
            [[kind, factor, LENGTH, i, waves[i], stretch[label][i]]
             for label, kind, factor in SCALINGS for i in range(DIM // 2)])


def mix(specs):
    """LongRoPE settings whose divisors are, on each range of pairs `SCALING:FIRST-LAST`,
    that scaling's stretch; the ranges cover every pair once."""
    stretch = {kind: stretch_of(kind, 2) for kind in ("yarn", "dynamic")}
    long_factor = [None] * (DIM // 2)
    for spec in specs:
        try:
            kind, span = spec.split(":")
            first, last = (int(x) for x in span.split("-"))
        except ValueError:
            raise SystemExit(f"--mix: `{spec}` is not SCALING:FIRST-LAST")
        if kind not in stretch or not 0 <= first <= last < DIM // 2:
            raise SystemExit(f"--mix: `{spec}` needs yarn or dynamic, and pairs within "
                             f"0-{DIM // 2 - 1}")
        for i in range(first, last + 1):
            if long_factor[i] is not None:
                raise SystemExit(f"--mix: pair {i} is in two ranges")
            long_factor[i] = stretch[kind][i]
    if None in long_factor:
        raise SystemExit(f"--mix: pair {long_factor.index(None)} is in no range")
    print(json.dumps({"rope_type": "longrope", "attention_factor": 1.0,
                      "short_factor": [1.0] * (DIM // 2), "long_factor": long_factor}))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = sys.argv[1:]
    if args[:1] == ["--mix"] and len(args) > 1:
        mix(args[1:])
    elif len(args) <= 1 and not (args and args[0].startswith("-")):
        main(args[0] if args else None)
    else:
        raise SystemExit(__doc__)
