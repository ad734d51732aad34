#!/usr/bin/env python3
"""PaTH attention (Yang et al., NeurIPS 2025) by its only CPU reference, fla's
`naive_path_attn` (fla-core 0.6.0, `fla/ops/path_attn/naive.py`), checked first against the
formula written out here in float64, for the `path` kind to be compared against.

PaTH turns keys by accumulated Householder-like transforms read from the data:

    H_t  = I − β_t w_t w_tᵀ                 (‖w_t‖ = 1, β_t = 2·σ(·) ∈ (0, 2))
    S_ij = q_iᵀ H_i H_(i−1) ⋯ H_(j+1) k_j    (j ≤ i: the query's own transform in, the key's out)
    o_i  = Σ_j softmax_j((S_ij + G_i − G_j) · scale) v_j,   G = cumsum(g)  (the forget gate)

What the script checks before it writes anything:

- `naive_path_attn`, which computes in float32 whatever it is given (`.to(torch.float)`),
  to 2e-6 of the formula in float64 (f32's rounding of outputs of size ~2) (chunks of 64, the UT transform within each) against the explicit
  product of the transforms above, at lengths 1, 63, 64 and 150 (inside one chunk, at its
  edge and across three), with grouped-query heads (4 query heads over 2 key heads, whose
  `w` and `β` are per key head) and a forget gate;
- the same without the gate (`g = 0`);
- in float64 to 1e-9, fla's decoding recurrence (`PaTHAttention.forward`'s `rank_one_update`): the cached keys
  turned by each new token's transform, `k ← k − β (k·w) w`, then the new query's scores
  against them, equal the last row of the full scores at every step.

It then writes, per length, in f32: q, k, v (`[B, T, H, D]`, fla's layout), w, β, g, the
output, and the gradients of `sum(out * r)` in q, k, v, w, β and g by torch's autograd
through `naive_path_attn` (float64 inputs, float32 inside).

    .venv/bin/pip install -r scripts/requirements-path.txt
    .venv/bin/python scripts/make_path_fixtures.py [OUT]

OUT defaults to crates/posenc/tests/fixtures/path.safetensors, which
crates/posenc/tests/householder.rs reads.
"""
import importlib.util
import os
import sys

import torch
from safetensors.torch import save_file

B, HQ, H, D = 2, 4, 2, 8
LENGTHS = (1, 63, 64, 150)
TOL = 2e-6  # naive_path_attn's float32 against the formula's float64
EXACT = 1e-9  # float64 against float64
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures",
    "path.safetensors")


