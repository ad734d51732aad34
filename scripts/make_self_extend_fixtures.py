#!/usr/bin/env python3
"""Self-extend (Jin et al. 2024, "LLM Maybe LongLM"), written as the paper's code writes
it for a prompt read whole (`self_extend_forward` of datamllab/LongLM, q_len == kv_seq_len):
neighbour queries and keys rotated at their positions, grouped ones at
`pos // G + W - W // G` (queries) and `pos // G` (keys), each pair's score taken from the
neighbour reading when `i - j < W` and from the grouped one otherwise
(`torch.where(neighbor_attention_mask, neighbor, group)`), then one causal softmax.

One attention of width 16, 2 heads of 8, rotary (Llama's half-split, base 10 000), over 40
tokens with G = 4 and W = 8, in float64 and stored in f32: the projection weights (stored
under this project's q_proj, k_proj, v_proj and out_proj), the input x, the output and the
weights, and, as a check that grouping changes something, the output without it.

    .venv/bin/python scripts/make_self_extend_fixtures.py     # torch

writes crates/transformer/tests/fixtures/self_extend.safetensors, which
crates/transformer/tests/self_extend.rs compares attention with `SelfExtend` against.
"""
import math
import os

import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "transformer", "tests",
                   "fixtures", "self_extend.safetensors")
B, N, DIM, HEADS, G, W, BASE = 1, 40, 16, 2, 4, 8, 10000.0
D = DIM // HEADS


def rotate_half(x):
    return torch.cat((-x[..., D // 2:], x[..., :D // 2]), -1)


def rope(x, positions):
    inv = 1.0 / BASE ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    freqs = positions.double()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), -1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def attention(x, wq, wk, wv, wo, extend):
    heads = lambda t: t.view(B, N, HEADS, D).transpose(1, 2)
    q, k, v = heads(x @ wq.T), heads(x @ wk.T), heads(x @ wv.T)
    pos = torch.arange(N)
    neighbor = rope(q, pos) @ rope(k, pos).transpose(-1, -2) / math.sqrt(D)
    if extend:
        group_q = pos // G + W - W // G
        group_k = pos // G
        group = rope(q, group_q) @ rope(k, group_k).transpose(-1, -2) / math.sqrt(D)
        mask = torch.ones(N, N).tril()
        mask[W:, :-W] -= torch.ones(N - W, N - W).tril()
        scores = torch.where(mask.bool(), neighbor, group)
    else:
        scores = neighbor
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    weights = scores.softmax(-1)
    out = (weights @ v).transpose(1, 2).reshape(B, N, DIM)
    return out @ wo.T, weights


torch.manual_seed(0)
exact = lambda *shape: torch.randn(*shape, dtype=torch.float64).float().double()
wq, wk, wv, wo = (exact(DIM, DIM) / math.sqrt(DIM) for _ in range(4))
wq = wq * 3  # sharper scores, so that reading far keys another way shows
x = exact(B, N, DIM)
out, weights = attention(x, wq, wk, wv, wo, True)
plain, _ = attention(x, wq, wk, wv, wo, False)
assert (out - plain).abs().max() > 1e-2, "grouping should change the far tokens' outputs"
assert (out[:, :W] - plain[:, :W]).abs().max() < 1e-12, "within the window nothing changes"
f = {"causal.x": x.float(), "causal.out": out.float(), "causal.weights": weights.float(),
     "causal.plain": plain.float()}
for name, w in (("q_proj", wq), ("k_proj", wk), ("v_proj", wv), ("out_proj", wo)):
    f[f"causal.{name}.weight"] = w.float()
os.makedirs(os.path.dirname(OUT), exist_ok=True)
save_file({k: v.contiguous() for k, v in f.items()}, OUT, metadata={
    "torch": torch.__version__, "group": str(G), "window": str(W)})
print(f"wrote {len(f)} tensors to {os.path.normpath(OUT)}")
