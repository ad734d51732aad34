"""PyTorch's side of `posenc bench embed`: the same sentence embeddings, timed the same way.

Loads the sentence-transformers model directory with transformers (`AutoTokenizer`,
`BertModel`), embeds the sentences of the JSON file in batches (tokenized within the timed
pass, as posenc's are; padding to each batch's
longest, truncation at 256 word pieces, mean pooling over real tokens, L2 normalisation,
as sentence-transformers does) under `torch.inference_mode`.

It serves passes, so that `posenc bench embed` can alternate them with its own (machine
noise then hits both sides alike): after one untimed pass it prints one JSON line (the
embeddings' checksum, so the caller can see both sides computed the same thing, `torch`,
`threads`, `device`), then for each line read from standard input it makes one pass over all
sentences and prints its milliseconds (`ms`). It ends at the end of its input. With `--device cuda[:N]` it runs on that GPU; a pass
ends with its embeddings on the host, as posenc's does.
With `--dump FILE` it also writes the untimed pass's embeddings there (a JSON list of
lists), for the caller to compare with its own.

    echo | python scripts/bench_embed_torch.py --model .cache/all-MiniLM-L6-v2 \
        --sentences sentences.json --batch 32 --threads 2
"""

import argparse
import json
import sys
import time

import torch
from transformers import AutoTokenizer, BertModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--sentences", required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dump")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    with open(a.sentences, encoding="utf-8") as f:
        sentences = json.load(f)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = BertModel.from_pretrained(a.model).eval().to(device)

    def run():
        # Tokenizing is part of each pass, as it is of `posenc bench embed`'s.
        out = []
        with torch.inference_mode():
            for i in range(0, len(sentences), a.batch):
                b = tok(sentences[i : i + a.batch], padding=True, truncation=True,
                        max_length=256, return_tensors="pt").to(device)
                h = model(**b).last_hidden_state
                m = b["attention_mask"].unsqueeze(-1).float()
                mean = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(mean, p=2, dim=1))
        # On the host, as posenc's embeddings are at the end of a pass.
        return torch.cat(out).cpu()

    first = run()
    if a.dump:
        with open(a.dump, "w", encoding="utf-8") as f:
            json.dump(first.tolist(), f)
    print(json.dumps({
        "checksum": float(first.abs().sum()),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": str(device),
    }), flush=True)
    for _ in sys.stdin:
        t = time.perf_counter()
        run()
        print(json.dumps({"ms": (time.perf_counter() - t) * 1e3}), flush=True)

if __name__ == "__main__":
    main()
