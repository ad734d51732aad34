#!/usr/bin/env python3
"""The old/new time ratio per round, and its median, of alternated A/B logs
(docs/speed/ab-*/): > 1 means the new binary is faster. Standard library only.

    python3 scripts/ab_ratio.py docs/speed/ab-workspace-shape
"""
import re
import statistics
import sys
from pathlib import Path


def times(path):
    """{binary: [the round's first time]} from lines that begin with the binary's name."""
    out = {}
    for line in Path(path).read_text().splitlines():
        who, _, rest = line.partition(" ")
        if who not in ("old", "new"):
            continue
        if "tokens/s" in rest:  # generate: the decode time, "63 more tokens in T s"
            value = float(re.search(r"more tokens in ([\d.]+) s", rest).group(1))
        else:
            value = float(re.findall(r"[\d.]+", rest.replace("posenc", ""))[0])
        out.setdefault(who, []).append(value)
    return out


def main():
    for path in sorted(Path(sys.argv[1]).glob("*.txt")):
        t = times(path)
        if not (t.get("old") and t.get("new")):
            continue  # not a timing log (identity.txt)
        ratios = [o / n for o, n in zip(t["old"], t["new"])]
        print(f"{path.name}: old {statistics.median(t['old'])}, new {statistics.median(t['new'])} (medians); "
              f"old/new per round {', '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
