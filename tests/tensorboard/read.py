"""Reads a log directory's scalars with TensorBoard's own reader, as `tensorboard --logdir`
does (orphaned steps purged on a restart), and prints them as JSON:
{"tag": [[step, value], ...], ...}, each curve in the order the reader gives.

    tests/tensorboard/.venv/bin/python tests/tensorboard/read.py LOGDIR
"""

import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0}, purge_orphaned_data=True)
acc.Reload()
print(json.dumps({t: [[s.step, s.value] for s in acc.Scalars(t)] for t in acc.Tags()["scalars"]}))
