"""One rank of a multi-process conformance job: run every scenario, write what was recorded.

Run by the horovod launcher as ``python -m towerkit.conformance._worker JOB.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from towerkit.conformance._entries import Capabilities, TrainerEntry
from towerkit.conformance._scenario import scenario_from_data


def _barrier(hvd: object, index: int) -> None:
    """Wait until every rank reaches scenario `index` (an allreduce in a throw-away graph)."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        op = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name=f"conformance_barrier_{index}")  # type: ignore[attr-defined]
        with tf1.Session(graph=graph) as sess:
            sess.run(op)


def _write(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Run the job described by the JSON file ``argv[0]`` as this horovod rank.

    Returns:
        0 (failures inside a scenario are recorded in its result).
    """
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod.tensorflow as hvd

    from towerkit.conformance._execute import execute

    hvd.init()
    rank = int(hvd.rank())
    spec = job["entry"]
    entry = TrainerEntry(
        name=spec["name"],
        factory=spec["factory"],
        capabilities=Capabilities(**spec["capabilities"]),
    )
    out = Path(job["out"]) / f"rank{rank}.json"
    results = []
    for i, data in enumerate(job["scenarios"]):
        scenario = scenario_from_data(data)
        _barrier(hvd, i)
        results.append(execute(entry, scenario, job["workdir"], rank=rank).to_data())
        _write(out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
