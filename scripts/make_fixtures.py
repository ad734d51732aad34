#!/usr/bin/env python3
"""Reference values for the encoding crate, from independent implementations.

Every tensor written here comes from published code (PyTorch, Hugging Face transformers
and the Annotated Transformer's formula) or, for the naive encodings no library ships, from
their formulas in float64 numpy, never from posenc's own output. The Rust tests
in crates/posenc/tests/reference.rs compare against them to 1e-6.

    python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt
    .venv/bin/python scripts/make_fixtures.py

writes crates/posenc/tests/fixtures/encodings.safetensors.
"""
import math
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.gpt_neox import modeling_gpt_neox as neox
from transformers.models.gptj import modeling_gptj as gptj
from transformers.models.llama import modeling_llama as llama
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding
from transformers.models.t5.modeling_t5 import T5Attention

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "posenc", "tests", "fixtures", "encodings.safetensors")
torch.manual_seed(0)
f = {}


def annotated_transformer_pe(max_len, d_model):
    """The Annotated Transformer's PositionalEncoding buffer, in float64."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


# 1. Sinusoidal, interleaved (the paper) and concatenated (Marian: [sin | cos]).
f["sinusoidal.d32.len50"] = annotated_transformer_pe(50, 32).float()
marian = MarianSinusoidalPositionalEmbedding(50, 32)
marian._init_weight()
f["marian.d32.len50"] = marian.weight.detach().float().clone()

# 2. Rotary. cos/sin computed in float64 from each model's own inverse frequencies, then the
#    models' own apply functions (the layout under test) run in float64.
B, H, T, D = 2, 3, 20, 16
q = torch.randn(B, H, T, D, dtype=torch.float64)
k = torch.randn(B, H, T, D, dtype=torch.float64)
f["rope.q"], f["rope.k"] = q.float(), k.float()
q, k = q.float().double(), k.float().double()  # the values the Rust side will see

cfg = llama.LlamaConfig(hidden_size=D * H, num_attention_heads=H, rope_theta=10000.0, max_position_embeddings=64)
inv_freq = llama.LlamaRotaryEmbedding(cfg).inv_freq.double()  # base^(-2i/d)
f["llama.inv_freq"] = inv_freq.float()
offset = 5  # positions 5..25, as during incremental decoding
pos = torch.arange(offset, offset + T, dtype=torch.float64)
freqs = torch.outer(pos, inv_freq)
emb = torch.cat((freqs, freqs), dim=-1)[None]
lq, lk = llama.apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
f["llama.q_rot.offset5"], f["llama.k_rot.offset5"] = lq.float(), lk.float()

# GPT-J: interleaved pairs, tensors laid out (batch, seq, heads, dim).
sincos = torch.cat((torch.sin(freqs), torch.cos(freqs)), dim=1)[None]  # create_sinusoidal_positions layout
sin, cos = torch.split(sincos, D // 2, dim=-1)
jq = gptj.apply_rotary_pos_emb(q.transpose(1, 2), sin, cos).transpose(1, 2)
jk = gptj.apply_rotary_pos_emb(k.transpose(1, 2), sin, cos).transpose(1, 2)
f["gptj.q_rot.offset5"], f["gptj.k_rot.offset5"] = jq.float(), jk.float()
f["gptj.create_sinusoidal_positions.len20"] = gptj.create_sinusoidal_positions(T, D)

# GPT-NeoX partial rotary: rotary_pct = 0.5, so the first 8 of 16 dims rotate.
rot = D // 2
inv_freq_p = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
freqs_p = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq_p)
emb_p = torch.cat((freqs_p, freqs_p), dim=-1)[None]
nq, nk = neox.apply_rotary_pos_emb(q, k, emb_p.cos(), emb_p.sin())
f["neox.q_rot.partial50"], f["neox.k_rot.partial50"] = nq.float(), nk.float()

# 3. ALiBi: BLOOM's tensor, slope_h * key_position, shape (heads, 1, len).
for heads in (8, 6, 12):
    mask = torch.ones(1, 24, dtype=torch.long)
    f[f"bloom.alibi.heads{heads}.len24"] = build_alibi_tensor(mask, heads, torch.float32).float()

# 4. T5 relative-position buckets over -150..150, both directions.
rel = torch.arange(-150, 151, dtype=torch.long)
f["t5.relative"] = rel
f["t5.buckets.bidirectional.32.128"] = T5Attention._relative_position_bucket(rel, True, 32, 128)
f["t5.buckets.unidirectional.32.128"] = T5Attention._relative_position_bucket(rel, False, 32, 128)
f["t5.buckets.bidirectional.64.256"] = T5Attention._relative_position_bucket(rel, True, 64, 256)

# 5. The naive encodings the documents reject, from their formulas in float64 (numpy): there
#    is no library that ships them. fraction: pos / (len - 1); index: pos; binary: +1 where bit
#    i of pos is set, else -1 (bit i in dimension i, least significant first); sine-single:
#    sin(w * pos) in every dimension.
D_NAIVE = 8
for length in (1, 2, 10):
    pos = np.arange(length, dtype=np.float64)[:, None]
    frac = pos / (length - 1) if length > 1 else np.zeros_like(pos)
    f[f"fraction.d8.len{length}"] = torch.from_numpy(np.repeat(frac, D_NAIVE, axis=1)).float()
f["index.d8.len300"] = torch.from_numpy(np.repeat(np.arange(300, dtype=np.float64)[:, None], D_NAIVE, axis=1)).float()
bits = (np.arange(300)[:, None] >> np.arange(D_NAIVE)[None, :]) & 1
f["binary.d8.len300"] = torch.from_numpy(np.where(bits == 1, 1.0, -1.0)).float()
for w in (1.0, 0.05):
    sine = np.sin(w * np.arange(50, dtype=np.float64))[:, None]
    f[f"sine-single.w{w}.d4.len50"] = torch.from_numpy(np.repeat(sine, 4, axis=1)).float()

# 6. Rotary with positions divided by 2 (posenc's position_scale): transformers' own "linear"
#    rope type (position interpolation), whose init function divides inv_freq by the factor,
#    applied by Llama's apply_rotary_pos_emb at positions 5..25.
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

cfg_lin = llama.LlamaConfig(hidden_size=D * H, num_attention_heads=H, rope_theta=10000.0, max_position_embeddings=64,
                            rope_scaling={"rope_type": "linear", "factor": 2.0})
inv_lin, _ = ROPE_INIT_FUNCTIONS["linear"](cfg_lin, "cpu")
freqs_lin = torch.outer(torch.arange(5, 5 + T, dtype=torch.float64), inv_lin.double())
emb_lin = torch.cat((freqs_lin, freqs_lin), dim=-1)[None]
sq, sk = llama.apply_rotary_pos_emb(q, k, emb_lin.cos(), emb_lin.sin())
f["llama.linear2.q_rot.offset5"], f["llama.linear2.k_rot.offset5"] = sq.float(), sk.float()

# 7. Kerple (Chi et al. 2022) from the paper's formulas in float64, with torch's autograd for
#    the gradients: log  -r1 * ln(1 + r2 * d),  power  -r1 * d^r2, where posenc stores
#    r1 = softplus(r1_raw) and r2 = softplus(r2_raw) (log) or 2 * sigmoid(r2_raw) (power).
#    Queries at positions 5..7 against keys 0..7; d = |i - j| (bidirectional) or
#    max(i - j, 0) (causal). The loss sum(bias * W) has gradients dW-weighted; gradcheck
#    confirms them by finite differences.
r1_raw = torch.tensor([-0.5, 0.3, 1.2], dtype=torch.float64)
r2_raw = torch.tensor([-2.0, 0.0, 0.4], dtype=torch.float64)
f["kerple.r1_raw"], f["kerple.r2_raw"] = r1_raw.float(), r2_raw.float()
qpos = torch.arange(5, 8, dtype=torch.float64)[:, None]
kpos = torch.arange(0, 8, dtype=torch.float64)[None, :]
weights = torch.randn(3, 3, 8, dtype=torch.float64)
f["kerple.w"] = weights.float()
weights = weights.float().double()
for direction in ("bidirectional", "causal"):
    d = (qpos - kpos).abs() if direction == "bidirectional" else (qpos - kpos).clamp(min=0)
    for variant in ("log", "power"):
        a = r1_raw.float().double().clone().requires_grad_(True)
        b = r2_raw.float().double().clone().requires_grad_(True)
        r1 = torch.nn.functional.softplus(a)[:, None, None]
        if variant == "log":
            r2 = torch.nn.functional.softplus(b)[:, None, None]
            bias = -r1 * torch.log1p(r2 * d)
        else:
            r2 = (2 * torch.sigmoid(b))[:, None, None]
            bias = -r1 * torch.where(d > 0, d.clamp(min=1e-300) ** r2, torch.zeros_like(d))
        (bias * weights).sum().backward()
        assert torch.autograd.gradcheck(lambda a, b: (-torch.nn.functional.softplus(a)[:, None, None] * (
            torch.log1p(torch.nn.functional.softplus(b)[:, None, None] * d) if variant == "log" else
            torch.where(d > 0, d.clamp(min=1e-300) ** (2 * torch.sigmoid(b))[:, None, None], torch.zeros_like(d)))
            * weights).sum(), (a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)))
        name = f"kerple.{variant}.{direction}"
        f[f"{name}.bias"] = bias.detach().float()
        f[f"{name}.grad_r1_raw"] = a.grad.float()
        f[f"{name}.grad_r2_raw"] = b.grad.float()

# 8. xPos (Sun et al. 2022) from x-transformers' RotaryEmbedding(use_xpos=True) and
#    apply_rotary_pos_emb, in float64: queries scaled by scale, keys by scale ** -1, as its
#    Attention does. x-transformers centres the exponent on the sequence's middle, which
#    cancels in q·k, so the scores are compared: positions 0..20 with scale_base 512, and
#    1000..1020 with scale_base 64 (a strong decay).
from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb as xt_apply

for start, scale_base in ((0, 512), (1000, 64)):
    rotary = RotaryEmbedding(D, use_xpos=True, scale_base=scale_base).double()
    t = torch.arange(start, start + T, dtype=torch.float64)
    freqs, xscale = rotary(t)
    xq = xt_apply(q, freqs, xscale)
    xk = xt_apply(k, freqs, xscale ** -1.0)
    f[f"xpos.scores.start{start}.base{scale_base}"] = (xq @ xk.transpose(-1, -2)).float()

# 9. FIRE (Li et al. 2023) from the paper's formula in float64, written out here as its
#    appendix's pseudo-code computes it: bias = mlp(psi(i - j) / (psi(max(i, L)) + 1e-6)),
#    psi(x) = log(|c x| + 1), L = |L_multiplier * L0|, mlp = Linear(1, w), ReLU, Linear(w, H).
#    Queries at 2..9 against keys 0..9, with L = 0.9 * 5.5 = 4.95, so the first queries are
#    normalised by L and the later ones by their own position. Gradients by torch's autograd,
#    checked against finite differences by gradcheck.
FIRE_W, FIRE_H, FIRE_L0 = 4, 3, 5.5
fire = {
    "mlp.0.weight": torch.randn(FIRE_W, 1, dtype=torch.float64),
    "mlp.0.bias": torch.randn(FIRE_W, dtype=torch.float64),
    "mlp.2.weight": torch.randn(FIRE_H, FIRE_W, dtype=torch.float64),
    "mlp.2.bias": torch.randn(FIRE_H, dtype=torch.float64),
    "c": torch.tensor(0.3, dtype=torch.float64),
    "L_multiplier": torch.tensor(0.9, dtype=torch.float64),
}
for name, value in fire.items():
    f[f"fire.{name}"] = value.float()
qpos = torch.arange(2, 10, dtype=torch.float64)[:, None]
kpos = torch.arange(0, 10, dtype=torch.float64)[None, :]
weights = torch.randn(FIRE_H, 8, 10, dtype=torch.float64)
f["fire.w"] = weights.float()
weights = weights.float().double()


def fire_bias(d, w1, b1, w2, b2, c, mult):
    normalizer = torch.maximum(qpos, (mult * FIRE_L0).abs())
    x = torch.log((c * d).abs() + 1) / (torch.log((c * normalizer).abs() + 1) + 1e-6)
    hidden = torch.relu(x[..., None] * w1[:, 0] + b1)
    return (hidden @ w2.T + b2).permute(2, 0, 1)


for direction in ("bidirectional", "causal"):
    d = (qpos - kpos).abs() if direction == "bidirectional" else (qpos - kpos).clamp(min=0)
    params = [v.float().double().clone().requires_grad_(True) for v in fire.values()]
    assert torch.autograd.gradcheck(lambda *p: (fire_bias(d, *p) * weights).sum(), params)
    bias = fire_bias(d, *params)
    (bias * weights).sum().backward()
    f[f"fire.{direction}.bias"] = bias.detach().float()
    for name, p in zip(fire, params):
        f[f"fire.{direction}.grad.{name}"] = p.grad.float()

# 10. CoPE (Golovneva et al. 2024) from x-transformers' CoPE module (the paper's appendix B),
#     in float64: queries (2, 2, 6, 4), causal logits with later keys at f32's most negative
#     value (x-transformers masks with the dtype's), max_pos 5 so that positions clamp, and a
#     random pos_emb. Gradients of sum(bias * W) in the queries, the logits and pos_emb by
#     torch's autograd, checked against finite differences by gradcheck. The bidirectional form, which neither the paper nor x-transformers
#     has, from its definition with explicit loops: p_ij = sum of g_it for t between i and j.
from x_transformers.x_transformers import CoPE

COPE_B, COPE_H, COPE_N, COPE_D, COPE_P = 2, 2, 6, 4, 5
cq = torch.randn(COPE_B, COPE_H, COPE_N, COPE_D, dtype=torch.float64)
ck = torch.randn(COPE_B, COPE_H, COPE_N, COPE_D, dtype=torch.float64)
cope_emb = torch.randn(COPE_P, COPE_D, dtype=torch.float64)
cope_w = torch.randn(COPE_B, COPE_H, COPE_N, COPE_N, dtype=torch.float64)
for name, value in (("q", cq), ("emb", cope_emb), ("w", cope_w)):
    f[f"cope.{name}"] = value.float()
cq, cope_emb, cope_w = cq.float().double(), cope_emb.float().double(), cope_w.float().double()
raw = (cq @ ck.transpose(-1, -2) / math.sqrt(COPE_D)).float().double()
f["cope.logits"] = raw.float()
later = torch.ones(COPE_N, COPE_N).triu(1).bool()
causal_logits = raw.masked_fill(later, float(torch.finfo(torch.float32).min))


def cope_bidirectional(q, logits, emb):
    gates = torch.sigmoid(logits)
    pos = torch.zeros_like(logits)
    for i in range(COPE_N):
        for j in range(COPE_N):
            lo, hi = min(i, j), max(i, j)
            pos[..., i, j] = gates[..., i, lo:hi + 1].sum(-1)
    pos = pos.clamp(max=COPE_P - 1)
    at_integers = q @ emb.T
    floor, ceil = pos.floor().long(), pos.ceil().long()
    w = pos - floor
    return at_integers.gather(-1, ceil) * w + at_integers.gather(-1, floor) * (1 - w)


for direction in ("causal", "bidirectional"):
    q = cq.clone().requires_grad_(True)
    logits = (causal_logits if direction == "causal" else raw).clone().requires_grad_(True)
    if direction == "causal":
        cope = CoPE(dim=COPE_D, heads=COPE_H, max_pos=COPE_P).double()
        with torch.no_grad():
            cope.pos_emb.copy_(cope_emb)
        bias = cope(q, logits)
        emb_param = cope.pos_emb
    else:
        emb_param = cope_emb.clone().requires_grad_(True)
        bias = cope_bidirectional(q, logits, emb_param)
    (bias * cope_w).sum().backward()
    if direction == "bidirectional":  # finite differences agree with the autograd above
        assert torch.autograd.gradcheck(lambda q_, l_, e_: (cope_bidirectional(q_, l_, e_) * cope_w).sum(),
                                        (cq.clone().requires_grad_(True), raw.clone().requires_grad_(True),
                                         cope_emb.clone().requires_grad_(True)))
    else:
        assert torch.autograd.gradcheck(lambda q_, l_: (cope(q_, l_) * cope_w).sum(),
                                        (cq.clone().requires_grad_(True), causal_logits.clone().requires_grad_(True)))
    f[f"cope.{direction}.bias"] = bias.detach().float()
    f[f"cope.{direction}.grad_q"] = q.grad.float()
    f[f"cope.{direction}.grad_logits"] = logits.grad.float()
    f[f"cope.{direction}.grad_emb"] = emb_param.grad.float()

os.makedirs(os.path.dirname(OUT), exist_ok=True)
save_file({k: v.contiguous() for k, v in f.items()}, OUT, metadata={
    "torch": torch.__version__, "numpy": np.__version__,
    "transformers": __import__("transformers").__version__,
    "x-transformers": __import__("importlib.metadata").metadata.version("x-transformers"),
})
print(f"wrote {len(f)} tensors to {os.path.normpath(OUT)}")
