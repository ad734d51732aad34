#!/usr/bin/env python3
"""Reference outputs of all-MiniLM-L6-v2 from sentence-transformers and transformers.

Needs the model in .cache/all-MiniLM-L6-v2 (scripts/fetch_minilm.sh). Writes
crates/embed/tests/fixtures/minilm.json (sentences, token ids) and minilm.safetensors
(normalised embeddings; last hidden states of the first sentences, unpadded).
"""
import json
import os

import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer, BertModel

ROOT = os.path.join(os.path.dirname(__file__), "..")
MODEL = os.path.join(ROOT, ".cache", "all-MiniLM-L6-v2")
OUT = os.path.join(ROOT, "crates", "embed", "tests", "fixtures")

SENTENCES = [
    "The dog chases the cat.",
    "The cat chases the dog.",
    "A man is playing a guitar on the street.",
    "",
    "犬が猫を追いかけた",
    "고양이가 개를 쫓았다",
    "Positional encodings 🚀 tell attention where words are 🐕🐈",
    "spaces    between\twords  and\n\nnew lines   ",
    "Transformers use sinusoidal positional encodings; RoPE rotates queries and keys instead.",
    " ".join(["position"] * 300),  # 300 words: truncated at 256 tokens
    "UPPER case and lower CASE, punctuation!? (brackets) [more] {braces} — dashes… and numbers 3.14159",
]

model = SentenceTransformer(MODEL, device="cpu")
assert model.max_seq_length == 256
with torch.no_grad():
    emb = model.encode(SENTENCES, batch_size=4, convert_to_tensor=True, normalize_embeddings=True)
features = model.tokenize(SENTENCES)
ids = [row[mask.bool()].tolist() for row, mask in zip(features["input_ids"], features["attention_mask"])]

bert = BertModel.from_pretrained(MODEL, add_pooling_layer=False).eval()
tok = AutoTokenizer.from_pretrained(MODEL)
tensors = {"embeddings": emb.float().contiguous()}
with torch.no_grad():
    for i in range(4):
        enc = tok(SENTENCES[i], return_tensors="pt", truncation=True, max_length=256)
        tensors[f"hidden.{i}"] = bert(**enc).last_hidden_state[0].contiguous()

os.makedirs(OUT, exist_ok=True)
save_file(tensors, os.path.join(OUT, "minilm.safetensors"))
with open(os.path.join(OUT, "minilm.json"), "w") as f:
    json.dump({"sentences": SENTENCES, "token_ids": ids,
               "versions": {"torch": torch.__version__, "sentence_transformers": __import__("sentence_transformers").__version__}},
              f, ensure_ascii=False, indent=1)
print("token counts", [len(i) for i in ids])
