#!/usr/bin/env python3
"""SmolLM2-135M-Instruct on a GPU: posenc against transformers, on the same GPU and GGUF.

Run by `scripts/gpu_check.sh generate` on the GPU machine (posenc built by
scripts/build_cuda.sh, run through scripts/run_cuda.sh). Needs the GGUF in .cache/smollm2
(scripts/fetch_smollm2.sh), PyTorch with CUDA, transformers and gguf.

- Greedy text: for four of the parity prompts of scripts/make_smollm2_fixtures.py, the 32
  greedy tokens of transformers (the GGUF dequantized to f32, on the GPU) against
  `posenc generate --device cuda` with `--f32` (should be the same text) and quantized
  (candle's CUDA kernels; may drift where the top two tokens are close), and against
  posenc's own CPU run.
- Speed: the 1 191-token prompt read, then 128 tokens generated one at a time, by both on
  the GPU. transformers is timed in this process with the GPU synchronized (after one
  untimed run). posenc is timed two ways: a whole `posenc generate` process's `--timing`
  line, of its second run (the first fills CUDA's JIT cache; f32 in its default prompt
  chunks of 512 tokens, and in one pass, `--prompt-chunk 2048`), where the first use of
  each kernel in the process is inside the time; and warm, `posenc bench generate
  --device cuda` (the prompt in one pass and 128 tokens after that many cached, after an
  untimed round, median of 3), which is what transformers' figure is.

`--speed-only` skips the greedy text (the twelve posenc processes of the first part) and
times only.

Prints one JSON line per result, then a table.
"""
import json
import os
import re
import subprocess
import sys
import time

import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
import make_smollm2_fixtures as fx  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GGUF = os.path.join(fx.DIR, fx.GGUF)
NAMES = ["english", "code", "chat", "long"]
GREEDY = 32
DECODE = 128


def posenc(text, tokens, *flags):
    """posenc's continuation of `text` (greedy) and its `--timing` line."""
    cmd = [os.path.join(ROOT, "scripts", "run_cuda.sh"), "posenc", "generate", "--model", GGUF,
           "--temperature", "0", "--max-tokens", str(tokens), "--timing", *flags, text]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"posenc failed ({' '.join(flags)}): {r.stderr[-2000:]}")
    # run_cuda.sh names the GPU first; posenc then echoes the prompt.
    start = r.stdout.find(text)
    assert start >= 0, "posenc echoes the prompt"
    timing = [line for line in r.stderr.splitlines() if line.startswith("loaded in")]
    return r.stdout[start + len(text):].removesuffix("\n"), timing[-1] if timing else ""


def bench(tokens, *flags):
    """(prompt tokens/s, generated tokens/s) of `posenc bench generate` on the GPU: a
    `tokens`-token prompt, and DECODE tokens after `tokens` cached."""
    cmd = [os.path.join(ROOT, "scripts", "run_cuda.sh"), "posenc", "bench", "generate",
           "--model", GGUF, "--device", "cuda", "--no-llama-cpp", "--rounds", "3",
           "--prompts", str(tokens), "--depths", str(tokens), "--decode", str(DECODE), *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"posenc bench failed ({' '.join(flags)}): {r.stderr[-2000:]}")
    print(r.stdout, flush=True)
    rate = lambda row: float(re.search(r"\| " + row + r" \| ([\d.]+) tokens/s", r.stdout).group(1))
    return (rate(f"prefill, {tokens}-token prompt"),
            rate(f"decode, {DECODE} tokens after {tokens} cached"))


def rates(timing):
    """(prompt tokens/s, generated tokens/s) from a `--timing` line."""
    prompt = re.search(r"\((\d+) tokens/s\)", timing)
    gen = re.search(r"more tokens in [\d.]+ s \(([\d.]+) tokens/s\)", timing)
    return (float(prompt.group(1)) if prompt else None, float(gen.group(1)) if gen else None)


