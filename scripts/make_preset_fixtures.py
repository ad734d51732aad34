#!/usr/bin/env python3
"""What transformers makes of each preset's family, layer by layer.

posenc's presets (crates/posenc/src/presets.rs) are the position fields of four released
models' config.json, written out again below. For each, transformers builds the config
(`AutoConfig.for_model`, which derives `layer_types` and Llama 4's `no_rope_layers`) and the
family's own attention and rotary classes (on the meta device: no weights; the rotary
classes as scripts/make_hf_config_fixtures.py builds them), and the script
records for every layer what that code does with positions:

- its attention: full, or sliding with the window;
- whether it rotates (Llama 4's `use_rope`; Cohere 2 rotates only where it slides);
- how it pairs dimensions, found by turning a one-hot vector with the family's own
  `apply_rotary_*` function: `interleaved` when dimension 0 turns into 1, `halves` when
  into d/2;
- which rotary embedding it takes, whose inverse frequencies and attention factor are
  recorded once (Gemma 3's sliding layers get the second embedding
  `Gemma3TextModel.__init__` makes);
- Llama 4's query/key norm (`qk_norm`, its ε) and temperature (`attn_scale`,
  `floor_scale`, where `attn_temperature_tuning and not use_rope`);
- gpt-oss's learned sinks (`GptOssAttention.sinks`);
- Llama 4's chunk (`attention_chunk_size` on the `chunked_attention` layers).

It also records which keys transformers' chunked causal mask (`masking_utils.
chunked_causal_mask_function`, no left padding) lets each query see, in chunks of 4 over
10 positions, for the chunked `window` to be compared against.

Nothing here comes from posenc. crates/posenc/tests/presets.rs expands each preset and
compares every layer.

    .venv/bin/python scripts/make_preset_fixtures.py     # torch==2.9.1, transformers==4.57.1

writes crates/posenc/tests/fixtures/presets.json.
"""
import json
import os

import torch
import transformers

from make_hf_config_fixtures import FAMILIES, family

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures",
                   "presets.json")

RELEASED = {name: fields for name, _, fields, _ in FAMILIES}

# (preset, module, the config.json's position fields)
PRESETS = [
    ("llama4", "llama4", {
        "model_type": "llama4_text", "hidden_size": 5120, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 48,
        "max_position_embeddings": 10485760, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "no_rope_layers": [], "use_qk_norm": True, "rms_norm_eps": 1e-05,
        "attn_temperature_tuning": True, "attn_scale": 0.1, "floor_scale": 8192,
        "attention_chunk_size": 8192}),
    # The released configs scripts/make_hf_config_fixtures.py reads already.
    ("gpt-oss", "gpt_oss", RELEASED["gpt-oss-20b"]),
    ("gemma3", "gemma3", RELEASED["gemma-3-4b"]),
    ("rnope-swa", "cohere2", {
        "model_type": "cohere2", "hidden_size": 8192, "num_attention_heads": 64,
        "num_hidden_layers": 40, "max_position_embeddings": 8192, "rope_theta": 10000.0,
        "rope_scaling": None, "sliding_window": 4096, "sliding_window_pattern": 4}),
]


def attention_class(modeling):
    return next(getattr(modeling, n) for n in dir(modeling)
                if n.endswith("Attention") and "Flash" not in n and "Sdpa" not in n
                and n[0].isupper() and hasattr(getattr(modeling, n), "forward")
                and "layer_idx" in getattr(modeling, n).__init__.__code__.co_varnames)


def pairing(module, modeling, rotary, head_dim):
    """Which dimension the family's rotation turns dimension 0 into."""
    x = torch.zeros(1, 1, 1, head_dim)
    x[..., 0] = 1.0
    position = torch.tensor([[1]])
    if module == "llama4":
        freqs = rotary(x.view(1, 1, head_dim), position)
        q, _ = modeling.apply_rotary_emb(x, x, freqs)
    else:
        cos, sin = rotary(x.view(1, 1, head_dim), position)
        q, _ = modeling.apply_rotary_pos_emb(x, x, cos, sin)
    moved = [i for i in range(1, head_dim) if abs(float(q[0, 0, 0, i])) > 1e-6]
    return {1: "interleaved", head_dim // 2: "halves"}[moved[0]]


def main():
    out = []
    for name, module, fields in PRESETS:
        config, modeling, head_dim, rotaries = family(module, fields)
        config._attn_implementation = "eager"
        attention = attention_class(modeling)
        n = config.num_hidden_layers
        types = getattr(config, "layer_types", None) or ["full_attention"] * n
        layers = []
        for i in range(n):
            with torch.device("meta"):
                attn = attention(config, i)
            rotates = bool(getattr(attn, "use_rope", True))
            if module == "cohere2":
                rotates = attn.sliding_window is not None
            rotary = rotaries.get(types[i], rotaries["full_attention"])
            layer = {"attention": types[i],
                     "window": config.sliding_window if types[i] == "sliding_attention" else None,
                     "chunk": config.attention_chunk_size if types[i] == "chunked_attention" else None,
                     "rotates": rotates, "sink": hasattr(attn, "sinks"),
                     "qk_norm": None, "temperature": None}
            if rotates:
                layer["layout"] = pairing(module, modeling, rotary, head_dim)
                layer["rotary"] = types[i] if types[i] in rotaries else "full_attention"
            if hasattr(attn, "qk_norm"):
                layer["qk_norm"] = {"eps": attn.qk_norm.eps}
            if getattr(attn, "attn_temperature_tuning", False) and not rotates:
                layer["temperature"] = {"scale": attn.attn_scale, "floor": attn.floor_scale}
            layers.append(layer)
        tables = {kind: {"inv_freq": r.inv_freq.double().tolist(),
                         "attention_factor": float(r.attention_scaling)}
                  for kind, r in rotaries.items()}
        out.append({"preset": name, "config": fields, "head_dim": head_dim, "layers": layers,
                    "rotaries": tables})
    chunk, n = 4, 10
    seen = transformers.masking_utils.chunked_causal_mask_function(
        chunk, torch.zeros(1, dtype=torch.long))
    keep = [[bool(seen(0, 0, torch.tensor(q), torch.tensor(k))) for k in range(n)]
            for q in range(n)]
    with open(OUT, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "presets": out,
                   "chunked_mask": {"chunk": chunk, "len": n, "keep": keep}}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
