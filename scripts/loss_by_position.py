#!/usr/bin/env python3
"""The loss by position of `posenc lm eval --format json` runs, in octaves of position.

    python3 scripts/loss_by_position.py OUT.csv LABEL=EVAL.json [LABEL=EVAL.json …]

Each EVAL.json is what `posenc lm eval --format json` printed for one model (LABEL names
it, e.g. its seed) at one or more window lengths. Writes OUT.csv, one row per model,
window length and position (model, length, windows, position, loss: tidy records that
`pandas.read_csv` loads), and prints a Markdown table: for each window length, the mean
loss over positions 0–31, 32–63, 64–127, 128–255, … (each model's own mean over the
range), as the mean ± sample standard deviation over the models (posenc's `spread`).
Standard library only.
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


def spread(xs):
    mean = statistics.fmean(xs)
    return f"{mean:.3f}" if len(xs) == 1 else f"{mean:.3f} ± {statistics.stdev(xs):.3f}"


def main(out, runs):
    evals = {}  # (model, length) -> (windows, by_position)
    for run in runs:
        label, sep, path = run.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"{run!r}: expected LABEL=EVAL.json")
        for row in eval_records.load(path, ["len", "windows", "by_position"]):
            losses = [float(x) for x in row["by_position"]]
            evals[(label, int(row["len"]))] = (int(row["windows"]), losses)
    if not evals:
        raise SystemExit("no window lengths in the inputs")
    models = list(dict.fromkeys(m for m, _ in evals))
    lengths = sorted({n for _, n in evals})
    # Everything read and checked first; the CSV then replaces OUT whole.
    eval_records.write_csv(out, ["model", "length", "windows", "position", "loss"],
                           [[model, length, windows, i, loss]
                            for (model, length), (windows, losses) in evals.items()
                            for i, loss in enumerate(losses)])
    columns = octaves(max(lengths))
    print(f"mean loss by position (nats), {len(models)} models: {', '.join(models)}\n")
    print("| window | " + " | ".join(f"{a}–{b - 1}" for a, b in columns) + " |")
    print("|---:|" + "---:|" * len(columns))
    for length in lengths:
        cells = []
        for a, b in columns:
            if a >= length:
                cells.append("")
                continue
            means = [statistics.fmean(evals[(m, length)][1][a:b]) for m in models
                     if (m, length) in evals]
            cells.append(spread(means))
        print(f"| {length} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    # A closed pipe (`| head`) ends the table quietly, as a shell tool does.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
