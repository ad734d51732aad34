"""Greedy text of a quantized GGUF model: posenc's against llama.cpp's (llama-cpp-python).

For each prompt, both continue greedily for --tokens tokens on the same file, and so does
posenc's exact f32 path (the weights dequantized, which matches transformers): where the
two quantized texts part, the f32 text says which of them kept to the unquantized model.
Texts are compared token by token, all tokenized by llama.cpp's tokenizer: how many tokens
agree before the first difference. Writes tidy records (one per prompt) as JSON, and prints
a summary table. Run through scripts/compare_llama_cpp.sh, which installs what it needs.

    python scripts/compare_llama_cpp.py --posenc target/release/posenc \
        --model .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out docs/generate/greedy.json
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

PROMPTS = [
    "The history of the Roman Empire is",
    "To make a cup of tea, first",
    "def fibonacci(n):",
    "The three primary colours are",
    "Once upon a time, in a small village by the sea,",
    "Photosynthesis is the process by which",
    "The capital of France is",
    "In mathematics, a prime number is",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--posenc", required=True, help="the posenc binary")
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True, help="the JSON records to write")
    args = ap.parse_args()

    from llama_cpp import Llama, __version__

    llm = Llama(model_path=args.model, n_threads=args.threads, n_ctx=512, verbose=False)
    records = []
    for prompt in PROMPTS:
        theirs = llm(prompt, max_tokens=args.tokens, temperature=0.0, top_k=1)["choices"][0]["text"]
        def posenc(*flags):
            out = subprocess.run(
                [args.posenc, "generate", "--model", args.model, "--top-k", "1",
                 "--max-tokens", str(args.tokens), *flags, prompt],
                check=True, capture_output=True, text=True,
            ).stdout
            # posenc echoes the prompt and ends with a newline.
            out = out[len(prompt):] if out.startswith(prompt) else out
            return out[:-1] if out.endswith("\n") else out

        ours, exact = posenc(), posenc("--f32")
        start = len(llm.tokenize(prompt.encode(), add_bos=False))

        def agree(a, b):
            a = llm.tokenize((prompt + a).encode(), add_bos=False)[start:]
            b = llm.tokenize((prompt + b).encode(), add_bos=False)[start:]
            n = 0
            for x, y in zip(a, b):
                if x != y:
                    break
                n += 1
            return min(n, args.tokens)

        records.append({
            "prompt": prompt,
            "tokens": args.tokens,
            "posenc_vs_llama_cpp": agree(ours, theirs),
            "posenc_vs_f32": agree(ours, exact),
            "llama_cpp_vs_f32": agree(theirs, exact),
            "identical": ours == theirs,
            "posenc": ours,
            "llama_cpp": theirs,
            "posenc_f32": exact,
            "llama_cpp_python": __version__,
        })
    tmp = tempfile.NamedTemporaryFile("w", dir=os.path.dirname(os.path.abspath(args.out)),
                                      delete=False, suffix=".tmp")
    with tmp:
        json.dump({"model": os.path.basename(args.model), "records": records}, tmp, indent=1,
                  ensure_ascii=False)
    os.replace(tmp.name, args.out)
    print("tokens agreeing before the first difference, of", args.tokens)
    print("| prompt | posenc and llama.cpp | posenc and f32 | llama.cpp and f32 |")
    print("|---|---:|---:|---:|")
    keys = ["posenc_vs_llama_cpp", "posenc_vs_f32", "llama_cpp_vs_f32"]
    for r in records:
        print(f"| {r['prompt']} | " + " | ".join(str(r[k]) for k in keys) + " |")
    print("| all | " + " | ".join(str(sum(r[k] for r in records)) for k in keys) + " |")
    print(f"\n{sum(r['identical'] for r in records)} of {len(records)} quantized "
          f"continuations identical ({args.tokens * len(records)} tokens in all)")

if __name__ == "__main__":
    sys.exit(main())
