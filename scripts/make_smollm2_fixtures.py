#!/usr/bin/env python3
"""Reference outputs of SmolLM2-135M-Instruct (Q4_1 GGUF) from Hugging Face transformers.

Needs the GGUF in .cache/smollm2 (scripts/fetch_smollm2.sh) and the packages of
scripts/requirements.txt (transformers dequantizes the GGUF to f32 and undoes llama.cpp's
Q/K row permutation). Writes crates/llama/tests/fixtures/smollm2.json (prompts, one of
over 4 000 tokens, token ids, 32 greedy tokens each) and smollm2.safetensors (last-position logits of each prompt).

Tokenizer ids are recorded twice. transformers' GGUF converter builds a plain byte-level
BPE for every `gpt2`-model GGUF; the file says `tokenizer.ggml.pre = smollm`, which in
llama.cpp (and in SmolLM2's own tokenizer.json) also splits every digit on its own
(`Digits(individual_digits=True)` before `ByteLevel`). `ids` is the converted tokenizer with
that pre-tokenizer, the one the model was trained with; `ids_transformers_gguf` is the
converter's output as it is. The model's logits and greedy tokens are computed on `ids`.

With `--converted DIR` (a directory written by `posenc convert`), it instead loads DIR
with `from_pretrained` (model and tokenizer) and prints, for every prompt, whether its
token ids are the same and the largest difference of its last-position logits from the
GGUF's.
"""
import argparse
import json
import os
import textwrap

import torch
from safetensors.torch import save_file
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.join(os.path.dirname(__file__), "..")
DIR = os.path.join(ROOT, ".cache", "smollm2")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "crates", "llama", "tests", "fixtures")

CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)

PROMPTS = {
    "english": "The positional encoding tells attention where each word is. In 2017, Vaswani et al.",
    "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n",
    "non_ascii": "Größe, café, naïve — 犬が猫を追いかけた。Кошка спит 🐈 und 42 ✓",
    "chat": CHAT,
    # Over 1 000 tokens: a fixed piece of the standard library's own documentation.
    "long": (textwrap.__doc__ or "") + "\n" + textwrap.fill(
        " ".join(textwrap.TextWrapper.__doc__.split()) * 2, width=88
    ) + "\n" + textwrap.dedent.__doc__ * 2,
}

# Over 4 000 tokens: the prompt `posenc lm passkey` builds (crates/lm/src/passkey.rs),
# a five-digit key half-way through repeated filler. Past the 512-token chunks the prompt
# is read in, and long enough that attention must be tiled to fit in memory.
PASSKEY_INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. "
    "Find it and memorize it. I will quiz you about the important information there."
)
PASSKEY_FILLER = (
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
)
PROMPTS["passkey"] = (
    PASSKEY_INTRO
    + PASSKEY_FILLER * 92
    + " The pass key is 68123. Remember it. 68123 is the pass key."
    + PASSKEY_FILLER * 92
    + " What is the pass key? The pass key is"
)

GREEDY = 32


def smollm_tokenizer():
    """The converted tokenizer with SmolLM2's pre-tokenizer (digits split one by one)."""
    tok = AutoTokenizer.from_pretrained(DIR, gguf_file=GGUF)
    plain = AutoTokenizer.from_pretrained(DIR, gguf_file=GGUF)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    return tok, plain


def encode(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--converted", help="a directory written by `posenc convert`")
    args = parser.parse_args()

    torch.manual_seed(0)
    tok, plain = smollm_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file=GGUF, dtype=torch.float32)
    model.eval()
    other = other_tok = None
    if args.converted:
        other = AutoModelForCausalLM.from_pretrained(args.converted, dtype=torch.float32)
        other.eval()
        other_tok = AutoTokenizer.from_pretrained(args.converted)

    records, logits = [], {}
    worst = 0.0
    for name, text in PROMPTS.items():
        ids = encode(tok, text)
        x = torch.tensor([ids])
        with torch.no_grad():
            last = model(x).logits[0, -1].float()
            if other is not None:
                diff = (other(x).logits[0, -1].float() - last).abs().max().item()
                worst = max(worst, diff)
                same = encode(other_tok, text) == ids
                print(f"{name}: {len(ids)} tokens, same ids: {same}, largest logit difference {diff:.3g}")
                continue
            out = model.generate(
                x,
                max_new_tokens=GREEDY,
                do_sample=False,
                attention_mask=torch.ones_like(x),
                pad_token_id=2,
                eos_token_id=None,
            )
        logits[name] = last.contiguous()
        records.append(
            {
                "name": name,
                "text": text,
                "ids": ids,
                "ids_transformers_gguf": encode(plain, text),
                "greedy": out[0, len(ids):].tolist(),
                "decoded": tok.decode(ids),
            }
        )
        print(name, len(ids), "tokens")
    if other is not None:
        print(f"worst: {worst:.3g}")
        return
    os.makedirs(OUT, exist_ok=True)
    meta = {
        "source": "transformers " + __import__("transformers").__version__
        + ", torch " + torch.__version__ + ", " + GGUF,
        "prompts": records,
    }
    with open(os.path.join(OUT, "smollm2.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    save_file(logits, os.path.join(OUT, "smollm2.safetensors"))


if __name__ == "__main__":
    main()
