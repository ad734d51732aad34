#!/usr/bin/env python3
"""Models cut to fit a device run's carry limit (64 MiB a call, the repository included),
and put back together on the GPU machine. Standard library only, but `f16` needs numpy
and `widen` safetensors with PyTorch (the GPU machine has both).

Here, before the calls (each piece directory is carried by one call; .cache is ignored):

    python3 scripts/carry_pieces.py f16 .cache/all-MiniLM-L6-v2 .cache/device/2/all-MiniLM-L6-v2
    python3 scripts/carry_pieces.py split .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
        .cache/device 31000000 3500000 49000000

There, once every piece has arrived:

    python3 scripts/carry_pieces.py join .cache/device gguf .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 scripts/carry_pieces.py widen .cache/device/2/all-MiniLM-L6-v2 .cache/all-MiniLM-L6-v2

`f16` copies a sentence-transformers directory with its f32 weights rounded to f16 (half
the bytes); `widen` writes them back as f32, the file both sides of the comparison then
load. `split` cuts a file into pieces of the given sizes (the rest last), piece k into
OUT/k/NAME.part<k>; `join` concatenates them in order and checks the total size.
"""
import json
import os
import shutil
import struct
import sys
from pathlib import Path


def f16(src, dst):
    import numpy as np

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", ".git*"),
                    dirs_exist_ok=True)
    raw = (src / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    meta, chunks, offset = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            meta[name] = t
            continue
        begin, end = t["data_offsets"]
        chunk, dtype = data[begin:end], t["dtype"]
        if dtype == "F32":
            chunk, dtype = np.frombuffer(chunk, dtype="<f4").astype("<f2").tobytes(), "F16"
        meta[name] = {"dtype": dtype, "shape": t["shape"],
                      "data_offsets": [offset, offset + len(chunk)]}
        chunks.append(chunk)
        offset += len(chunk)
    head = json.dumps(meta).encode()
    head += b" " * (-len(head) % 8)
    with open(dst / "model.f16.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for chunk in chunks:
            f.write(chunk)


def widen(src, dst):
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"),
                    dirs_exist_ok=True)
    t = load_file(src / "model.f16.safetensors")
    save_file({k: v.float() if v.is_floating_point() else v for k, v in t.items()},
              dst / "model.safetensors", metadata={"format": "pt"})


def split(path, out, *sizes):
    path, out = Path(path), Path(out)
    data = path.read_bytes()
    cuts = [0]
    for s in sizes:
        cuts.append(min(cuts[-1] + int(s), len(data)))
    cuts.append(len(data))
    for k, (a, b) in enumerate(zip(cuts, cuts[1:]), start=1):
        (out / str(k)).mkdir(parents=True, exist_ok=True)
        (out / str(k) / f"{path.name}.part{k}").write_bytes(data[a:b])
    (out / "1" / f"{path.name}.size").write_text(str(len(data)))


def join(pieces, stem, dst):
    pieces, dst = Path(pieces), Path(dst)
    parts = sorted(pieces.glob(f"*/*{stem}*.part*"), key=lambda p: int(p.suffix[5:]))
    size = int(next(pieces.glob(f"*/*{stem}*.size")).read_text())
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(dst.suffix + ".tmp")
    with open(tmp, "wb") as f:
        for p in parts:
            f.write(p.read_bytes())
    got = os.path.getsize(tmp)
    if got != size:
        os.remove(tmp)
        raise SystemExit(f"{len(parts)} pieces make {got} bytes, not {size}: a piece is missing")
    os.replace(tmp, dst)


if __name__ == "__main__":
    commands = {"f16": f16, "widen": widen, "split": split, "join": join}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        raise SystemExit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
