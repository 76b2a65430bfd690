"""One process of a TensorFlow cluster job of the suite: the parameter server or a worker.

Run by `ClusterRunner` as ``python -m towerkit.conformance._cluster JOB.json ROLE INDEX``.
Every process of the job serves one ``tf.compat.v1.train.Server`` on 127.0.0.1; each
worker runs every scenario with its trainer (the first worker is the chief), each
scenario in its own resource container, so the parameter server holds fresh
variables for each, and writes what its recorders saw. The parameter server only
serves; the runner stops it once the workers are done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from towerkit.conformance._entries import Capabilities, TrainerEntry
from towerkit.conformance._scenario import scenario_from_data

_SERVER: list[Any] = []

BARRIER_TIMEOUT = 300.0
"""Seconds a worker waits for the others between scenarios."""


def cluster_server() -> Any:
    """This process's ``tf.compat.v1.train.Server``, for the factories of cluster trainers.

    Raises:
        RuntimeError: not inside a worker of a cluster job.
    """
    if not _SERVER:
        msg = (
            "cluster_server() is available only in a worker of a conformance cluster job "
            "(capabilities.launcher='tf-distributed')"
        )
        raise RuntimeError(msg)
    return _SERVER[0]


def _write(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def file_barrier(directory: Path, index: int, rank: int, size: int, timeout: float) -> None:
    """Wait until all `size` workers reached point `index` (files in a shared directory).

    Raises:
        TimeoutError: some workers did not arrive within `timeout` seconds; names them.
    """
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{index}-{rank}").touch()
    deadline = time.monotonic() + timeout
    while True:
        missing = [r for r in range(size) if not (directory / f"{index}-{r}").exists()]
        if not missing:
            return
        if time.monotonic() > deadline:
            msg = f"workers {missing} did not reach scenario {index} within {timeout:g} s"
            raise TimeoutError(msg)
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """Serve (``ps``) or run every scenario (``worker``) of the job in ``argv[0]``."""
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    role, index = args[1], int(args[2])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from towerkit.towers import resolve_devices, session_config_for_devices

    tf1 = tf.compat.v1
    cluster = tf1.train.ClusterSpec(job["cluster"])
    spec = job["entry"]
    caps = Capabilities(**spec["capabilities"])
    if role == "ps":
        server = tf1.train.Server(cluster, "ps", index)
        server.join()
        return 0
    config = session_config_for_devices(resolve_devices(caps.num_towers))
    server = tf1.train.Server(cluster, "worker", index, config=config)
    # run as __main__, this module is not the one factories import: register there
    from towerkit.conformance import _cluster as registry

    registry._SERVER.append(server)
    from towerkit.conformance._execute import execute

    entry = TrainerEntry(name=spec["name"], factory=spec["factory"], capabilities=caps)
    out = Path(job["out"]) / f"rank{index}.json"
    size = cluster.num_tasks("worker")
    results = []
    for i, data in enumerate(job["scenarios"]):
        scenario = scenario_from_data(data)
        file_barrier(Path(job["out"]) / "barrier", i, index, size, BARRIER_TIMEOUT)
        results.append(
            execute(entry, scenario, job["workdir"], rank=index, container=f"scenario{i}").to_data()
        )
        _write(out, results)
    file_barrier(Path(job["out"]) / "barrier", len(job["scenarios"]), index, size, BARRIER_TIMEOUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
