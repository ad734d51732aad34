#!/usr/bin/env python3
"""What transformers' own attention layers hand their attention, for `qk-norm` and
`temperature`: Llama 4's rotation then weightless norm, its temperature on the layers that
do not rotate, and Qwen 3's learned norm before its rotation.

For each of Llama 4 (a layer that rotates, layer 0, and one that does not, layer 3) and
Qwen 3, the script builds the family's attention class from a small config of its own
(`Llama4TextAttention`, `Qwen3Attention`, random weights), runs it over a batch at positions
`offset …`, and records the queries and keys its `eager_attention_forward` receives, beside
the projections before any position touches them (`q_proj(x)`, `k_proj(x)` split into
heads). Llama 4's temperature steps every `floor_scale` positions; the config makes that 4,
so the factor moves within the sequence, and ε is large (0.5, 0.25), so that a wrong one
shows. Nothing here comes from posenc:
crates/posenc/tests/qk_norm.rs builds each layer's encoding from the same config with
`posenc::hf::HfPositions` and compares.

    .venv/bin/python scripts/make_qk_norm_fixtures.py     # torch==2.9.1, transformers==4.57.1

writes crates/posenc/tests/fixtures/qk_norm.safetensors and qk_norm.json.
"""
import json
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import Llama4TextConfig, Qwen3Config
from transformers.models.llama4 import modeling_llama4
from transformers.models.qwen3 import modeling_qwen3

HERE = os.path.dirname(__file__)
OUT = os.path.join(HERE, "..", "crates", "posenc", "tests", "fixtures")
BATCH, LEN, OFFSETS = 2, 40, [0, 100]

LLAMA4 = {
    "model_type": "llama4_text", "hidden_size": 32, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 4,
    "intermediate_size": 64, "intermediate_size_mlp": 64, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "max_position_embeddings": 10485760, "use_qk_norm": True,
    "attn_temperature_tuning": True, "floor_scale": 4, "attn_scale": 0.1,
    "rms_norm_eps": 0.5,
}
QWEN3 = {
    "model_type": "qwen3", "hidden_size": 32, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 2,
    "intermediate_size": 64, "rope_theta": 1000000.0, "rms_norm_eps": 0.25,
    "max_position_embeddings": 40960, "rope_scaling": None, "use_sliding_window": False,
    "sliding_window": None,
}


def capture(modeling):
    """Replaces the family's eager attention with one that records its query and key."""
    seen = {}
    original = modeling.eager_attention_forward

    def recording(module, query, key, value, *args, **kwargs):
        seen["q"], seen["k"] = query.detach().clone(), key.detach().clone()
        return original(module, query, key, value, *args, **kwargs)

    modeling.eager_attention_forward = recording
    return seen


def heads(x, n, d):
    return x.view(BATCH, LEN, n, d).transpose(1, 2).contiguous()


def run(name, modeling, config, attention, rotary, layers, tensors, fixtures):
    seen = capture(modeling)
    rotary = rotary(config=config)
    for layer in layers:
        torch.manual_seed(1000 + layer)
        attn = attention(config, layer).eval()
        for p in attn.parameters():
            torch.nn.init.normal_(p, std=0.5)
        for offset in OFFSETS:
            x = torch.randn(BATCH, LEN, config.hidden_size)
            positions = torch.arange(offset, offset + LEN)
            emb = rotary(x, positions[None, :].expand(BATCH, -1))
            with torch.no_grad():
                attn(x, position_embeddings=emb, attention_mask=None, cache_position=positions)
                q = heads(attn.q_proj(x), config.num_attention_heads, config.head_dim)
                k = heads(attn.k_proj(x), config.num_key_value_heads, config.head_dim)
            key = f"{name}.{layer}.{offset}"
            tensors[f"{key}.q"], tensors[f"{key}.k"] = q, k
            tensors[f"{key}.q_seen"] = seen["q"].contiguous()
            tensors[f"{key}.k_seen"] = seen["k"].contiguous()
            fixtures.append({"family": name, "layer": layer, "offset": offset, "key": key})
        if hasattr(attn, "q_norm"):
            tensors[f"{name}.{layer}.q_norm"] = attn.q_norm.weight.detach().clone()
            tensors[f"{name}.{layer}.k_norm"] = attn.k_norm.weight.detach().clone()


def main():
    tensors, fixtures = {}, []
    llama4 = Llama4TextConfig(**{k: v for k, v in LLAMA4.items() if k != "model_type"})
    llama4._attn_implementation = "eager"
    run("llama4", modeling_llama4, llama4, modeling_llama4.Llama4TextAttention,
        modeling_llama4.Llama4TextRotaryEmbedding, [0, 3], tensors, fixtures)
    qwen3 = Qwen3Config(**{k: v for k, v in QWEN3.items() if k != "model_type"})
    qwen3._attn_implementation = "eager"
    run("qwen3", modeling_qwen3, qwen3, modeling_qwen3.Qwen3Attention,
        modeling_qwen3.Qwen3RotaryEmbedding, [0], tensors, fixtures)
    save_file({k: v.float().contiguous() for k, v in tensors.items()},
              os.path.join(OUT, "qk_norm.safetensors"))
    with open(os.path.join(OUT, "qk_norm.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "configs": {"llama4": LLAMA4, "qwen3": QWEN3},
                   "rotates": {"llama4": list(llama4.no_rope_layers)},
                   "fixtures": fixtures}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
