#!/usr/bin/env python3
"""Reference tables of proportional RoPE (p-RoPE), from Hugging Face transformers itself.

`rope_type: "proportional"` (Barbero et al. 2025, "Round and Round We Go!"; Gemma 4's global
layers) keeps the highest `partial_rotary_factor` of a head's frequencies and sets the
rest to 0, so their pairs carry no position; every frequency is divided by `factor`.
For each case, transformers' `ROPE_INIT_FUNCTIONS["proportional"]` gives the inverse
frequencies and `LlamaRotaryEmbedding`'s forward the cos and sin tables of positions
0 .. len-1. Nothing here comes from posenc; crates/posenc/tests/rope_scaling.rs compares
the `rope` encoding (and the `p-rope` kind) against them.

transformers 4.x, which scripts/requirements.txt pins for the other fixtures
(sentence-transformers needs it), has no proportional type, hence its own stack:

    python3 -m venv .venv-rope && .venv-rope/bin/pip install -r scripts/requirements-rope.txt
    .venv-rope/bin/python scripts/make_proportional_rope_fixtures.py

writes crates/posenc/tests/fixtures/rope_proportional.json.
"""
import json
import os

import torch
import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

OUT = os.path.join(
    os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures", "rope_proportional.json"
)

HEAD_DIM = 32
BASE = 10000.0
LEN = 64

# (name, partial_rotary_factor, factor or None)
CASES = [
    ("proportional", 0.75, None),
    ("proportional-scaled", 0.25, 8.0),
    ("proportional-odd", 0.3, None),
    ("proportional-none", 0.0, None),
    ("proportional-all", 1.0, None),
]


def case(name, p, factor):
    heads = 2
    parameters = {"rope_type": "proportional", "rope_theta": BASE, "partial_rotary_factor": p}
    if factor is not None:
        parameters["factor"] = factor
    config = LlamaConfig(
        hidden_size=HEAD_DIM * heads,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=16,
        rope_parameters=dict(parameters),
    )
    inv_freq, attention = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
    emb = LlamaRotaryEmbedding(config)
    assert torch.equal(emb.inv_freq, inv_freq)
    x = torch.zeros(1, LEN, HEAD_DIM * heads)
    cos, sin = emb(x, torch.arange(LEN)[None, :])
    half = inv_freq.numel()
    ours = {"rope_type": "proportional", "partial_rotary_factor": p}
    if factor is not None:
        ours["factor"] = factor
    return {
        "name": name,
        "encoding": {"kind": "rope", "base": BASE, "scaling": ours},
        "head_dim": HEAD_DIM,
        "context": 16,
        "len": LEN,
        "inv_freq": inv_freq.tolist(),
        "attention_factor": float(attention),
        "cos": cos[0, :, :half].tolist(),
        "sin": sin[0, :, :half].tolist(),
    }


fixtures = [case(*c) for c in CASES]
with open(OUT, "w") as f:
    json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "cases": fixtures}, f)
print(f"wrote {len(fixtures)} cases to {OUT}")
