#!/usr/bin/env python3
"""The loss by position of `posenc lm eval --format json` runs, in octaves of position.

    python3 scripts/loss_by_position.py OUT.csv LABEL=EVAL.json [LABEL=EVAL.json …]

Each EVAL.json is what `posenc lm eval --format json` printed for one model (LABEL names
it, e.g. its seed, or GROUP/NAME, e.g. rope/1337, to compare groups of models) at one or
more window lengths. Writes OUT.csv, one row per model, window length and position
(model, label, seed, length, windows, position, loss: tidy records that `pandas.read_csv`
loads and `posenc report` tables read; model is the LABEL, and a LABEL of GROUP/SEED
gives label GROUP and seed SEED), and prints a Markdown table: for each group (if any) and window length,
the mean loss over positions 0–31, 32–63, 64–127, 128–255, … (each model's own mean over
the range), as the mean ± sample standard deviation over the group's models (posenc's
`spread`). Standard library only.
"""
import signal
import statistics
import sys

import eval_records


def octaves(length):
    """[(first, end)] of 0–31, 32–63, then doubling, up to `length`."""
    ranges, first, end = [], 0, 32
    while first < length:
        ranges.append((first, min(end, length)))
        first, end = end, end * 2
    return ranges


def label_seed(model):
    """(label, seed) of a LABEL: `rope/1337` is rope's seed 1337; a LABEL without a whole
    number after its last `/` has no seed (an empty field)."""
    group, sep, seed = model.rpartition("/")
    return (group, seed) if sep and seed.isdigit() else (model, "")


def main(out, runs):
    evals = {}  # (model, length) -> (windows, by_position)
    for run in runs:
        label, sep, path = run.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"{run!r}: expected LABEL=EVAL.json")
        parse = lambda row: (int(row["len"]), int(row["windows"]),
                             [float(x) for x in row["by_position"]])
        for length, windows, losses in eval_records.load(path, ["len", "windows", "by_position"],
                                                         parse):
            evals[(label, length)] = (windows, losses)
    if not evals:
        raise SystemExit("no window lengths in the inputs")
    models = list(dict.fromkeys(m for m, _ in evals))
    lengths = sorted({n for _, n in evals})
    # Everything read and checked first; the CSV then replaces OUT whole.
    eval_records.write_csv(out, ["model", "label", "seed", "length", "windows", "position",
                                 "loss"],
                           [[model, *label_seed(model), length, windows, i, loss]
                            for (model, length), (windows, losses) in evals.items()
                            for i, loss in enumerate(losses)])
    # GROUP/NAME labels make one row per group; plain labels one group of every model.
    groups = {}
    for m in models:
        group, sep, _ = m.rpartition("/")
        groups.setdefault(group if sep else None, []).append(m)
    grouped = None not in groups
    columns = octaves(max(lengths))
    print(f"mean loss by position (nats), {len(models)} models: {', '.join(models)}\n")
    print(("| model " if grouped else "") + "| window | "
          + " | ".join(f"{a}–{b - 1}" for a, b in columns) + " |")
    print(("|---" if grouped else "") + "|---:|" + "---:|" * len(columns))
    for group, members in groups.items():
        for length in lengths:
            have = [m for m in members if (m, length) in evals]
            if not have:
                continue
            cells = [eval_records.spread([statistics.fmean(evals[(m, length)][1][a:b])
                                          for m in have]) if a < length else ""
                     for a, b in columns]
            print((f"| {group} " if grouped else "") + f"| {length} | "
                  + " | ".join(cells) + " |")


if __name__ == "__main__":
    # A closed pipe (`| head`) ends the table quietly, as a shell tool does.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
