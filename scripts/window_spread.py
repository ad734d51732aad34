#!/usr/bin/env python3
"""How much the text moves a perplexity: the spread over the windows of `posenc lm eval
--format json` runs, window by window.

    python3 scripts/window_spread.py OUT.csv EVAL.json [EVAL.json …]

Each EVAL.json is what `posenc lm eval --format json --windows N` printed (one record per
window length, each with its windows' `starts`, `window_losses` and, past the trained
context, `window_tail_losses`). Each record is labelled by its `rope_scaling`'s
`rope_type` (`none` without one) and `factor` (empty without one). Writes OUT.csv, one row
per run, length and window (scaling, factor, length, window, start, loss, tail_loss: tidy
records that `pandas.read_csv` loads), and prints a Markdown table: per scaling and
length, the loss as the mean ± sample standard deviation over the windows, the perplexity
of that mean, the loss past the trained context likewise, and the first window's
perplexity (the window `--windows 1` scores); then, for each length whose runs share
their windows, each run's loss (past the trained context where every run has one) window
by window. Standard library only.
"""
import math
import signal
import statistics
import sys

import eval_records

FIELDS = ["len", "windows", "by_position", "rope_scaling"]


def parse(row):
    """(scaling, factor, length, starts, losses, tail losses) of one record."""
    starts = [int(x) for x in row.get("starts") or []]
    losses = [float(x) for x in row.get("window_losses") or []]
    tails = [float(x) for x in row.get("window_tail_losses") or []]
    if not losses or len(starts) != len(losses) or tails and len(tails) != len(losses):
        raise ValueError("a record without one loss per window (written by a posenc older "
                         "than `window_losses`?)")
    return (*eval_records.rope_scaling(row["rope_scaling"]), int(row["len"]), starts, losses,
            tails)


def main(out, paths):
    runs = []  # (scaling, factor, length, starts, losses, tail losses)
    for path in paths:
        runs += eval_records.load(path, FIELDS, parse)
    if not runs:
        raise SystemExit("no window lengths in the inputs")
    eval_records.write_csv(
        out, ["scaling", "factor", "length", "window", "start", "loss", "tail_loss"],
        [[s, f, n, i, start, loss, tails[i] if tails else ""]
         for s, f, n, starts, losses, tails in runs
         for i, (start, loss) in enumerate(zip(starts, losses))])
    print("| scaling | window | windows | loss | perplexity of the mean | loss past the "
          "trained context | first window's perplexity |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s, f, n, _, losses, tails in runs:
        tail = eval_records.spread(tails) if tails else "–"
        print(f"| {eval_records.scaling_name(s, f)} | {n} | {len(losses)} | {eval_records.spread(losses)} | "
              f"{math.exp(statistics.fmean(losses)):.2f} | {tail} | {math.exp(losses[0]):.2f} |")
    # Window by window: runs over the same windows compare on the same text.
    for n in sorted({n for _, _, n, *_ in runs}):
        same = [r for r in runs if r[2] == n]
        starts = same[0][3]
        if any(r[3] != starts for r in same):
            continue
        past = all(r[5] for r in same)
        what = "loss past the trained context" if past else "loss"
        print(f"\n{what} at {n}, window by window (each column one window, by its first "
              "token):\n")
        print("| scaling | " + " | ".join(f"from {s}" for s in starts) + " |")
        print("|---|" + "---:|" * len(starts))
        for s, f, _, _, losses, tails in same:
            values = tails if past else losses
            print(f"| {eval_records.scaling_name(s, f)} | "
                  + " | ".join(f"{x:.3f}" for x in values) + " |")


if __name__ == "__main__":
    # A closed pipe (`| head`) ends the table quietly, as a shell tool does.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
