"""Writes crates/posenc/tests/fixtures/liere.json: LieRE's rotations as its own code computes
them (Ostmeier et al. 2024; StanfordMIMI/LieRE's `models/rope_vit.py`:
`PositionEncoderBase`, `LierePositionEncoder`, `FlexibleAttention.apply_transforms`), which
posenc's `liere` kind (crates/posenc/src/liere.rs) must reproduce: queries turned at the
trained grid, at a larger one (LieRE's normalisation of positions past the trained grid),
in three dimensions, with blocks that leave features over; and the gradients of a weighted
sum of the turned queries with respect to the generators' weights and the queries.

LieRE is not a package: give the path of a checkout (at commit b27b41b) and the script reads
those classes out of the file (its other imports, ipdb and einops among them, are not
needed). The encoder runs as LieRE's ViT configures it for its experiments: a generator per
head (`rotary_embedding_per_head`), one set for the stack, and here no class token.

    .venv/bin/python scripts/make_liere_fixtures.py path/to/LieRE     # torch 2.9.1
"""
import ast
import json
import math
import pathlib
import subprocess
import sys
import types
from collections.abc import Iterable
from enum import Enum

import numpy as np
import torch
import torch.nn as nn

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/posenc/tests/fixtures/liere.json"
repo = pathlib.Path(sys.argv[1])
path = repo / "models/rope_vit.py"
wanted = {"PositionEncoderBase", "LierePositionEncoder", "ExponentiationMethod",
          "FlexibleAttention"}
tree = ast.parse(path.read_text())
module = ast.Module(body=[n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted],
                    type_ignores=[])
liere = {"torch": torch, "nn": nn, "math": math, "np": np, "Iterable": Iterable, "Enum": Enum}
exec(compile(module, str(path), "exec"), liere)
try:
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
except (OSError, subprocess.CalledProcessError):
    commit = "unknown"

cases = []
# (trained grid, the grid turned, heads, head width, generator width, seed)
for trained, grid, heads, head_dim, g, seed in [
    ((3, 4), (3, 4), 2, 8, 4, 1),      # the trained grid, two blocks a head
    ((3, 4), (5, 6), 2, 8, 4, 1),      # past it: LieRE's linspace(0, n / n0, n)
    ((6, 6), (6, 6), 2, 16, 16, 2),    # one block the whole head, as the vision task's
    ((2, 3, 3), (2, 4, 3), 1, 10, 3, 3),  # three axes; one feature of the head left over
]:
    torch.manual_seed(seed)
    encoder = liere["LierePositionEncoder"](
        image_size=list(trained), patch_size=1, dim=heads * head_dim, phase_type="learned",
        position_sequencing_type="sequential", heads=heads, input_dimensionality=len(trained),
        generator_dim=g, depth=1, rotary_embedding_per_layer=False,
        rotary_embedding_per_head=True, cls_token=False)
    transforms = encoder(torch.tensor([list(grid)]), dtype=torch.float32)
    tokens = math.prod(grid)
    q = torch.randn(1, heads, tokens, head_dim, requires_grad=True)
    attention = types.SimpleNamespace(learnable_heads_rotations=heads, dim_head=head_dim)
    turned = liere["FlexibleAttention"].apply_transforms(attention, q, transforms)
    weights = torch.randn_like(turned)
    (turned * weights).sum().backward()
    rows = torch.cartesian_prod(*(torch.arange(n) for n in grid)).reshape(tokens, len(grid))
    # LieRE rounds each generator to f32 before it exponentiates it (the loop of its
    # forward): the same formula in float64 throughout, LieRE's positions made in float64 by
    # its own PositionEncoderBase, exponentiated by torch.linalg.matrix_exp.
    torch.set_default_dtype(torch.float64)
    positions = liere["PositionEncoderBase"].forward(encoder, torch.tensor([list(grid)]))[0]
    torch.set_default_dtype(torch.float32)
    upper = torch.triu(encoder.generator_raw_params.detach().double()[:, 0], diagonal=1)
    generator = torch.einsum("ta,anij->tnij", positions, upper - upper.transpose(-1, -2))
    rotation = torch.linalg.matrix_exp(generator)  # (tokens, heads · blocks, g, g)
    blocks = head_dim // g
    rotation = rotation.reshape(tokens, heads, blocks, g, g).transpose(0, 1)
    x = q.detach().double()[0]
    exact = (rotation @ x[..., :blocks * g].reshape(heads, tokens, blocks, g, 1))
    exact = torch.cat([exact.reshape(heads, tokens, blocks * g), x[..., blocks * g:]], -1)
    cases.append({
        "trained": list(trained), "grid": list(grid), "heads": heads, "head_dim": head_dim,
        "generator_dim": g, "coords": rows.tolist(),
        # (axes, heads · blocks, g, g): the one layer's weights.
        "generators": encoder.generator_raw_params.detach()[:, 0].tolist(),
        "q": q.detach()[0].tolist(), "q_turned": turned.detach()[0].tolist(),
        "q_turned_f64": exact.tolist(),
        "generator_norm": float(generator.abs().sum(-1).max()),
        "weights": weights[0].tolist(),
        "grad_generators": encoder.generator_raw_params.grad[:, 0].tolist(),
        "grad_q": q.grad[0].tolist(),
    })
OUT.write_text(json.dumps({"liere": commit, "torch": torch.__version__, "cases": cases}) + "\n")
print(f"wrote {OUT} (LieRE {commit})")
