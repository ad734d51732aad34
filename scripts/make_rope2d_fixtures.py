"""Writes crates/posenc/tests/fixtures/rope_2d.json: RoPE-Axial and RoPE-Mixed as rope-vit
computes them (Heo et al. 2024; naver-ai/rope-vit's `models/vit_rope.py`: `init_t_xy`,
`compute_axial_cis`, `init_random_2d_freqs`, `compute_mixed_cis`, `apply_rotary_emb`), which
posenc's `rope-2d` and `rope-mixed` kinds (crates/posenc/src/rope_2d.rs, rope_mixed.rs) must
reproduce: the complex tables of a grid of patches, as cos and sin, and queries turned by
them; for RoPE-Mixed also the starting frequencies and the angles they were drawn from.

rope-vit is not a package: give the path of a checkout (at commit ce85c2e) and the script
reads those three functions out of the file (its other imports, timm's, are not needed).

    .venv/bin/python scripts/make_rope2d_fixtures.py path/to/rope-vit     # torch 2.9.1
"""
import ast
import json
import pathlib
import subprocess
import sys

import torch

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/posenc/tests/fixtures/rope_2d.json"
repo = pathlib.Path(sys.argv[1])
source = (repo / "models/vit_rope.py").read_text()
wanted = {"init_t_xy", "compute_axial_cis", "reshape_for_broadcast", "apply_rotary_emb",
          "init_random_2d_freqs", "compute_mixed_cis"}
tree = ast.parse(source)
module = ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted],
                    type_ignores=[])
rope_vit = {"torch": torch}
exec(compile(module, str(repo / "models/vit_rope.py"), "exec"), rope_vit)
try:
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
except (OSError, subprocess.CalledProcessError):
    commit = "unknown"

torch.manual_seed(0)
cases = []
# A 3 × 5 grid at head width 16, and a 7 × 9 one at 32 with rope-vit's base 100 and another.
for dim, end_y, end_x, theta in [(16, 3, 5, 100.0), (32, 7, 9, 100.0), (32, 7, 9, 10.0)]:
    cis = rope_vit["compute_axial_cis"](dim=dim, end_x=end_x, end_y=end_y, theta=theta)
    t_x, t_y = rope_vit["init_t_xy"](end_x, end_y)
    q = torch.randn(1, 2, end_x * end_y, dim)
    turned, _ = rope_vit["apply_rotary_emb"](q, q, freqs_cis=cis)
    cases.append({
        "head_dim": dim, "base": theta,
        "rows": [[int(y), int(x)] for y, x in zip(t_y.tolist(), t_x.tolist())],
        "cos": cis.real.tolist(), "sin": cis.imag.tolist(),
        "q": q[0].tolist(), "q_turned": turned[0].tolist(),
    })
# RoPE-Mixed: rope-vit's starting frequencies, and the angles its torch.rand drew for them
# (the same draws replayed), then the table and turned queries of those frequencies.
mixed = []
for dim, heads, end_y, end_x, theta, seed in [(16, 2, 3, 5, 10.0, 1), (32, 3, 6, 4, 10.0, 2)]:
    torch.manual_seed(seed)
    freqs = rope_vit["init_random_2d_freqs"](dim, heads, theta=theta)  # (2, heads, dim/2)
    torch.manual_seed(seed)
    angles = [float(torch.rand(1) * 2 * torch.pi) for _ in range(heads)]
    t_x, t_y = rope_vit["init_t_xy"](end_x, end_y)
    cis = rope_vit["compute_mixed_cis"](freqs.flatten(1).unsqueeze(1), t_x, t_y, heads)[0]
    q = torch.randn(1, heads, end_x * end_y, dim)
    turned, _ = rope_vit["apply_rotary_emb"](q, q, freqs_cis=cis)
    mixed.append({
        "head_dim": dim, "heads": heads, "base": theta, "angles": angles,
        "freqs": freqs.tolist(),
        "rows": [[int(y), int(x)] for y, x in zip(t_y.tolist(), t_x.tolist())],
        "cos": cis.real.tolist(), "sin": cis.imag.tolist(),
        "q": q[0].tolist(), "q_turned": turned[0].tolist(),
    })
OUT.write_text(json.dumps({"rope_vit": commit, "torch": torch.__version__, "cases": cases,
                           "mixed": mixed}) + "\n")
print(f"wrote {OUT} (rope-vit {commit})")
