"""PyTorch's side of `posenc bench train`: the same training step, timed the same way.

Builds the benchmark's reference model with `torch.nn.Transformer` (post-norm, ReLU,
final norms, no dropout), token embeddings scaled by sqrt(d_model) plus the sinusoidal
encoding, a linear generator, `cross_entropy` with label smoothing 0.1 ignoring padding
(id 0), and AdamW, as a PyTorch user writes them. Inputs are the deterministic ids of
posenc's benchmark (`4 + (i*7919 + salt) % (vocab - 4)`), so both sides do identical work.

It serves steps, so that `posenc bench train` can alternate them with its own (machine
noise then hits both sides alike): once built it prints one JSON line (`torch`,
`threads`, `device`), then for each line read from standard input it takes one training step and
prints one JSON line of its milliseconds per phase. It ends at the end of its input. With `--device cuda[:N]` it runs on that GPU, and each
phase ends when the GPU has finished it (`torch.cuda.synchronize`), as posenc's do.

    echo | python scripts/bench_train_torch.py --d-model 256 --heads 8 --layers 3 \
        --d-ff 1024 --vocab 1000 --batch 64 --len 24 --threads 2
"""

import argparse
import json
import math
import sys
import time

import torch
from torch import nn


def ids(batch, length, vocab, salt):
    v = [4 + (i * 7919 + salt) % (vocab - 4) for i in range(batch * length)]
    return torch.tensor(v, dtype=torch.long).view(batch, length)


def sinusoidal(length, d):
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    inv = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(length, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)
    return pe.float()


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.d = a.d_model
        self.src = nn.Embedding(a.vocab, a.d_model)
        self.tgt = nn.Embedding(a.vocab, a.d_model)
        self.register_buffer("pe", sinusoidal(512, a.d_model))
        self.core = nn.Transformer(
            d_model=a.d_model, nhead=a.heads, num_encoder_layers=a.layers,
            num_decoder_layers=a.layers, dim_feedforward=a.d_ff, dropout=0.0,
            batch_first=True)
        self.generator = nn.Linear(a.d_model, a.vocab)

    def embed(self, lut, x):
        return lut(x) * math.sqrt(self.d) + self.pe[: x.shape[1]]

    def forward(self, src, tgt_in, causal, src_pad, tgt_pad):
        y = self.core(self.embed(self.src, src), self.embed(self.tgt, tgt_in),
                      tgt_mask=causal, src_key_padding_mask=src_pad,
                      tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
                      tgt_is_causal=True)
        return self.generator(y)


def main():
    p = argparse.ArgumentParser()
    for name, default in [("d-model", 256), ("heads", 8), ("layers", 3), ("d-ff", 1024),
                          ("vocab", 1000), ("batch", 64), ("len", 24), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    device = torch.device(a.device)
    model = Model(a).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                            weight_decay=0.0)
    src, tgt_in, tgt_out = (ids(a.batch, a.len, a.vocab, s).to(device) for s in (1, 2, 3))
    causal = torch.triu(torch.ones(a.len, a.len, dtype=torch.bool), diagonal=1).to(device)
    src_pad, tgt_pad = src == 0, tgt_in == 0

    def done():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "device": str(device)}), flush=True)
    for _ in sys.stdin:
        t0 = done()
        logits = model(src, tgt_in, causal, src_pad, tgt_pad)
        loss = nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tgt_out.reshape(-1),
                                           ignore_index=0, label_smoothing=0.1)
        t1 = done()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = done()
        opt.step()
        t3 = done()
        ms = lambda x, y: (y - x) * 1e3
        print(json.dumps({"forward_ms": ms(t0, t1), "backward_ms": ms(t1, t2),
                          "optimizer_ms": ms(t2, t3), "total_ms": ms(t0, t3)}), flush=True)


if __name__ == "__main__":
    main()
