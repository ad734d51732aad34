#!/usr/bin/env python3
"""The tables of the quantized key/value cache's study, from its records alone
(scripts/kv_cache_study.sh): posenc's `lm eval` and `lm passkey` JSON with their
/usr/bin/time logs, llama.cpp's llama-perplexity logs and the `bench generate` reports.
Writes results.json (tidy records, one per measurement) and prints results.md. Standard
library only.

    python3 scripts/kv_cache_table.py docs/long-context/kv-cache > docs/long-context/kv-cache/results.md
"""
import json
import math
import re
import statistics
import sys
from pathlib import Path

TYPES = ["f16", "q8_0", "q4_0", "q8_0-hadamard", "q4_0-hadamard"]


def records(study, prefix, suffix):
    """(cache type, path) of every `PREFIX-TYPE-….SUFFIX` beside the page, in TYPES' order:
    the longest type the name names (`q4_0-hadamard` before `q4_0`)."""
    out = []
    for path in study.glob(f"{prefix}-*{suffix}"):
        rest = path.name[len(prefix) + 1:-len(suffix)]
        named = [t for t in TYPES if rest == t or rest.startswith(t + "-")]
        if named:
            out.append((max(named, key=len), path))
    return sorted(out, key=lambda tp: (TYPES.index(tp[0]), tp[1].name))


def timing(path):
    t = json.loads(path.read_text()) if path.exists() else {}
    return t.get("wall_s"), (t["peak_rss_kb"] / 1024 if "peak_rss_kb" in t else None)


def perplexities(study):
    out = []
    for t, path in records(study, "ppl", ".json"):
        wall, peak = timing(path.with_suffix(".time"))
        for r in json.loads(path.read_text()):
            windows = [math.exp(x) for x in r["window_losses"]]
            # The tokens llama-perplexity scores: each window's second half.
            half = r["by_position"][r["len"] // 2:]
            out.append({"table": "perplexity", "tool": "posenc", "kv_cache": t,
                        "length": r["len"], "rope_scaling": r["rope_scaling"],
                        "windows": len(windows), "perplexity": r["perplexity"],
                        "window_perplexities": windows,
                        "second_half_perplexity": math.exp(sum(half) / len(half)),
                        "wall_s": wall, "peak_mb": peak})
    for t, path in records(study, "llama-ppl", ".log"):
        log = path.read_text()
        m = re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", log)
        chunks = re.search(r"calculating perplexity over (\d+) chunks", log)
        if m:
            # llama.cpp turns a quantized cache's rows by its Hadamard matrix, our
            # `-hadamard` types; `-norot`: run with LLAMA_ATTN_ROT_DISABLE, the blocks as
            # they are, our plain types.
            rotated = t != "f16" and not path.stem.endswith("-norot")
            length = int(re.search(r"-(\d+)(-norot)?$", path.stem).group(1))
            out.append({"table": "perplexity", "tool": "llama.cpp",
                        "kv_cache": t + ("-hadamard" if rotated else ""),
                        "hadamard_rotation": rotated,
                        "length": length, "rope_scaling": None,
                        "windows": int(chunks.group(1)) if chunks else None,
                        "perplexity": float(m.group(1)), "stderr": float(m.group(2)),
                        "second_half_perplexity": float(m.group(1))})
    return out


def with_changes(ppl):
    """Each perplexity record with its change against the same tool's f16 record at its
    length, in percent: `perplexity_change_pct` and `second_half_change_pct`."""
    base = {(r["tool"], r["length"]): r for r in ppl if r["kv_cache"] == "f16"}
    for r in ppl:
        f16 = base.get((r["tool"], r["length"]))
        for key in ("perplexity", "second_half_perplexity"):
            change = None if f16 is None else 100 * (r[key] / f16[key] - 1)
            r[key.replace("_perplexity", "") + "_change_pct"] = change
    return ppl


def passkeys(study):
    out = []
    for t, path in records(study, "passkey", ".json"):
        for r in json.loads(path.read_text()):
            out.append({"table": "passkey", "tool": "posenc", "kv_cache": t,
                        "length": r["length"], "depth": r["depth"], "seed": r["seed"],
                        "key": r["key"], "answer": r["answer"].strip(),
                        "correct": r["correct"], "seconds": r["seconds"],
                        "peak_mb": r.get("peak_rss_mb")})
    return out


def speeds(study):
    out = []
    for t, path in records(study, "speed", ".md"):
        text = path.read_text()
        # `bench generate` turns llama.cpp's cache as ours, and says so where it does not.
        turned = t != "f16" and "LLAMA_ATTN_ROT_DISABLE=1" not in text
        rounds = re.search(r"(\d+) alternating rounds", text)
        against = "llama.cpp as run" in text  # its settings, where llama-bench ran
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) != 5 or not re.match(r"(prefill|decode|time|peak)", cells[0]):
                continue
            out.append({"table": "speed", "kv_cache": t, "against_llama_cpp": against,
                        "llama_cpp_turned": turned,
                        "measure": cells[0],
                        "rounds": int(rounds.group(1)) if rounds else None,
                        "posenc": number(cells[1]), "llama_cpp": number(cells[2]),
                        "unit": cells[1].split()[-1] if cells[1] else None,
                        "speed_ratio": number(cells[3]),
                        "ratio_of_medians": number(cells[4])})
    return out


