#!/usr/bin/env python3
"""PoPE (polar coordinate position embedding, Gopalakrishnan et al. 2025) from
x-transformers' `PolarEmbedding` and `apply_polar_pos_emb`: queries and keys of width d
become [softplus(x) cos(φ), softplus(x) sin(φ)], of width 2d, with φ = t θ_j for queries and
t θ_j + clamp(δ_hj, −2π, 0) for keys.

For queries and keys (2, 3, 5, 8) in float64 (stored in f32, values exact in f32), at
positions 0..4 and at 7..11, with learned phases δ (3, 8) drawn in (−2π, 0) and two of them
outside it (clamped, so their gradient is zero): the rotated queries and keys, and the
gradients of sum(q̃ * wq) + sum(k̃ * wk) in q, k and δ by torch's autograd. x-transformers
takes the softplus in f32, so finite differences cannot check it; the script checks it
instead against the formula written out here in f64 (`by_formula`), forward and gradients,
to 1e-6.

    .venv/bin/python scripts/make_pope_fixtures.py     # x-transformers==2.31.10, torch

writes crates/posenc/tests/fixtures/pope.safetensors, which crates/posenc/tests/pope.rs
compares the `pope` encoding against.
"""
import math
import os

import torch
from safetensors.torch import save_file
from x_transformers.x_transformers import PolarEmbedding, apply_polar_pos_emb

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures",
                   "pope.safetensors")
B, H, N, D = 2, 3, 5, 8



def by_formula(q, k, phase, t):
    """[softplus(x) cos φ, softplus(x) sin φ], φ = t θ_j (+ clamp(δ, −2π, 0) for keys),
    θ_j = 10000^(−j/D): in f64 throughout."""
    theta = 10000.0 ** (-torch.arange(D, dtype=torch.float64) / D)
    angle = t.double()[:, None] * theta[None, :]  # (N, D)
    delta = phase.clamp(-2 * math.pi, 0.0)[:, None, :]  # (H, 1, D)
    polar = lambda x, a: torch.cat((torch.nn.functional.softplus(x) * a.cos(),
                                    torch.nn.functional.softplus(x) * a.sin()), -1)
    return polar(q, angle), polar(k, angle + delta)


torch.manual_seed(0)
f = {}
q = torch.randn(B, H, N, D, dtype=torch.float64).float().double()
k = torch.randn(B, H, N, D, dtype=torch.float64).float().double()
wq = torch.randn(B, H, N, 2 * D, dtype=torch.float64).float().double()
wk = torch.randn(B, H, N, 2 * D, dtype=torch.float64).float().double()
phase = (-torch.rand(H, D, dtype=torch.float64) * 2 * math.pi * 0.98 - 0.05).float().double()
phase[0, 1], phase[2, 5] = 0.7, -7.5  # outside [−2π, 0]: clamped
for name, value in (("q", q), ("k", k), ("wq", wq), ("wk", wk), ("phase", phase)):
    f[name] = value.float()

for case, offset in (("from0", 0), ("from7", 7)):
    emb = PolarEmbedding(D, H).double()
    with torch.no_grad():
        emb.learned_bias.copy_(phase.view(H, 1, D))
    t = torch.arange(offset, offset + N)

    def rotated(q_, k_):
        freqs, bias = emb(t)
        return apply_polar_pos_emb(q_, freqs), apply_polar_pos_emb(k_, freqs + bias)

    qv, kv = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    rq, rk = rotated(qv, kv)
    ((rq * wq).sum() + (rk * wk).sum()).backward()
    q64, k64 = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    phase64 = phase.clone().requires_grad_(True)
    fq, fk = by_formula(q64, k64, phase64, t)
    ((fq * wq).sum() + (fk * wk).sum()).backward()
    for ours, theirs in ((fq, rq), (fk, rk), (q64.grad, qv.grad), (k64.grad, kv.grad),
                         (phase64.grad, emb.learned_bias.grad.view(H, D))):
        assert torch.allclose(ours, theirs, atol=1e-6), (ours - theirs).abs().max()
    f[f"{case}.q"] = rq.detach().float()
    f[f"{case}.k"] = rk.detach().float()
    f[f"{case}.grad_q"] = qv.grad.float()
    f[f"{case}.grad_k"] = kv.grad.float()
    f[f"{case}.grad_phase"] = emb.learned_bias.grad.view(H, D).float()

os.makedirs(os.path.dirname(OUT), exist_ok=True)
save_file({k_: v.contiguous() for k_, v in f.items()}, OUT, metadata={
    "torch": torch.__version__,
    "x-transformers": __import__("importlib.metadata").metadata.version("x-transformers"),
})
print(f"wrote {len(f)} tensors to {os.path.normpath(OUT)}")
