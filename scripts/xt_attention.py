"""What the fixture scripts of attention against x-transformers share
(make_sink_fixtures.py, make_fox_fixtures.py): values exact in f32, the two cases'
inputs, the check of x-transformers against a formula written out in f64, and how the
cases are stored for the Rust tests (x-transformers' to_q, to_k, to_v and to_out under
this project's q_proj, k_proj, v_proj and out_proj)."""
import importlib.metadata
import os

import torch
from safetensors.torch import save_file

CASES = (("causal", True), ("padded", False))
NAMES = {"to_q": "q_proj", "to_k": "k_proj", "to_v": "v_proj", "to_out": "out_proj"}


def make_exact(attn):
    """Rounds every parameter to f32 (kept in f64), as the Rust side reads them."""
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(p.float().double())


def inputs(b, n, dim, causal):
    """x (requiring its gradient), the keys kept (sequence 1's last two are padding when
    not causal), and the weights w of the loss sum(out * w), zero at padded queries:
    x-transformers gives those outputs of its own, so they are not compared."""
    x = torch.randn(b, n, dim, dtype=torch.float64).float().double().requires_grad_(True)
    keep = torch.ones(b, n, dtype=torch.bool)
    if not causal:
        keep[1, -2:] = False
    w = torch.randn(b, n, dim, dtype=torch.float64).float().double() * keep[..., None]
    return x, keep, w


def check(out, out64, keep, pairs):
    """The formula's output and gradients against x-transformers', to 1e-6."""
    real = keep[..., None]
    assert torch.allclose(out64 * real, out * real, atol=1e-6), (out64 - out).abs().max()
    for ours, theirs in pairs:
        assert torch.allclose(ours.grad, theirs.grad, atol=1e-6), (ours.grad - theirs.grad).abs().max()


def store(f, case, attn, x, keep, w, out, weights, extra):
    """The case's projections, inputs, output, weights, gradients in x and W^Q, and `extra`
    (name → tensor), as f32 under `case.`."""
    for t, name in NAMES.items():
        f[f"{case}.{name}.weight"] = getattr(attn, t).weight.detach().float()
    f[f"{case}.x"] = x.detach().float()
    f[f"{case}.keep"] = keep.to(torch.uint8)
    f[f"{case}.w"] = w.float()
    f[f"{case}.out"] = (out * keep[..., None]).detach().float()
    f[f"{case}.weights"] = weights.detach().float()
    f[f"{case}.grad_x"] = x.grad.float()
    f[f"{case}.grad_q_proj"] = attn.to_q.weight.grad.float()
    for name, t in extra.items():
        f[f"{case}.{name}"] = t.detach().float()


def save(f, out):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    save_file({k: v.contiguous() for k, v in f.items()}, out, metadata={
        "torch": torch.__version__,
        "x-transformers": importlib.metadata.version("x-transformers"),
    })
    print(f"wrote {len(f)} tensors to {os.path.normpath(out)}")
