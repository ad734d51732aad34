"""Writes crates/posenc/tests/fixtures/mrope.json: multimodal RoPE as transformers 5.24
computes it, which posenc's `mrope` kind (crates/posenc/src/mrope.rs) must reproduce.

- Qwen2-VL's chunked sections (`Qwen2VLRotaryEmbedding`, [16, 24, 24], θ = 1e6) and
  Qwen3-VL's interleaved ones (`Qwen3VLTextRotaryEmbedding`, [24, 20, 20], θ = 5e6), heads
  of 128, at explicit (t, h, w) rows: the class's own cos and sin (its angles in f32), and
  the same layout applied to angles taken in f64 by the class's own
  `recomposition_frequencies`; then queries turned by each model's `apply_rotary_pos_emb`
  with the class's tables (in 5.24 the sections are laid out in the rotary class).
- Qwen2-VL's `get_rope_index` for text, an image, text, an image, text (spatial merge 2).

Nothing here comes from posenc.

    .venv/bin/pip install --target .venv-tf5 -r scripts/requirements-mrope.txt
    PYTHONPATH=.venv-tf5 .venv/bin/python scripts/make_mrope_fixtures.py   # torch 2.9.1
"""
import json
import pathlib
import types

import torch
import transformers
from transformers.models.qwen2_vl import modeling_qwen2_vl as q2
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLConfig, Qwen2VLTextConfig
from transformers.models.qwen3_vl import modeling_qwen3_vl as q3
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/posenc/tests/fixtures/mrope.json"
HEAD_DIM = 128
torch.manual_seed(0)
# Rows of (t, h, w): text at (p, p, p), an image's patches, and far positions.
rows = [[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3], [3, 3, 4], [3, 4, 3], [3, 5, 7],
        [4, 3, 3], [17, 2, 9], [40, 41, 42], [300, 7, 1000], [4095, 4000, 4090]]
position_ids = torch.tensor(rows, dtype=torch.long).T.reshape(3, 1, -1)
q = torch.randn(1, 2, len(rows), HEAD_DIM, dtype=torch.float32)


def case(name, rotary, apply, interleaved, section, theta):
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, position_ids)  # (1, n, 128) each, angles in f32
    freqs = position_ids.double()[..., None].expand(3, 1, len(rows), HEAD_DIM // 2)
    inv = 1.0 / (theta ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
    angles = freqs * inv
    cos64 = rotary.recomposition_frequencies(angles.cos())
    sin64 = rotary.recomposition_frequencies(angles.sin())
    turned = apply(q, q, cos, sin)[0]
    return {
        "name": name, "rope_theta": theta, "mrope_section": section,
        "mrope_interleaved": interleaved, "head_dim": HEAD_DIM, "rows": rows,
        # The first half of each row (the second repeats it, for rotate_half).
        "cos": cos[0, :, : HEAD_DIM // 2].tolist(), "sin": sin[0, :, : HEAD_DIM // 2].tolist(),
        "cos_f64": cos64[0, :, : HEAD_DIM // 2].tolist(),
        "sin_f64": sin64[0, :, : HEAD_DIM // 2].tolist(),
        "q": q[0].tolist(), "q_turned": turned[0].tolist(),
    }


cfg2 = Qwen2VLTextConfig(hidden_size=3584, num_attention_heads=28, rope_parameters={
    "rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]})
rot2 = q2.Qwen2VLRotaryEmbedding(cfg2)
apply2 = lambda q, k, c, s: q2.apply_rotary_pos_emb(q, k, c, s)
cfg3 = Qwen3VLTextConfig(hidden_size=4096, num_attention_heads=32, head_dim=128, rope_parameters={
    "rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [24, 20, 20],
    "mrope_interleaved": True})
rot3 = q3.Qwen3VLTextRotaryEmbedding(cfg3)
apply3 = lambda q, k, c, s: q3.apply_rotary_pos_emb(q, k, c, s)
cases = [case("qwen2-vl", rot2, apply2, False, [16, 24, 24], 1_000_000.0),
         case("qwen3-vl", rot3, apply3, True, [24, 20, 20], 5_000_000.0)]

# get_rope_index on text (3), an image (grid 1 × 4 × 6 → 1 × 2 × 3 merged), text (2), an
# image (1 × 6 × 2 → 1 × 3 × 1), text (4). mm_token_type_ids: 0 text, 1 image.
merge = 2
segments = [("text", 3), ("image", [1, 4, 6]), ("text", 2), ("image", [1, 6, 2]), ("text", 4)]
types_, grids = [], []
for kind, what in segments:
    if kind == "text":
        types_ += [0] * what
    else:
        t, h, w = what
        types_ += [1] * (t * (h // merge) * (w // merge))
        grids.append(what)
model_cfg = Qwen2VLConfig()
model_cfg.vision_config.spatial_merge_size = merge
fake = types.SimpleNamespace(config=model_cfg)
fake.get_vision_position_ids = lambda *a, **k: q2.Qwen2VLModel.get_vision_position_ids(fake, *a, **k)
ids = torch.zeros(1, len(types_), dtype=torch.long)
index, _ = q2.Qwen2VLModel.get_rope_index(
    fake, ids, torch.tensor([types_]), image_grid_thw=torch.tensor(grids))
layout = {
    "segments": [{"text": w} if k == "text" else {"image": [w[0], w[1] // merge, w[2] // merge]}
                 for k, w in segments],
    "coords": index[:, 0, :].T.tolist(),
}

OUT.write_text(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                           "cases": cases, "layout": layout}) + "\n")
print(f"wrote {OUT} (transformers {transformers.__version__})")
