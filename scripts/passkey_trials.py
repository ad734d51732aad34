#!/usr/bin/env python3
"""Passkey trials of SmolLM2's long-context runs in one table: the grid's one key per cell
(`docs/long-context/results.json`, seed 0) and the further keys of `posenc lm passkey
--seed N` runs (`scripts/long_context.sh OUT keys` and `… depths`).

    python3 scripts/passkey_trials.py [--by-depth] OUT.csv [LABEL=]INPUT.json [[LABEL=]INPUT.json …]

Each INPUT.json is either the long-context report's `results.json` (its `smollm2-passkey`
records are read, as seed 0) or what `posenc lm passkey --format json` printed (its records
name their seed; a file from before they did is named `…-seedN.json` for it). A trial's
scaling is its rope_type (`none` without one), or LABEL where the input is given as
LABEL=INPUT.json (runs of one rope_type with different settings, such as LongRoPE's
divisors, told apart). Writes OUT.csv, one row per trial (scaling, factor, length, depth,
seed, trial, key, correct, answer, seconds, peak_rss_mb: tidy records that
`pandas.read_csv` loads), and prints a Markdown table: per scaling and factor, length and
depth, the keys found out of the keys tried, and what the model wrote where it missed;
with `--by-depth`, instead, one table per scaling and factor of keys found by length (rows)
and depth (columns). A key tried twice in one cell (a file given twice) is an error.
Standard library only.
"""
import json
import signal
import sys

import eval_records

HEADER = ["scaling", "factor", "length", "depth", "seed", "trial", "key", "correct", "answer",
          "seconds", "peak_rss_mb"]


def read(arg):
    """The trials of one input, `[LABEL=]PATH`, whichever kind it is, exiting with a message
    naming it where it is neither."""
    label, path = arg.split("=", 1) if "=" in arg else (None, arg)
    if label == "":
        raise SystemExit(f"{arg}: an empty LABEL before `=`")
    rows = read_path(path)
    if label is not None:
        for r in rows:
            r[0] = label
    return rows


def read_path(path):
    """The trials of the input at `path`."""
    try:
        with open(path) as f:
            rows = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {type(e).__name__}: {e}")
    # The report's records each name their experiment; `lm passkey`'s do not.
    if isinstance(rows, list) and any(isinstance(r, dict) and "experiment" in r for r in rows):
        return grid(path, rows)
    if not isinstance(rows, list):
        raise SystemExit(f"{path}: neither the report's results.json nor the output of "
                         "`posenc lm passkey --format json`")
    # Records carry their seed since posenc wrote it; older files are named for it.
    name = path.rsplit("/", 1)[-1]
    seed = None
    if "-seed" in name:
        try:
            seed = int(name.rsplit("-seed", 1)[1].split(".")[0])
        except ValueError:
            raise SystemExit(f"{path}: no seed after `-seed` in its name")
    return trials(path, rows, seed)


def trial(path, scaling, factor, seed, seconds, r):
    """One CSV row: a trial's `scaling`, `factor`, `seed` and wall `seconds`, the rest read
    from its record `r`; exits naming `path` where a field is missing or malformed."""
    try:
        return [scaling, factor, int(r["length"]), float(r["depth"]), int(seed),
                int(r["trial"]), str(r["key"]), bool(r["correct"]), r["answer"],
                float(seconds), float(r["peak_rss_mb"])]
    except (KeyError, TypeError, ValueError) as e:
        raise SystemExit(f"{path}: a passkey record without {e}")


def grid(path, records):
    """The grid's trials from the report's records, each with the seed that drew its key
    (`key_seed`; seed 0 where a record is older than the field)."""
    try:
        return [trial(path, r["scaling"], r["factor"] or "", r.get("key_seed", 0), r["wall_s"], r)
                for r in records
                if isinstance(r, dict) and r.get("experiment") == "smollm2-passkey"]
    except KeyError as e:
        raise SystemExit(f"{path}: a passkey record without {e}")


def trials(path, records, seed):
    """The trials of one `posenc lm passkey --format json` output, each drawn with the seed
    its record names, else `seed` (the file's name's)."""
    rows = []
    for r in records:
        if not isinstance(r, dict):
            raise SystemExit(f"{path}: a record that is not an object")
        drawn = r.get("seed", seed)
        if drawn is None:
            raise SystemExit(f"{path}: a record without its seed, in a file not named for one "
                             "(…-seedN.json)")
        if seed is not None and drawn != seed:
            raise SystemExit(f"{path}: a record of seed {drawn} in a file named for seed {seed}")
        try:
            kind, factor = eval_records.rope_scaling(r["rope_scaling"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SystemExit(f"{path}: a passkey record without a readable rope_scaling ({e})")
        rows.append(trial(path, kind, factor, drawn, r.get("seconds"), r))
    return rows


def cell_text(answer):
    """An answer as one Markdown table cell: stripped, its line breaks and bars escaped."""
    return answer.strip().replace("\n", "\\n").replace("|", "\\|")


def by_depth(cells):
    """Per scaling and factor, a Markdown table of keys found by length (rows) and depth
    (columns)."""
    for scaling in dict.fromkeys(s for s, _, _ in cells):
        lengths = sorted({n for s, n, _ in cells if s == scaling})
        depths = sorted({d for s, _, d in cells if s == scaling})
        print(f"\n{eval_records.scaling_name(*scaling)}: keys found, by length and depth\n")
        print("| length | " + " | ".join(f"{d:g}" for d in depths) + " |")
        print("|---:|" + "---:|" * len(depths))
        for n in lengths:
            row = [cells.get((scaling, n, d)) for d in depths]
            print(f"| {n} | " + " | ".join(
                f"{sum(r[7] for r in c)}/{len(c)}" if c else "–" for c in row) + " |")


def main(out, paths, pivot=False):
    rows = [row for path in paths for row in read(path)]
    if not rows:
        raise SystemExit("no passkey trials in the inputs")
    seen = set()
    for r in rows:
        cell = (r[0], r[1], r[2], r[3], r[6])
        if cell in seen:
            raise SystemExit(f"the key {r[6]} at {r[2]} tokens, depth {r[3]}, "
                             f"{eval_records.scaling_name(r[0], r[1])}, is in the inputs twice")
        seen.add(cell)
    order = ["none", "linear", "dynamic", "yarn", "llama3"]
    rows.sort(key=lambda r: (order.index(r[0]) if r[0] in order else len(order), r[0],
                             r[1] if r[1] != "" else 0, r[2], r[3], r[4], r[5]))
    eval_records.write_csv(out, HEADER, rows)
    cells = {}
    for r in rows:
        cells.setdefault(((r[0], r[1]), r[2], r[3]), []).append(r)
    if pivot:
        by_depth(cells)
        return
    print("| scaling | length | depth | keys found | what it wrote where it missed |")
    print("|---|---:|---:|---:|---|")
    for (scaling, length, depth), cell in cells.items():
        found = sum(r[7] for r in cell)
        misses = "; ".join(f"\"{cell_text(r[8])}\"" for r in cell if not r[7])
        print(f"| {eval_records.scaling_name(*scaling)} | {length} | {depth} | {found}/{len(cell)} | {misses} |")


if __name__ == "__main__":
    # A closed pipe (`| head`) ends the table quietly, as a shell tool does.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = sys.argv[1:]
    pivot = args[:1] == ["--by-depth"]
    if pivot:
        args = args[1:]
    if len(args) < 2:
        raise SystemExit(__doc__)
    main(args[0], args[1:], pivot)
