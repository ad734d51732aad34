#!/usr/bin/env python3
"""Key/value rows quantized as llama.cpp quantizes its cache (`-ctk/-ctv q8_0|q4_0`), by
gguf-py's `gguf.quants`, whose Q8_0 and Q4_0 follow ggml's reference code
(`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`) bit for bit, and its dequantization.

Rows of 64 values (two blocks each): random normals at several scales, plus the edges a
quantizer may get wrong: an all-zero block, a block whose largest magnitude is negative
(Q4_0 keeps its sign), values exactly halfway between two codes, and one huge value
among small ones.

    .venv/bin/python scripts/make_kv_block_fixtures.py     # gguf==0.19.0, numpy

writes crates/kernels/tests/fixtures/kv_blocks.safetensors: `x` (rows, 64) f32 and, per
format, `<format>` (rows, bytes) u8 and `<format>_back` (rows, 64) f32, which
crates/kernels/tests/kv_blocks.rs compares `kv_blocks::quantize` and `dequantize` with.

Also the rows turned first, as llama.cpp turns a quantized cache's unless
LLAMA_ATTN_ROT_DISABLE is set (`llama_mul_mat_hadamard` by `ggml_gen_hadamard`'s matrix):
`hadamard64`, the orthonormal Walsh-Hadamard matrix built here as a Kronecker power of
[[1, 1], [1, -1]] over sqrt(n) (order 128 likewise, not stored); `<format>_turned<n>` the blocks of
`x` (rows of 64 for n = 64, pairs of rows as rows of 128 for n = 128) times the matrix,
and `<format>_turned<n>_back` their expansion turned back.
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "kernels", "tests",
                   "fixtures", "kv_blocks.safetensors")
WIDTH = 64

rng = np.random.default_rng(7)
rows = [rng.standard_normal(WIDTH) * scale for scale in (1e-3, 0.1, 1.0, 7.0, 300.0)]
edge = np.zeros(WIDTH)
edge[32:] = np.linspace(-2.0, 1.0, 32)          # first block all zero; largest |x| negative
rows.append(edge)
halves = np.zeros(WIDTH)
halves[:32] = np.arange(32) - 15.5               # q8_0: x/d lands on .5 (max 16.5, d = 16.5/127)
halves[32:] = (np.arange(32) % 17) - 8.0         # q4_0: exact codes
rows.append(halves)
spike = rng.standard_normal(WIDTH) * 0.01
spike[40] = 50.0
rows.append(spike)
x = np.stack(rows).astype(np.float32)

tensors = {"x": x}
for name, qtype in (("q8_0", T.Q8_0), ("q4_0", T.Q4_0)):
    q = quantize(x, qtype)
    tensors[name] = np.ascontiguousarray(q, dtype=np.uint8)
    tensors[f"{name}_back"] = dequantize(q, qtype).astype(np.float32)


def hadamard(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), h)
    return h / np.sqrt(n)


for n in (64, 128):
    h = hadamard(n)
    if n == 64:  # the order-128 matrix is checked through the blocks it makes
        tensors[f"hadamard{n}"] = h.astype(np.float32)
    rows_n = x.reshape(-1, n).astype(np.float64)
    turned = (rows_n @ h).astype(np.float32)
    for name, qtype in (("q8_0", T.Q8_0), ("q4_0", T.Q4_0)):
        q = quantize(turned, qtype)
        tensors[f"{name}_turned{n}"] = np.ascontiguousarray(q, dtype=np.uint8)
        back = dequantize(q, qtype).astype(np.float64) @ h
        tensors[f"{name}_turned{n}_back"] = back.astype(np.float32)
os.makedirs(os.path.dirname(OUT), exist_ok=True)
save_file(tensors, OUT)
print({k: v.shape for k, v in tensors.items()})
