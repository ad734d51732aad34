#!/usr/bin/env python3
"""Each layer's positions in eight real model families, from transformers itself.

For each family, the fields of its published `config.json` that place positions (written
out below: they are facts of the released models, the rest left at transformers'
defaults). transformers builds the config (`AutoConfig.for_model`), which derives what the
file leaves out (`layer_types`, SmolLM3's `no_rope_layers`); each layer's kind of
attention (full or sliding, and the window), whether it rotates, and the cos and sin of
the family's own rotary class (`<Family>RotaryEmbedding`, its `dynamic_rope_update`
included) at sampled rows of a table of `len` positions. Gemma 3's sliding layers take a
second rotary embedding, made the way `Gemma3TextModel.__init__` makes it (the config
copied, `rope_theta = rope_local_base_freq`, the default rope type). Nothing here comes
from posenc. crates/posenc/tests/hf_config.rs reads each config with
`posenc::hf::HfPositions` and compares every layer.

    .venv/bin/python scripts/make_hf_config_fixtures.py     # torch==2.9.1, transformers==4.57.1

writes crates/posenc/tests/fixtures/hf_configs.json.
"""
import copy
import importlib
import json
import os

import torch
import transformers
from transformers import AutoConfig

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures",
                   "hf_configs.json")

# microsoft/Phi-3.5-mini-instruct's LongRoPE factors, as its config.json gives them.
PHI35_LONG = [1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
              1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661,
              3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
              7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945,
              24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
              32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
              50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305,
              58.21000289916992, 60.1400032043457, 62.61000442504883, 62.62000274658203,
              62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
              63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
              64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938,
              64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062]
PHI35_SHORT = [1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705,
               1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
               1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
               1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
               1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
               1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
               1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
               2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0299997329711914,
               2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
               2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
               2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713,
               2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533]

# (name, module, the config's position fields, the lengths whose tables are compared)
FAMILIES = [
    ("llama-3.1-8b", "llama", {
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
     [64]),
    ("qwen2.5-7b", "qwen2", {
        "model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "num_hidden_layers": 28, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rope_scaling": None, "sliding_window": 131072,
        "use_sliding_window": False, "max_window_layers": 28}, [64]),
    ("qwen3-8b", "qwen3", {
        "model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
        "num_key_value_heads": 8, "num_hidden_layers": 36, "max_position_embeddings": 40960,
        "rope_theta": 1000000, "rope_scaling": None, "sliding_window": None,
        "use_sliding_window": False, "max_window_layers": 36}, [64]),
    ("gemma-2-9b", "gemma2", {
        "model_type": "gemma2", "hidden_size": 3584, "num_attention_heads": 16, "head_dim": 256,
        "num_key_value_heads": 8, "num_hidden_layers": 42, "max_position_embeddings": 8192,
        "rope_theta": 10000.0, "sliding_window": 4096}, [64]),
    ("gemma-3-4b", "gemma3", {
        "model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8,
        "head_dim": 256, "num_key_value_heads": 4, "num_hidden_layers": 34,
        "max_position_embeddings": 131072, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024, "sliding_window_pattern": 6}, [64]),
    ("phi-3.5-mini", "phi3", {
        "model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32,
        "num_key_value_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"long_factor": PHI35_LONG, "short_factor": PHI35_SHORT,
                         "type": "longrope"},
        "sliding_window": 262144}, [64, 8192]),
    ("smollm3-3b", "smollm3", {
        "model_type": "smollm3", "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 4, "num_hidden_layers": 36, "max_position_embeddings": 65536,
        "rope_theta": 5000000.0, "rope_scaling": None, "no_rope_layer_interval": 4,
        "use_sliding_window": False, "sliding_window": None}, [64]),
    ("gpt-oss-20b", "gpt_oss", {
        "model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "head_dim": 64,
        "num_key_value_heads": 8, "num_hidden_layers": 24, "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn",
                         "truncate": False},
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12}, [64]),
]


def rows_of(length):
    return sorted({0, 1, 7, length // 2, length - 1})


def tables(rotary, length, head_dim):
    x = torch.zeros(1, length, head_dim)
    cos, sin = rotary(x, torch.arange(length)[None, :])
    # Most families give each pair's angle twice (`rotate_half`'s layout); gpt-oss once.
    half = cos.shape[-1] // 2
    if not torch.equal(cos[..., :half], cos[..., half:2 * half]):
        half = cos.shape[-1]
    rows = rows_of(length)
    return {"cos": cos[0, rows, :half].double().tolist(), "sin": sin[0, rows, :half].double().tolist()}


def family(module, fields):
    """transformers' config of `fields`, the family's modeling module, the head's width,
    and the rotary embedding of each kind of layer (Gemma 3's sliding layers take a second,
    made as `Gemma3TextModel.__init__` makes it)."""
    args = {k: v for k, v in fields.items() if k != "model_type"}
    config = AutoConfig.for_model(fields["model_type"], **copy.deepcopy(args))
    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    rotary_class = next(getattr(modeling, n) for n in dir(modeling) if n.endswith("RotaryEmbedding"))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rotaries = {"full_attention": rotary_class(config=config)}
    if module == "gemma3":
        local = copy.deepcopy(config)
        local.rope_theta = local.rope_local_base_freq
        local.rope_scaling = {"rope_type": "default"}
        rotaries["sliding_attention"] = rotary_class(config=local)
    return config, modeling, head_dim, rotaries


def main():
    families = []
    for name, module, fields, lengths in FAMILIES:
        config, _, head_dim, rotaries = family(module, fields)
        n = config.num_hidden_layers
        types = getattr(config, "layer_types", None)
        if types is None:
            types = ["sliding_attention" if getattr(config, "sliding_window", None) else "full_attention"] * n
        rotates = [bool(r) for r in getattr(config, "no_rope_layers", None) or [1] * n]
        layers = []
        for i in range(n):
            layers.append({"layer": i, "attention": types[i], "rotates": rotates[i],
                           "window": getattr(config, "sliding_window", None) if types[i] == "sliding_attention" else None,
                           "rotary": types[i] if types[i] in rotaries else "full_attention"})
        by_rotary = {}
        for kind, rotary in rotaries.items():
            by_rotary[kind] = [{"len": length, "rows": rows_of(length), **tables(rotary, length, head_dim)}
                               for length in lengths]
        families.append({"name": name, "config": fields, "head_dim": head_dim,
                         "layers": layers, "tables": by_rotary})
    with open(OUT, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "families": families}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