def number(cell):
    """The figure a table cell starts with (`113.7 tokens/s`, `1.26×`), or None."""
    return float(cell.split()[0].rstrip("×")) if cell not in ("", "–") else None


def fmt(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def main():
    study = Path(sys.argv[1])
    ppl, keys, speed = with_changes(perplexities(study)), passkeys(study), speeds(study)
    (study / "results.json").write_text(json.dumps(ppl + keys + speed, indent=1) + "\n")
    print("# A quantized key/value cache: SmolLM2-135M with its cache in f16, q8_0 and q4_0, "
          "turned or not\n")
    print("Rendered by `python3 scripts/kv_cache_table.py` from the records beside this page "
          "(`scripts/kv_cache_study.sh`).\n")
    print("## Perplexity and memory\n")
    print("posenc: `lm eval` over the test plays: three windows of 4 096 tokens spread over "
          "the file (starting at tokens 0, 36 864 and 73 728; mean ± sd over the windows of "
          "each window's perplexity), and one window of 32 768 from its start with YaRN ×4. "
          "llama.cpp: `llama-perplexity -c 4096 --chunks 6` on the same file, its first six "
          "windows, each scored on its second half only, ± its own standard error. The "
          "second-half column scores posenc's windows as llama.cpp scores its own (the "
          "windows still differ but for the first); compare the changes, not the levels. "
          "`-hadamard`: each key and value turned by a Walsh–Hadamard matrix before it is "
          "rounded (and the output turned back), as llama.cpp keeps a quantized cache unless "
          "`LLAMA_ATTN_ROT_DISABLE=1` is set; its runs with that set are its plain `q8_0` and "
          "`q4_0`. Peak memory is the process's; wall times are "
          "not speeds (other runs shared the cores for some): the speed table is.\n")
    print("| tool | length | cache | perplexity | change against f16 | second half | its change | peak MB (process) | wall s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    order = lambda r: (r["tool"] != "posenc", r["length"], TYPES.index(r["kv_cache"]), r["tool"])
    for r in sorted(ppl, key=order):
        w = r.get("window_perplexities") or []
        value = (f"{statistics.mean(w):.3f} ± {statistics.stdev(w):.3f}" if len(w) > 1
                 else f"{r['perplexity']:.3f}" + (f" ± {r['stderr']:.3f}" if r.get("stderr") else ""))
        change = lambda k: "–" if r[k] is None else f"{r[k]:+.2f}%"
        scaling = " (YaRN ×4)" if r.get("rope_scaling") else ""
        print(f"| {r['tool']} | {r['length']}{scaling} | {r['kv_cache']} | {value} | "
              f"{change('perplexity_change_pct')} | {r['second_half_perplexity']:.3f} | "
              f"{change('second_half_change_pct')} | "
              f"{fmt(r.get('peak_mb'), 0)} | {fmt(r.get('wall_s'), 0)} |")
    if keys:
        print("\n## Passkey retrieval\n")
        print("| cache | length | found / keys | by seed |")
        print("|---|---:|---:|---|")
        for t in TYPES:
            rs = [r for r in keys if r["kv_cache"] == t]
            if not rs:
                continue
            seeds = sorted({r["seed"] for r in rs})
            by_seed = ", ".join(f"{sum(r['correct'] for r in rs if r['seed'] == s)}/"
                                f"{sum(1 for r in rs if r['seed'] == s)}" for s in seeds)
            print(f"| {t} | {rs[0]['length']} | {sum(r['correct'] for r in rs)}/{len(rs)} | {by_seed} |")
    if speed:
        print("\n## Speed against llama.cpp with the same cache type\n")
        print("`posenc bench generate --kv-cache T` against `llama-bench -ctk T -ctv T -fa on` "
              "(its quantized cache turned by its Hadamard matrix, or not, as the last column "
              "says: `bench generate` now sets `LLAMA_ATTN_ROT_DISABLE=1` against plain blocks; "
              "the plain types' rows here were run before it did), alternating rounds "
              "with nothing else on the cores; speed > 1: posenc is faster (the median of the "
              "rounds' ratios, the figure to quote, beside the ratio of the two medians). The "
              "reports are beside this page (`speed-*.md`), with llama-bench's settings.\n")
        print("| cache | measure | rounds | posenc | llama.cpp | speed, median of the rounds' ratios "
              "| speed, ratio of the medians | llama.cpp's rows turned |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        for r in speed:
            unit = r["unit"] or ""
            digits = {"s": 2, "MB": 0}.get(unit, 1)
            print(f"| {r['kv_cache']} | {r['measure']} | {r['rounds']} | {fmt(r['posenc'], digits)} {unit} | "
                  f"{fmt(r['llama_cpp'], digits)} {unit if r['llama_cpp'] is not None else ''} | "
                  f"{fmt(r['speed_ratio'])}{'×' if r['speed_ratio'] else ''} | "
                  f"{fmt(r['ratio_of_medians'])}{'×' if r['ratio_of_medians'] else ''} | "
                  f"{'–' if r['llama_cpp'] is None else ('yes' if r['llama_cpp_turned'] else 'no')} |")


if __name__ == "__main__":
    main()
