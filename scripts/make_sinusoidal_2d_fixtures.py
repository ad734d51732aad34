"""Writes crates/posenc/tests/fixtures/sinusoidal_2d.json: MAE's 2-D sin-cos position
embeddings as transformers' ViTMAE computes them (`get_2d_sincos_pos_embed`, He et al.
2022), which posenc's `sinusoidal-2d` kind (crates/posenc/src/sinusoidal_2d.rs) must
reproduce, with the (row, column) of each of its rows.

    .venv/bin/python scripts/make_sinusoidal_2d_fixtures.py     # transformers 4.57.1
"""
import json
import pathlib

import transformers
from transformers.models.vit_mae.modeling_vit_mae import get_2d_sincos_pos_embed

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/posenc/tests/fixtures/sinusoidal_2d.json"
cases = []
for dim, grid in [(8, 3), (32, 7), (64, 14)]:
    table = get_2d_sincos_pos_embed(dim, grid, add_cls_token=False)  # (grid², dim), row-major
    rows = [[r, c] for r in range(grid) for c in range(grid)]
    cases.append({"d_model": dim, "grid": grid, "rows": rows, "table": table.tolist()})
OUT.write_text(json.dumps({"transformers": transformers.__version__, "cases": cases}) + "\n")
print(f"wrote {OUT} (transformers {transformers.__version__})")
