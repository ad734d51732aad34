"""Writes crates/posenc/tests/fixtures/learned_2d.json: a learned position table resampled
to other grids by timm's `resample_abs_pos_embed` (bicubic, antialiased, as timm's ViTs
resample theirs), which posenc's `learned-2d` kind (crates/posenc/src/learned_2d.rs) must
reproduce: larger grids (the resolutions a model is tested past), a smaller one (where the
antialiasing widens the filter) and an uneven one.

    .venv/bin/pip install --no-deps --target .venv-timm -r scripts/requirements-timm.txt
    PYTHONPATH=.venv-timm .venv/bin/python scripts/make_learned_2d_fixtures.py   # torch 2.9.1
"""
import json
import pathlib

import timm
import torch
from timm.layers.pos_embed import resample_abs_pos_embed

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/posenc/tests/fixtures/learned_2d.json"
torch.manual_seed(0)
cases = []
for (rows, cols), d, targets in [((4, 4), 6, [(6, 6), (8, 8), (3, 3), (5, 7)]),
                                  ((8, 8), 16, [(12, 12), (16, 16), (4, 4)])]:
    table = torch.randn(1, rows * cols, d)
    for new in targets:
        out = resample_abs_pos_embed(table, new_size=list(new), old_size=[rows, cols],
                                     num_prefix_tokens=0)
        cases.append({"grid": [rows, cols], "d_model": d, "table": table[0].tolist(),
                      "new": list(new), "resampled": out[0].tolist()})
OUT.write_text(json.dumps({"timm": timm.__version__, "torch": torch.__version__,
                           "cases": cases}) + "\n")
print(f"wrote {OUT} (timm {timm.__version__})")
