"""How far two runs' outputs are apart: the largest difference between their numbers,
absolute and relative to the larger, over every tensor of two safetensors files or every
number of two JSON files (keys that name a path or a time are skipped). Prints
`identical` when every byte of the numbers agrees.

    python3 scripts/ab_close.py OLD NEW
"""
import json
import struct
import sys

SKIP = {"model", "data", "seconds", "elapsed", "tokens_per_second"}


def safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    body = raw[8 + n :]
    out = {}
    for name, meta in sorted(header.items()):
        start, end = meta["data_offsets"]
        if meta["dtype"] != "F32":
            out[name] = list(body[start:end])
            continue
        count = (end - start) // 4
        out[name] = list(struct.unpack(f"<{count}f", body[start:end]))
    return out


def numbers(x, prefix=""):
    if isinstance(x, dict):
        for k in sorted(x):
            if k not in SKIP:
                yield from numbers(x[k], f"{prefix}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from numbers(v, f"{prefix}[{i}]")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield prefix, float(x)


def flat(path):
    if path.endswith(".safetensors"):
        for name, values in safetensors(path).items():
            for i, v in enumerate(values):
                yield f"{name}[{i}]", float(v)
    else:
        yield from numbers(json.load(open(path)))


def main():
    old, new = list(flat(sys.argv[1])), list(flat(sys.argv[2]))
    if [k for k, _ in old] != [k for k, _ in new]:
        print("DIFFER: not the same fields")
        return
    worst_abs = worst_rel = 0.0
    for (_, a), (_, b) in zip(old, new):
        gap = abs(a - b)
        worst_abs = max(worst_abs, gap)
        worst_rel = max(worst_rel, gap / max(abs(a), abs(b), 1e-30))
    if worst_abs == 0.0:
        print("identical")
    else:
        print(f"apart: largest |Δ| {worst_abs:.3g}, relative {worst_rel:.3g}")


main()
