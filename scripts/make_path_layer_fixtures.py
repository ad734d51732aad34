#!/usr/bin/env python3
"""fla's PaTH attention layer (`PaTHAttention`, flash-linear-attention 0.6.0,
`fla/layers/path_attn.py`), run on a CPU, for the `path` kind inside posenc's attention to
be compared against.

The layer is fla's own class, read from the pinned wheel: its projections of q, k, v, w
(through the rank-32 bottleneck), β (`2·σ`), the forget gate (`logsigmoid`), the short
convolution on w, the l2 norm and the output projection, in its own order. Three of the
pieces it calls run only as Triton kernels, so each is replaced by the CPU form its own
package gives or documents:

- `parallel_path_attn` by `naive_path_attn` (`fla/ops/path_attn/naive.py`, the reference
  `scripts/make_path_fixtures.py` checks against the explicit product of transforms), at
  the same default scale `1/√head_dim`;
- `ShortConvolution.forward` by the `nn.Conv1d` it subclasses (depthwise, padded by
  `kernel_size − 1`, cut to the first T outputs: causal), then its SiLU;
- `l2_norm` by its kernel's formula, `x / √(Σx² + 10⁻⁶)` (`fla/modules/norm/l2norm.py`).

The wheel of flash-linear-attention is downloaded (not installed: its package would
replace fla-core's `fla/__init__`) into `.cache/fla-wheel`.

It writes, for lengths 1, 63, 64 and 150 (one chunk of naive_path_attn, its edge, three),
with 4 query heads over 2 key heads, with and without the forget gate: the layer's
weights (fla's names), the input x, the output, and the gradients of `sum(out * r)` in x
and every weight.

    .venv/bin/pip install -r scripts/requirements-path.txt
    .venv/bin/python scripts/make_path_layer_fixtures.py [OUT]

OUT defaults to crates/transformer/tests/fixtures/path_layer.safetensors, which
crates/transformer/tests/path.rs reads.
"""
import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
import types
import zipfile

import torch
import torch.nn.functional as F

from make_path_fixtures import load_naive
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
WHEELS = os.path.join(ROOT, ".cache", "fla-wheel")
VERSION = "0.6.0"
HIDDEN, HEADS, KV_HEADS = 16, 4, 2
LENGTHS = (1, 63, 64, 150)
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    ROOT, "crates", "transformer", "tests", "fixtures", "path_layer.safetensors")


def wheel():
    """The pinned wheel, downloaded once."""
    pattern = os.path.join(WHEELS, f"flash_linear_attention-{VERSION}-*.whl")
    if not glob.glob(pattern):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", WHEELS,
                        f"flash-linear-attention=={VERSION}"], check=True)
    return glob.glob(pattern)[0]


def load_layer_module(naive):
    """fla/layers/path_attn.py from the wheel, its Triton-only calls on the CPU."""
    tmp = tempfile.mkdtemp()
    with zipfile.ZipFile(wheel()) as z:
        for name in ("fla/layers/path_attn.py", "fla/layers/utils.py"):
            z.extract(name, tmp)
    import fla  # fla-core: ops and modules
    import fla.modules
    # fla.layers without its __init__, which imports every layer and model.
    layers = os.path.join(tmp, "fla", "layers")
    package = types.ModuleType("fla.layers")
    package.__path__ = [layers]
    sys.modules["fla.layers"] = package
    spec = importlib.util.spec_from_file_location("fla.layers.path_attn",
                                                  os.path.join(layers, "path_attn.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def parallel_path_attn(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None,
                           use_cache=False):
        assert cu_seqlens is None and not use_cache
        if g is None:
            g = torch.zeros(q.shape[:3], dtype=torch.float32)
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        return naive(q, k, v, w, beta, g, scale), None

    def l2_norm(x, eps=1e-6, output_dtype=None):
        y = x / (x.square().sum(-1, keepdim=True) + eps).sqrt()
        return y if output_dtype is None else y.to(output_dtype)

    def short_conv(self, x, cache=None, output_final_state=False, cu_seqlens=None, **_):
        assert cache is None and cu_seqlens is None
        y = torch.nn.Conv1d.forward(self, x.transpose(1, 2))[..., : x.shape[1]]
        y = y.transpose(1, 2)
        return (F.silu(y) if self.activation else y), None

    module.parallel_path_attn = parallel_path_attn
    module.l2_norm = l2_norm
    module.ShortConvolution.forward = short_conv
    return module


def main():
    fla_layer = load_layer_module(load_naive())
    tensors = {}
    for n, t in enumerate(LENGTHS):
        for gated in (True, False):
            torch.manual_seed(10 * n + gated)
            layer = fla_layer.PaTHAttention(hidden_size=HIDDEN, num_heads=HEADS,
                                            num_kv_heads=KV_HEADS, use_forget_gate=gated,
                                            layer_idx=0).double()
            # Weights larger than PyTorch's initialization, so the transforms turn keys far.
            with torch.no_grad():
                for p in layer.parameters():
                    p.mul_(2.0)
            x = torch.randn(2, t, HIDDEN, dtype=torch.float64, requires_grad=True)
            out, _, _ = layer(x)
            r = torch.randn(out.shape, dtype=torch.float64)
            (out * r).sum().backward()
            case = f"t{t}.{'gated' if gated else 'ungated'}"
            tensors[f"{case}.x"] = x.detach().float().contiguous()
            tensors[f"{case}.grad.x"] = x.grad.float().contiguous()
            tensors[f"{case}.out"] = out.detach().float().contiguous()
            tensors[f"{case}.r"] = r.float().contiguous()
            for name, p in layer.named_parameters():
                tensors[f"{case}.{name}"] = p.detach().float().contiguous()
                tensors[f"{case}.grad.{name}"] = p.grad.float().contiguous()
            print(f"T={t:>3} gated={gated}: |out| ≤ {out.abs().max().item():.2f}")
    os.makedirs(os.path.dirname(os.path.abspath(OUT)), exist_ok=True)
    tmp = OUT + ".tmp"
    save_file(tensors, tmp, metadata={"hidden": str(HIDDEN), "heads": str(HEADS),
                                      "kv_heads": str(KV_HEADS), "lengths": repr(LENGTHS)})
    os.replace(tmp, OUT)
    print(f"wrote {len(tensors)} tensors to {OUT}")


if __name__ == "__main__":
    main()
