#!/usr/bin/env python3
"""PyTorch nn.Transformer and nn.MultiheadAttention outputs for the Transformer crate.

State dicts are saved with PyTorch's own parameter names; inputs and outputs go in a
second file. Run with grad enabled (no torch.no_grad) so PyTorch takes its reference
("slow") path rather than the nested-tensor fast path, which zeroes padded positions.

    .venv/bin/python scripts/make_transformer_fixtures.py

writes crates/transformer/tests/fixtures/*.safetensors.
"""
import os

import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "transformer", "tests", "fixtures")
os.makedirs(OUT, exist_ok=True)
D, H, FF, N, S, T = 16, 4, 32, 2, 7, 5


def save(name, module, io):
    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    save_file(state, os.path.join(OUT, f"{name}.safetensors"), metadata={"torch": torch.__version__})
    save_file({k: v.detach().contiguous() for k, v in io.items()}, os.path.join(OUT, f"{name}.io.safetensors"))


def transformer(name, norm_first, activation, seed):
    torch.manual_seed(seed)
    model = torch.nn.Transformer(
        d_model=D, nhead=H, num_encoder_layers=N, num_decoder_layers=N, dim_feedforward=FF,
        dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first,
    ).eval()
    # Perturb the norms so they are not the identity.
    for p in model.parameters():
        if p.dim() == 1:
            p.data.add_(0.1 * torch.randn_like(p))
    src = torch.randn(N, S, D)
    tgt = torch.randn(N, T, D)
    src_pad = torch.zeros(N, S, dtype=torch.bool)
    src_pad[1, 5:] = True  # second source has 2 padding positions
    tgt_pad = torch.zeros(N, T, dtype=torch.bool)
    tgt_pad[0, 4:] = True  # first target has 1 padding position
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T)
    memory = model.encoder(src, src_key_padding_mask=src_pad)
    out = model.decoder(tgt, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                        memory_key_padding_mask=src_pad, tgt_is_causal=False)
    full = model(src, tgt, tgt_mask=causal, src_key_padding_mask=src_pad,
                 tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
    assert torch.allclose(out, full)
    save(name, model, {
        "src": src, "tgt": tgt,
        "src_keep": (~src_pad).to(torch.uint8), "tgt_keep": (~tgt_pad).to(torch.uint8),
        "memory": memory, "out": out,
    })


transformer("nn_transformer_post_norm", False, "relu", 1)
transformer("nn_transformer_pre_norm", True, "gelu", 2)

# A lone nn.MultiheadAttention with distinct query, key and value, a key-padding mask and a
# boolean attention mask; per-head weights.
torch.manual_seed(3)
mha = torch.nn.MultiheadAttention(D, H, batch_first=True).eval()
for p in mha.parameters():
    if p.dim() == 1:
        p.data.add_(0.1 * torch.randn_like(p))
q, k, v = torch.randn(N, T, D), torch.randn(N, S, D), torch.randn(N, S, D)
pad = torch.zeros(N, S, dtype=torch.bool)
pad[0, 6:] = True
attn_mask = torch.rand(T, S) < 0.3  # True = not allowed
attn_mask[:, 0] = False
out, weights = mha(q, k, v, key_padding_mask=pad, attn_mask=attn_mask, average_attn_weights=False)
save("nn_multihead_attention", mha, {
    "query": q, "key": k, "value": v, "key_keep": (~pad).to(torch.uint8),
    "attn_keep": (~attn_mask).to(torch.uint8), "out": out, "weights": weights,
})
print("wrote fixtures to", os.path.normpath(OUT))
