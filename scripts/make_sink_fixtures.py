#!/usr/bin/env python3
"""Attention with a learned sink per head (gpt-oss), from x-transformers' `Attention(...,
head_learned_sink = True)`: the sink's logit is a column in front of the scores, softmaxed
with them and dropped after, so a head may put weight on nothing.

Two cases, in float64 and stored in f32: causal attention, and bidirectional attention
under a key padding mask (sequence 1's last two tokens are padding; the outputs at padded
queries are zeroed and left out of the gradients, as a model ignores them). For each: the
projection weights (x-transformers' to_q, to_k, to_v and to_out, stored under this
project's q_proj, k_proj, v_proj and out_proj), the sink logits (random, so that they
matter), the input x, the output, the weights on the real keys, and the gradients of
sum(out * w) in x, in the sink logits and in W^Q, by torch's autograd. x-transformers takes
its softmax in f32, so finite differences cannot check it; the script checks it instead
against the formula written out here in f64 (`by_formula`), forward and gradients, to 1e-6.

    .venv/bin/python scripts/make_sink_fixtures.py     # x-transformers==2.31.10, torch

writes crates/transformer/tests/fixtures/sinks.safetensors, which
crates/transformer/tests/sinks.rs compares the `sink` encoding's attention against.
"""
import os

import torch
from x_transformers.x_transformers import Attention

from xt_attention import CASES, check, inputs, make_exact, save, store

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "transformer", "tests",
                   "fixtures", "sinks.safetensors")
B, N, DIM, HEADS = 2, 5, 8, 2



def by_formula(attn, x, sink, wq, keep, causal):
    """softmax([s_h, QKᵀ/√d + mask]) over the sink and the keys, the sink's column dropped,
    times V, then W^O: in f64 throughout."""
    heads = lambda t: t.view(B, N, HEADS, DIM // HEADS).transpose(1, 2)
    q, k, v = heads(x @ wq.T), heads(x @ attn.to_k.weight.T), heads(x @ attn.to_v.weight.T)
    logits = q @ k.transpose(-1, -2) / (DIM // HEADS) ** 0.5
    seen = keep[:, None, None, :].expand(B, HEADS, N, N)
    if causal:
        seen = seen & torch.ones(N, N, dtype=torch.bool).tril()
    logits = logits.masked_fill(~seen, -torch.finfo(torch.float64).max)
    column = sink.view(1, HEADS, 1, 1).expand(B, HEADS, N, 1)
    weights = torch.cat((column, logits), -1).softmax(-1)[..., 1:]
    out = (weights @ v).transpose(1, 2).reshape(B, N, DIM)
    return out @ attn.to_out.weight.T


torch.manual_seed(0)
f = {}
for case, causal in CASES:
    attn = Attention(dim=DIM, heads=HEADS, dim_head=DIM // HEADS, causal=causal,
                     head_learned_sink=True).double()
    with torch.no_grad():
        attn.attend.head_attn_sink.copy_(torch.randn(HEADS, dtype=torch.float64) * 2)
    make_exact(attn)
    x, keep, w = inputs(B, N, DIM, causal)
    out, inter = attn(x, mask=None if causal else keep, return_intermediates=True)
    weights = inter.post_softmax_attn[..., 1:]
    (out * w).sum().backward()
    x64 = x.detach().clone().requires_grad_(True)
    sink64 = attn.attend.head_attn_sink.detach().clone().requires_grad_(True)
    wq64 = attn.to_q.weight.detach().clone().requires_grad_(True)
    out64 = by_formula(attn, x64, sink64, wq64, keep, causal)
    (out64 * w).sum().backward()
    check(out, out64, keep, ((x64, x), (sink64, attn.attend.head_attn_sink), (wq64, attn.to_q.weight)))
    sink = attn.attend.head_attn_sink
    store(f, case, attn, x, keep, w, out, weights,
          {"encoding.logits": sink, "grad_sink": sink.grad})

save(f, OUT)
