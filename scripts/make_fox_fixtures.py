#!/usr/bin/env python3
"""Attention with the Forgetting Transformer's forget gates (FoX, Lin et al. 2025), from
x-transformers' `Attention(..., data_dependent_alibi = True)`: a gate per head and token,
`ln σ(w·x + b)`, cumulatively summed, whose differences between query and key bias the
scores (a second gate per head for the keys after a query, in bidirectional attention).

Two cases, in float64 and stored in f32: causal attention, and bidirectional attention
under a key padding mask (sequence 1's last two tokens are padding; the outputs at padded
queries are zeroed and left out of the gradients, as a model ignores them). For each: the
projection weights (x-transformers' to_q, to_k, to_v and to_out, stored under this
project's q_proj, k_proj, v_proj and out_proj), the gates' linear map (random, and its
bias spread around x-transformers' initial 5 so that gates differ), the input x, the
output, the weights, and the gradients of sum(out * w) in x, in the gates' weight and bias
and in W^Q, by torch's autograd. The script first checks x-transformers against the formula
written out here in f64 (`by_formula`), forward and gradients, to 1e-6.

    .venv/bin/python scripts/make_fox_fixtures.py     # x-transformers==2.31.10, torch

writes crates/transformer/tests/fixtures/fox.safetensors, which
crates/transformer/tests/fox.rs compares the `fox` encoding's attention against.
"""
import os

import torch
import torch.nn.functional as F
from x_transformers.x_transformers import Attention

from xt_attention import CASES, check, inputs, make_exact, save, store

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "transformer", "tests",
                   "fixtures", "fox.safetensors")
B, N, DIM, HEADS = 2, 6, 8, 2


def by_formula(attn, x, gate_w, gate_b, wq, keep, causal):
    """softmax(QKᵀ/√d + D + mask) V W^O in f64, with D_ij = Σ_{j<l≤i} ln f_l for j ≤ i
    and, bidirectionally, Σ_{i<l≤j} ln f'_l for j > i, written as explicit sums."""
    heads = lambda t: t.view(B, N, HEADS, DIM // HEADS).transpose(1, 2)
    q, k, v = heads(x @ wq.T), heads(x @ attn.to_k.weight.T), heads(x @ attn.to_v.weight.T)
    logits = q @ k.transpose(-1, -2) / (DIM // HEADS) ** 0.5
    g = F.logsigmoid(x @ gate_w.T + gate_b).transpose(1, 2)  # (B, gates·HEADS, N)
    rows = []
    for i in range(N):
        row = []
        for j in range(N):
            if j <= i:
                row.append(g[:, :HEADS, j + 1:i + 1].sum(-1))
            elif causal:
                row.append(torch.zeros(B, HEADS, dtype=x.dtype))
            else:
                row.append(g[:, HEADS:, i + 1:j + 1].sum(-1))
        rows.append(torch.stack(row, -1))
    logits = logits + torch.stack(rows, -2)
    seen = keep[:, None, None, :].expand(B, HEADS, N, N)
    if causal:
        seen = seen & torch.ones(N, N, dtype=torch.bool).tril()
    logits = logits.masked_fill(~seen, -torch.finfo(torch.float64).max)
    weights = logits.softmax(-1)
    out = (weights @ v).transpose(1, 2).reshape(B, N, DIM)
    return out @ attn.to_out.weight.T


torch.manual_seed(0)
f = {}
for case, causal in CASES:
    attn = Attention(dim=DIM, heads=HEADS, dim_head=DIM // HEADS, causal=causal,
                     data_dependent_alibi=True).double()
    gate = attn.data_dependent_alibi.to_forget_gates[0]
    with torch.no_grad():
        gate.weight.copy_(torch.randn_like(gate.weight))
        gate.bias.copy_(5 + torch.randn_like(gate.bias) * 2)
    make_exact(attn)
    x, keep, w = inputs(B, N, DIM, causal)
    out, inter = attn(x, mask=None if causal else keep, return_intermediates=True)
    weights = inter.post_softmax_attn
    (out * w).sum().backward()
    x64 = x.detach().clone().requires_grad_(True)
    gw64 = gate.weight.detach().clone().requires_grad_(True)
    gb64 = gate.bias.detach().clone().requires_grad_(True)
    wq64 = attn.to_q.weight.detach().clone().requires_grad_(True)
    out64 = by_formula(attn, x64, gw64, gb64, wq64, keep, causal)
    (out64 * w).sum().backward()
    check(out, out64, keep, ((x64, x), (gw64, gate.weight), (gb64, gate.bias),
                             (wq64, attn.to_q.weight)))
    store(f, case, attn, x, keep, w, out, weights, {
        "encoding.0.weight": gate.weight, "encoding.0.bias": gate.bias,
        "grad_gate_weight": gate.weight.grad, "grad_gate_bias": gate.bias.grad})

save(f, OUT)
