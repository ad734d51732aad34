"""Writes crates/train/tests/fixtures/tfevents.json: TensorBoard event records, framed by
TensorBoard's own RecordWriter from Events built with its own protos, which posenc's event
writer (crates/train/src/logs.rs) must reproduce byte for byte.

Run with the pinned stack of tests/tensorboard/requirements.txt:

    python3 -m venv tests/tensorboard/.venv
    tests/tensorboard/.venv/bin/pip install -r tests/tensorboard/requirements.txt
    tests/tensorboard/.venv/bin/python scripts/make_tfevents_fixtures.py
"""

import io
import json
import pathlib

import tensorboard
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/train/tests/fixtures/tfevents.json"


def framed(event):
    buf = io.BytesIO()
    RecordWriter(buf).write(event.SerializeToString())
    return buf.getvalue().hex()


def scalars(wall_time, step, values):
    summary = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in values]
    )
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary)


cases = []
# The first record of every file: the format version TensorBoard reads as "2".
e = event_pb2.Event(wall_time=1764633600.25, file_version="brain.Event:2")
cases.append({"what": "file_version", "wall_time": 1764633600.25, "step": 0, "hex": framed(e)})
# A restart: TensorBoard drops what an earlier process logged at this step and after.
e = event_pb2.Event(
    wall_time=1764633601.5, step=41, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)
)
cases.append({"what": "start", "wall_time": 1764633601.5, "step": 41, "hex": framed(e)})
# Scalars: one and several, small and large steps, a tag with a slash, a negative value.
for wall_time, step, values in [
    (1764633602.125, 1, [("train/loss", 4.1875)]),
    (1764633603.0, 300, [("train/loss", 2.2), ("train/lr", 0.000375), ("train/tokens_per_second", 15234.7)]),
    (1764633604.75, 123456789012, [("valid/exact", 0.0), ("valid/loss", -1.5e-7)]),
]:
    cases.append(
        {
            "what": "scalars",
            "wall_time": wall_time,
            "step": step,
            "scalars": [[t, v] for t, v in values],
            "hex": framed(scalars(wall_time, step, values)),
        }
    )

OUT.write_text(
    json.dumps({"tensorboard": tensorboard.__version__, "records": cases}, indent=1) + "\n"
)
print(f"wrote {OUT} ({len(cases)} records, tensorboard {tensorboard.__version__})")