def main():
    device = torch.device("cuda")
    tok, _ = fx.smollm_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(fx.DIR, gguf_file=fx.GGUF, dtype=torch.float32)
    model = model.to(device).eval()
    # posenc stops at the GGUF's end-of-sequence token (`<|im_end|>`); transformers'
    # converted tokenizer names another (`<|endoftext|>`).
    field = GGUFReader(GGUF).fields["tokenizer.ggml.eos_token_id"]
    eos = int(field.parts[field.data[0]][0])

    def theirs(ids, new):
        x = torch.tensor([ids], device=device)
        with torch.no_grad():
            out = model.generate(x, max_new_tokens=new, do_sample=False,
                                 attention_mask=torch.ones_like(x), pad_token_id=2,
                                 eos_token_id=None)
        return out[0, len(ids):].tolist()

    rows = []
    for name in [] if "--speed-only" in sys.argv[1:] else NAMES:
        text = fx.PROMPTS[name]
        ids = fx.encode(tok, text)
        greedy = theirs(ids, GREEDY)
        # posenc stops at the end-of-sequence token; transformers was told not to. (The run
        # in docs/gpu cut at the tokenizer's instead; scripts/gpu_results.py cuts its text.)
        if eos in greedy:
            greedy = greedy[: greedy.index(eos)]
        reference = tok.decode(greedy, clean_up_tokenization_spaces=False)
        result = {"prompt": name, "tokens": len(ids), "transformers_cuda": reference}
        for label, flags in [("posenc_cuda_f32", ["--f32", "--device", "cuda"]),
                             ("posenc_cuda_quantized", ["--device", "cuda"]),
                             ("posenc_cpu_f32", ["--f32"])]:
            text_out, _ = posenc(text, GREEDY, *flags)
            result[label] = text_out
            result[label + "_same"] = text_out == reference
        print(json.dumps(result, ensure_ascii=False), flush=True)
        rows.append(result)

    # Speed on the long prompt.
    text = fx.PROMPTS["long"]
    ids = fx.encode(tok, text)
    theirs(ids, 2)

    def timed(new):
        torch.cuda.synchronize()
        t = time.perf_counter()
        theirs(ids, new)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    first = min(timed(1) for _ in range(3))
    whole = min(timed(DECODE + 1) for _ in range(2))
    speed = {"prompt_tokens": len(ids), "decode_tokens": DECODE,
             "transformers": {"prompt_tok_s": len(ids) / first,
                              "decode_tok_s": DECODE / (whole - first)},
             "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    # The prompt in one pass as well as in posenc's default chunks of 512 tokens.
    for label, flags in [("posenc_f32", ["--f32", "--device", "cuda"]),
                         ("posenc_f32_one_pass", ["--f32", "--device", "cuda",
                                                  "--prompt-chunk", "2048"]),
                         ("posenc_quantized", ["--device", "cuda"])]:
        posenc(text, DECODE + 1, *flags)
        _, line = posenc(text, DECODE + 1, *flags)
        p, g = rates(line)
        speed[label] = {"prompt_tok_s": p, "decode_tok_s": g, "timing": line}
    for label, flags in [("posenc_f32_warm", ["--f32"]), ("posenc_quantized_warm", [])]:
        p, g = bench(len(ids), *flags)
        speed[label] = {"prompt_tok_s": p, "decode_tok_s": g, "timing": "bench generate"}
    print(json.dumps(speed), flush=True)

    print("\n| prompt | tokens | CUDA f32 = transformers | CUDA quantized = transformers | CPU f32 = transformers |")
    print("|---|---:|---|---|---|")
    for r in rows:
        print(f"| {r['prompt']} | {r['tokens']} | {r['posenc_cuda_f32_same']} | "
              f"{r['posenc_cuda_quantized_same']} | {r['posenc_cpu_f32_same']} |")
    print(f"\n{speed['gpu']}, torch {speed['torch']}: prompt of {len(ids)} tokens, then {DECODE}")
    print("| implementation | prompt tokens/s | generated tokens/s |\n|---|---:|---:|")
    for label in [k for k in speed if isinstance(speed[k], dict)]:
        s = speed[label]
        fmt = lambda v: "—" if v is None else f"{v:.0f}"
        print(f"| {label} | {fmt(s['prompt_tok_s'])} | {fmt(s['decode_tok_s'])} |")


if __name__ == "__main__":
    main()
