"""What the scripts that read `posenc lm eval` and `lm passkey --format json` share: reading
their records, naming a record's scaling, and writing a tidy CSV whole or not at all.
Standard library only."""
import csv
import json
import os
import statistics


def load(path, fields, parse):
    """`parse(record)` of each record of one `posenc lm eval --format json` output that has
    an evaluation (a length past a learned table has none, only why), each checked to hold
    `fields` and a `by_position` as long as its window; exits naming the file where a
    record is not so, or `parse` finds it malformed (a ValueError, TypeError or KeyError)."""
    try:
        with open(path) as f:
            rows = json.load(f)
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError("not a list of records")
        rows = [r for r in rows if r.get("unavailable") is None]
        for row in rows:
            missing = [k for k in fields if k not in row]
            if missing:
                raise KeyError(", ".join(missing))
            if len(row["by_position"]) != row["len"]:
                raise ValueError(f"{len(row['by_position'])} losses in a window of {row['len']}")
        return [parse(row) for row in rows]
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise SystemExit(f"{path}: not the output of `posenc lm eval --format json` "
                         f"({type(e).__name__}: {e})")


def write_csv(out, header, rows):
    """Writes `rows` under `header` to `out` through a temporary file, replacing `out`
    only once all of it is written (`pandas.read_csv` loads it)."""
    tmp = f"{out}.tmp"
    try:
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise SystemExit(f"writing {out}: {e}")


def spread(xs):
    """`mean ± sample standard deviation` with three decimals (the mean alone for one
    value), as posenc's tables write it."""
    mean = statistics.fmean(xs)
    return f"{mean:.3f}" if len(xs) == 1 else f"{mean:.3f} ± {statistics.stdev(xs):.3f}"


def rope_scaling(raw):
    """`(rope_type, factor)` of a record's `rope_scaling` (its JSON text, or None):
    `("none", "")` without one, `""` for a factor it does not give."""
    if not raw:
        return "none", ""
    settings = json.loads(raw)
    return settings.get("rope_type", "none"), settings.get("factor", "")


def scaling_name(kind, factor):
    """How a table names a scaling: its label, and its factor where it has one."""
    return kind if factor == "" else f"{kind} ×{float(factor):g}"