def load_naive():
    """`naive_path_attn` from the installed fla-core, read as a file: importing
    `fla.ops` would load its Triton kernels, which a CPU has no use for."""
    root = importlib.util.find_spec("fla").submodule_search_locations[0]
    path = os.path.join(root, "ops", "path_attn", "naive.py")
    spec = importlib.util.spec_from_file_location("path_naive", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.naive_path_attn


def inputs(t, seed):
    """Random q, k, v, unit w, β = 2σ(·) and log-sigmoid gates g, float64, fla's layout."""
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    q, k, v = r(B, t, HQ, D), r(B, t, H, D), r(B, t, H, D)
    w = r(B, t, H, D)
    w = w / (w.square().sum(-1, keepdim=True) + 1e-6).sqrt()  # fla's l2_norm, eps 1e-6
    beta = 2 * torch.sigmoid(r(B, t, H))
    g = torch.nn.functional.logsigmoid(r(B, t, HQ) + 2)
    return q, k, v, w, beta, g


def by_formula(q, k, v, w, beta, g, scale):
    """The output from the explicit product of transforms, one (query, key) pair at a time."""
    t = q.shape[1]
    group = HQ // H
    out = torch.zeros(B, t, HQ, D, dtype=torch.float64)
    eye = torch.eye(D, dtype=torch.float64)
    gc = g.cumsum(1)
    for b in range(B):
        for hq in range(HQ):
            h = hq // group
            transform = [eye - beta[b, s, h] * torch.outer(w[b, s, h], w[b, s, h])
                         for s in range(t)]
            for i in range(t):
                scores = torch.empty(i + 1, dtype=torch.float64)
                turned = q[b, i, hq].clone()  # q_iᵀ H_i ⋯ H_(j+1), built from the query down
                for j in range(i, -1, -1):
                    scores[j] = turned @ k[b, j, h] + gc[b, i, hq] - gc[b, j, hq]
                    turned = turned @ transform[j]
                weights = (scores * scale).softmax(0)
                out[b, i, hq] = weights @ v[b, : i + 1, h]
    return out


def decoding_matches(q, k, w, beta):
    """fla's decoding: cached keys turned by each new token's rank-one update, then the new
    query's scores, against the explicit product's last row, at every step."""
    t = q.shape[1]
    group = HQ // H
    worst = 0.0
    cached = None
    for s in range(t):
        ws, bs = w[:, s], beta[:, s]  # [B, H, D], [B, H]
        if cached is not None:
            dot = (cached * ws[:, None]).sum(-1, keepdim=True)
            cached = cached - bs[:, None, :, None] * dot * ws[:, None]
            cached = torch.cat([cached, k[:, s:s + 1]], 1)
        else:
            cached = k[:, :1].clone()
        for hq in range(HQ):
            h = hq // group
            got = cached[:, :, h] @ q[:, s, hq][..., None]  # [B, s+1, 1]
            for j in range(s + 1):
                turned = q[:, s, hq].clone()
                for l in range(s, j, -1):
                    dot = (turned * w[:, l, h]).sum(-1, keepdim=True)
                    turned = turned - beta[:, l, h, None] * dot * w[:, l, h]
                want = (turned * k[:, j, h]).sum(-1)
                worst = max(worst, (got[:, j, 0] - want).abs().max().item())
    return worst


def main():
    naive = load_naive()
    scale = D ** -0.5
    tensors = {}
    for n, t in enumerate(LENGTHS):
        q, k, v, w, beta, g = inputs(t, seed=n)
        for gate, gates in (("gated", g), ("ungated", torch.zeros_like(g))):
            ref = naive(q, k, v, w, beta, gates, scale)
            want = by_formula(q, k, v, w, beta, gates, scale)
            d = (ref - want).abs().max().item()
            print(f"T={t:>3} {gate}: naive_path_attn − formula {d:.1e}")
            assert d < TOL, f"naive_path_attn departs from the formula by {d} at T={t}"
        d = decoding_matches(q, k, w, beta)
        print(f"T={t:>3}: rank-one decoding − formula {d:.1e}")
        assert d < EXACT, f"the decoding recurrence departs by {d} at T={t}"

        leaves = [x.clone().requires_grad_() for x in (q, k, v, w, beta, g)]
        out = naive(*leaves, scale)
        r = torch.randn(out.shape, generator=torch.Generator().manual_seed(100 + n),
                        dtype=torch.float64)
        (out * r).sum().backward()
        case = f"t{t}"
        for name, x in zip(("q", "k", "v", "w", "beta", "g"), leaves):
            tensors[f"{case}.{name}"] = x.detach().float().contiguous()
            tensors[f"{case}.grad_{name}"] = x.grad.float().contiguous()
        tensors[f"{case}.out"] = out.detach().float().contiguous()
        tensors[f"{case}.r"] = r.float().contiguous()
    os.makedirs(os.path.dirname(os.path.abspath(OUT)), exist_ok=True)
    tmp = OUT + ".tmp"
    save_file(tensors, tmp, metadata={"scale": repr(scale), "lengths": repr(LENGTHS)})
    os.replace(tmp, OUT)
    print(f"wrote {len(tensors)} tensors to {OUT}")


if __name__ == "__main__":
    main()
