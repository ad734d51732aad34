#!/usr/bin/env python3
"""Abacus embeddings (McLeish et al. 2024), from the definition in the paper's repository
(mcleish7/arithmetic, `abacus.py`, class `Abacus`): a digit's index is its place within its
run of consecutive digits, counted from 1, anything else 0; while training every non-zero
index is shifted by one offset k drawn from 0..=max_k; the index picks a row of a learned
table, which is added to the token embeddings.

The indices are computed here the way that module does, with tensor ops (the starts of the
runs, their ids by a cumulative sum, each run's start subtracted by a scatter and a
gather), and checked against a plain loop over the tokens. Then, for a batch of two rows
holding digits, padding, operators and runs that touch either end, and for every offset
k in 0..=MAX_K: x + W[index + k·(index > 0)] in float64 (stored in f32), and the gradient
of sum(out * g) in the table W by torch's autograd. Row 0 of the batch is also split after
SPLIT tokens, so a test can run the tail with the head as the tokens before it.

    .venv/bin/python scripts/make_abacus_fixtures.py     # torch

writes crates/posenc/tests/fixtures/abacus.safetensors, which
crates/posenc/tests/abacus.rs compares the `abacus` encoding against.
"""
import os

import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "posenc", "tests",
                   "fixtures", "abacus.safetensors")
DIGITS = list(range(4, 14))  # posenc lengthgen's digit tokens
ROWS, D, MAX_K, SPLIT = 24, 6, 4, 5
PLUS, EQ, EOS, PAD = 3, 1, 2, 0


def indices_by_tensor_ops(ids):
    """The repository's construction: starts of runs of digits, their ids by a cumulative
    sum, and each token's index as its distance from its run's start, plus one."""
    mask = torch.isin(ids, torch.tensor(DIGITS))
    shifted = torch.cat([torch.zeros_like(mask[:, :1]), mask[:, :-1]], dim=1)
    starts = (shifted != mask) & mask
    segment = torch.cumsum(starts, dim=1)
    index = torch.arange(ids.size(1)).repeat(ids.size(0), 1)
    start_of = torch.zeros_like(index).scatter_add(1, segment, index * starts.long())
    return (index - start_of.gather(1, segment) + 1) * mask


def indices_by_loop(ids):
    out = []
    for row in ids.tolist():
        run, places = 0, []
        for t in row:
            run = run + 1 if t in DIGITS else 0
            places.append(run)
        out.append(places)
    return torch.tensor(out)


d = lambda n: [4 + (7 * i + 3) % 10 for i in range(n)]
rows = [
    d(3) + [PLUS] + d(3) + [EQ] + d(4),                   # a + b = s, ending in a run
    d(1) + [PLUS] + d(6) + [EQ] + d(2) + [PAD],           # short runs, padding after
]
ids = torch.tensor(rows)
places = indices_by_tensor_ops(ids)
assert torch.equal(places, indices_by_loop(ids)), "the two constructions disagree"
assert places.max() + MAX_K < ROWS

torch.manual_seed(0)
w0 = torch.randn(ROWS, D, dtype=torch.float64)
x = torch.randn(*ids.shape, D, dtype=torch.float64)
g = torch.randn(*ids.shape, D, dtype=torch.float64)
f = {"ids": ids.to(torch.int64), "places": places.to(torch.int64), "weight": w0, "x": x,
     "g": g}
for k in range(MAX_K + 1):
    w = w0.clone().requires_grad_(True)
    shifted = places + k * (places > 0)
    out = x + torch.nn.functional.embedding(shifted, w)
    (out * g).sum().backward()
    f[f"k{k}.out"] = out.detach()
    f[f"k{k}.grad_weight"] = w.grad
f = {k_: (v.float() if v.is_floating_point() else v) for k_, v in f.items()}
save_file({k_: v.contiguous() for k_, v in f.items()}, OUT, metadata={
    "max_offset": str(MAX_K), "split": str(SPLIT), "digits": "4..=13",
    "source": "mcleish7/arithmetic abacus.py (Abacus), McLeish et al. 2024"})
print(f"wrote {OUT}")
