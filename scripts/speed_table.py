#!/usr/bin/env python3
"""The speed table of one day's raw `posenc bench train|embed|generate` logs, as Markdown.

    python3 scripts/speed_table.py docs/speed/runs-2026-11-28
    python3 scripts/speed_table.py docs/generate/runs-2026-11-28

reads each `train-*.txt` and `embed-*.txt` there (the benches' own output, with
/usr/bin/time's last line) and prints one row per run: ours and PyTorch's medians, the
median of the alternating rounds' ratios and the ratio of the medians, and the run's peak
memory; or, where the day holds `generate-*.txt` (`posenc bench generate` against
llama.cpp, scripts/generate_speed_runs.sh), one row per run and measure: both sides'
medians and both ratios as the bench printed them, and each side's peak memory. Nothing
is typed by hand.
"""
import re
import signal
import sys
from pathlib import Path

# A closed pipe (`| head`) ends the table quietly, as a shell tool does.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
if len(sys.argv) != 2:
    raise SystemExit(__doc__)
day = Path(sys.argv[1])
ratio = re.compile(r"(\d+\.\d+)× \(ratio of the medians (\d+\.\d+)×\)")
peak = re.compile(r"max RSS (\d+) KB")


def rows(pattern, ours, theirs, unit):
    for log in sorted(day.glob(pattern)):
        text = log.read_text()
        mine = re.search(ours, text)
        them = re.search(theirs, text)
        both = ratio.search(text)
        rss = peak.search(text)
        yield "| {} | {} {unit} | {} {unit} | {}× | {}× | {:.0f} MB |".format(
            log.stem,
            mine.group(1) if mine else "?",
            them.group(1) if them else "?",
            both.group(1) if both else "–",
            both.group(2) if both else "–",
            int(rss.group(1)) / 1024 if rss else float("nan"),
            unit=unit,
        )


def generate():
    """One row per run and measure of `posenc bench generate`'s logs: its own table's cells
    as printed (both sides' medians and both ratios), the run's peak memory on each side."""
    for log in sorted(day.glob("generate-*.txt")):
        text = log.read_text()
        memory = re.search(r"^\| peak resident memory \| ([^|]*) \| ([^|]*) \|", text, re.M)
        for m in re.finditer(r"^\| ((?:prefill|decode|time to first)[^|]*) \| ([^|]*) \| ([^|]*) \| ([^|]*) \| ([^|]*) \|$",
                             text, re.M):
            yield "| {} | {} | {} | {} | {} | {} | {} / {} |".format(
                log.stem, m.group(1), m.group(2), m.group(3), m.group(4), m.group(5),
                *(memory.groups() if memory else ("?", "?")))


if list(day.glob("generate-*.txt")):
    print("| run | measure | posenc | llama.cpp | speed, median of the rounds' ratios | speed, ratio of the medians | peak memory, posenc / llama.cpp |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in generate():
        print(row)
else:
    print("| run | posenc | PyTorch | speed, median of the rounds' ratios | speed, ratio of the medians | peak memory of the largest process (time's max RSS) |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows("train-*.txt", r"\| reference \(d256[^|]*\|[^|]*\|[^|]*\|[^|]*\| ([\d.]+) \|",
                    r"\| PyTorch [^|]*reference \|[^|]*\|[^|]*\|[^|]*\| ([\d.]+) \|", "ms"):
        print(row)
    for row in rows("embed-*.txt", r"\| posenc \| ([\d.]+) \|", r"\| PyTorch [^|]*\| ([\d.]+) \|", "ms"):
        print(row)
