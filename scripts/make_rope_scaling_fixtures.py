#!/usr/bin/env python3
"""Reference tables of RoPE scaling, from Hugging Face transformers itself.

For each case, transformers' `modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type]` gives the
inverse frequencies and the attention factor, and `LlamaRotaryEmbedding`'s forward (its
`dynamic_rope_update` included) gives the cos and sin tables a Llama model applies to
positions 0 .. len-1, attention factor included. Nothing here comes from posenc.
crates/posenc/tests/rope_scaling.rs compares the `rope` encoding's tables against them.

    python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt
    .venv/bin/python scripts/make_rope_scaling_fixtures.py

writes crates/posenc/tests/fixtures/rope_scaling.json.
"""
import json
import os

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures", "rope_scaling.json")

HEAD_DIM = 32
BASE = 10000.0


def longrope_lists(n):
    short = [1.0 + 0.05 * i for i in range(n)]
    long = [1.0 + 0.5 * i for i in range(n)]
    return short, long


# (name, rope_scaling, the model's trained context L, extra config, evaluated length, fraction)
CASES = [
    ("default", {"rope_type": "default"}, 16, {}, 64, 1.0),
    ("linear", {"rope_type": "linear", "factor": 4.0}, 16, {}, 64, 1.0),
    ("dynamic-past", {"rope_type": "dynamic", "factor": 4.0}, 16, {}, 64, 1.0),
    ("dynamic-within", {"rope_type": "dynamic", "factor": 4.0}, 16, {}, 12, 1.0),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, 16, {}, 64, 1.0),
    (
        "yarn-betas",
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 64,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "truncate": False,
        },
        64,
        {},
        64,
        1.0,
    ),
    (
        "yarn-mscale",
        {"rope_type": "yarn", "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 0.5},
        16,
        {},
        64,
        1.0,
    ),
    ("yarn-partial", {"rope_type": "yarn", "factor": 4.0}, 16, {}, 64, 0.5),
    (
        "llama3",
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        64,
        {},
        128,
        1.0,
    ),
]

short, long = longrope_lists(HEAD_DIM // 2)
for name, length in [("longrope-past", 64), ("longrope-within", 12)]:
    # Phi-3's layout: the config's max_position_embeddings is the extended context, its
    # original_max_position_embeddings the trained one; the factor is their ratio.
    CASES.append(
        (
            name,
            {"rope_type": "longrope", "short_factor": short, "long_factor": long, "factor": 4.0},
            16,
            {"max_position_embeddings": 64, "original_max_position_embeddings": 16},
            length,
            1.0,
        )
    )


def case(name, scaling, context, extra, length, fraction):
    heads = 2
    kwargs = dict(
        hidden_size=HEAD_DIM * heads,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=HEAD_DIM,
        rope_theta=BASE,
        max_position_embeddings=context,
        rope_scaling=dict(scaling),
        partial_rotary_factor=fraction,
    )
    kwargs.update(extra)
    config = LlamaConfig(**kwargs)
    rope_type = scaling["rope_type"]
    inv_freq, attention = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=length)
    emb = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, length, HEAD_DIM * heads)
    cos, sin = emb(x, torch.arange(length)[None, :])
    half = inv_freq.numel()
    ours = dict(scaling)
    ours.setdefault("original_max_position_embeddings", extra.get("original_max_position_embeddings", context))
    return {
        "name": name,
        "encoding": {"kind": "rope", "base": BASE, "rotary_fraction": fraction, "scaling": ours},
        "head_dim": HEAD_DIM,
        "context": context,
        "len": length,
        "inv_freq": inv_freq.tolist(),
        "attention_factor": float(attention),
        "cos": cos[0, :, :half].tolist(),
        "sin": sin[0, :, :half].tolist(),
    }


fixtures = [case(*c) for c in CASES]
with open(OUT, "w") as f:
    json.dump({"transformers": __import__("transformers").__version__, "cases": fixtures}, f)
print(f"wrote {len(fixtures)} cases to {OUT}")
