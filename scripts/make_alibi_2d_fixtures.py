"""Writes crates/posenc/tests/fixtures/alibi_2d.json: 2D-ALiBi as CROMA computes it (Fuller
et al. 2023; `get_2dalibi` in torchgeo 0.8.1's `torchgeo/models/croma.py`), which posenc's
`alibi-2d` kind (crates/posenc/src/alibi_2d.rs) must reproduce, for square grids and a
power-of-two number of heads (CROMA's slopes are ALiBi's there).

torchgeo pulls in much that this does not need: the script reads the one function out of
the file of its wheel.

    .venv/bin/pip download --no-deps torchgeo==0.8.1 -d /tmp/torchgeo
    (cd /tmp/torchgeo && unzip -o -q torchgeo-0.8.1-py3-none-any.whl torchgeo/models/croma.py)
    .venv/bin/python scripts/make_alibi_2d_fixtures.py /tmp/torchgeo/torchgeo/models/croma.py
"""
import ast
import itertools
import json
import math
import pathlib
import sys

import torch

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/posenc/tests/fixtures/alibi_2d.json"
path = pathlib.Path(sys.argv[1])
tree = ast.parse(path.read_text())
module = ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_2dalibi"],
                    type_ignores=[])
croma = {"torch": torch, "Tensor": torch.Tensor, "itertools": itertools, "math": math}
exec(compile(module, str(path), "exec"), croma)
cases = []
for heads, side in [(2, 3), (4, 5), (8, 4), (16, 2)]:
    bias = croma["get_2dalibi"](heads, side * side)[0]  # (heads, n, n)
    rows = [[r, c] for r in range(side) for c in range(side)]
    cases.append({"heads": heads, "rows": rows, "bias": bias.tolist()})
OUT.write_text(json.dumps({"source": "torchgeo 0.8.1 torchgeo/models/croma.py get_2dalibi",
                           "cases": cases}) + "\n")
print(f"wrote {OUT}")
