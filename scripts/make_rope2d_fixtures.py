"""Writes crates/posenc/tests/fixtures/rope_2d.json: RoPE-Axial as rope-vit computes it
(Heo et al. 2024; naver-ai/rope-vit's `models/vit_rope.py`: `init_t_xy`,
`compute_axial_cis`, `apply_rotary_emb`), which posenc's `rope-2d` kind
(crates/posenc/src/rope_2d.rs) must reproduce: the complex table of a grid of patches, as
cos and sin, and queries turned by it.

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
wanted = {"init_t_xy", "compute_axial_cis", "reshape_for_broadcast", "apply_rotary_emb"}
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
OUT.write_text(json.dumps({"rope_vit": commit, "torch": torch.__version__, "cases": cases}) + "\n")
print(f"wrote {OUT} (rope-vit {commit})")
