#!/usr/bin/env python3
"""What transformers samples from, for given scores, tokens read and settings.

transformers' own `GenerationMixin._get_logits_processor` builds the processors from a
`GenerationConfig` (repetition penalty, then temperature, top-k, top-p and min-p: its order,
not ours), on a throwaway Llama, and they are applied to each case's scores with the case's
tokens as `input_ids`. The distribution is the softmax of what they leave (0 where they cut
a token); with `do_sample=False` only the penalty runs and the pick is the argmax. Nothing
here comes from posenc. crates/lm/tests/sample.rs compares `Sampler::distribution` and its
greedy pick against them.

    .venv/bin/python scripts/make_sampling_fixtures.py     # torch==2.9.1, transformers==4.57.1

writes crates/lm/tests/fixtures/sampling.json.
"""
import json
import os

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.logits_process import LogitsProcessorList

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "lm", "tests", "fixtures",
                   "sampling.json")
VOCAB = 12

# (settings, the tokens read): posenc's names; transformers' beside them below.
CASES = [
    ({"temperature": 1.0, "repeat_penalty": 1.3}, [1, 3, 3, 7]),
    ({"temperature": 0.7, "min_p": 0.1}, []),
    ({"temperature": 1.3, "top_k": 6, "top_p": 0.9, "min_p": 0.3, "repeat_penalty": 1.2},
     [0, 2, 5, 2]),
    ({"temperature": 0.8, "top_p": 0.8, "repeat_penalty": 0.7}, [4, 9]),
    ({"temperature": 1.0, "min_p": 1.0}, [6]),
    ({"temperature": 0.0, "repeat_penalty": 5.0}, None),  # greedy; the tokens: the argmax
]


def processors(model, settings):
    greedy = settings["temperature"] == 0.0
    config = GenerationConfig(
        do_sample=not greedy,
        temperature=None if greedy else settings["temperature"],
        top_k=settings.get("top_k", 0) if not greedy else None,
        top_p=settings.get("top_p", 1.0) if not greedy else None,
        min_p=settings.get("min_p"),
        repetition_penalty=settings.get("repeat_penalty", 1.0),
    )
    return model._get_logits_processor(
        generation_config=config, input_ids_seq_length=1, encoder_input_ids=None,
        prefix_allowed_tokens_fn=None, logits_processor=LogitsProcessorList())


def main():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=8, intermediate_size=16,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=2))
    cases = []
    for settings, read in CASES:
        scores = torch.randn(1, VOCAB).float()
        if read is None:
            # Greedy: the penalty on the two best tokens, so that it moves the argmax.
            read = scores[0].topk(2).indices.tolist()
        chain = processors(model, settings)
        names = [type(p).__name__ for p in chain]
        out = chain(torch.tensor([read], dtype=torch.long).view(1, len(read)), scores.clone())
        probs = torch.softmax(out.double(), dim=-1)[0]
        cases.append({
            "settings": settings,
            "read": read,
            "scores": scores[0].tolist(),
            "processors": names,
            "probabilities": probs.tolist(),
            "greedy_pick": int(out[0].argmax()),
        })
    with open(OUT, "w") as f:
        json.dump({"transformers": __import__("transformers").__version__,
                   "torch": torch.__version__, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
