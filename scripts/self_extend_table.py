#!/usr/bin/env python3
"""The tables of the self-extend passkey study, from its records alone: posenc's
`lm passkey --format json` rows (`posenc-*.json`) and llama.cpp's (`llama-cpp-*.json`, by
scripts/llama_cpp_passkey.py), each beside its /usr/bin/time log (`*.time`). Writes
results.json (tidy records, one per trial, with the peak memory of the run it was in) and
prints results.md. Standard library only.

    python3 scripts/self_extend_table.py docs/long-context/self-extend > docs/long-context/self-extend/results.md
"""
import json
import os
import re
import sys
from pathlib import Path


def peak_mb(path):
    """The peak resident memory /usr/bin/time -v logged, in MB, or None."""
    if not path.exists():
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", path.read_text())
    return int(m.group(1)) / 1024 if m else None


def rows(study):
    out = []
    for path in sorted(study.glob("*.json")):
        if path.name == "results.json":
            continue
        tool = "llama.cpp" if path.name.startswith("llama-cpp") else "posenc"
        peak = peak_mb(path.with_suffix(".time"))
        for r in json.loads(path.read_text()):
            se = r.get("self_extend") or {"group": r.get("group"), "window": r.get("window")}
            out.append({"tool": tool, "length": r["length"], "tokens": r["tokens"],
                        "group": se["group"], "window": se["window"], "depth": r["depth"],
                        "key": r["key"], "answer": r["answer"].strip(), "correct": r["correct"],
                        "seconds": r["seconds"], "peak": peak})
    return out


def main():
    study = Path(sys.argv[1])
    records = rows(study)
    tidy = [{**{k: v for k, v in r.items() if k != "peak"}, "peak_rss_mb": r["peak"]}
            for r in records]
    part = study / "results.json.part"
    part.write_text(json.dumps(tidy, indent=1) + "\n")
    os.replace(part, study / "results.json")
    print("# Self-extend: passkey retrieval past SmolLM2's 8 192 tokens\n")
    print("Rendered by `python3 scripts/self_extend_table.py` from the records beside this page.\n")
    print("## Keys found\n")
    print("| tool | length | reading | found / trials | peak MB (run) |")
    print("|---|---:|---|---:|---:|")
    cells = {}
    for r in records:
        cells.setdefault((r["tool"], r["length"], r["group"], r["window"]), []).append(r)
    for (tool, length, group, window), rs in sorted(cells.items()):
        found = sum(r["correct"] for r in rs)
        peaks = [r["peak"] for r in rs if r["peak"] is not None]
        peak = max(peaks) if peaks else None
        reading = "no grouping" if group == 1 else f"self-extend, group {group}, window {window}"
        print(f"| {tool} | {length} | {reading} | {found}/{len(rs)} | "
              f"{'–' if peak is None else f'{peak:.0f}'} |")
    print("\n## Each trial\n")
    print("| tool | group | length | prompt tokens | depth | key | answer | found | seconds |")
    print("|---|---:|---:|---:|---:|---:|---|---|---:|")
    for r in sorted(records, key=lambda r: (r["length"], r["group"], r["depth"], r["tool"])):
        answer = r["answer"].replace("|", "\\|")[:40]
        print(f"| {r['tool']} | {r['group']} | {r['length']} | {r['tokens']} | {r['depth']} | "
              f"{r['key']} | {answer} | {'yes' if r['correct'] else 'no'} | {r['seconds']:.0f} |")


if __name__ == "__main__":
    main()
