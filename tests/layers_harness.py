"""Run an example's model on the multi-process trainers through ``layers_job.py``.

The cluster (1 parameter server, 2 workers) and horovod (2 ranks) runs of the
layers tests: the processes are started, watched and stopped here, and each worker's
``LAYERS-REPORT`` (each rank's ``report-RANK.json``) is read back. `job_args` pick the example and its model
(``--example tp_style --kwargs '{"model": "gan"}'``); without them the job trains the
layers example.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import prefork
import pytest

JOB = Path(__file__).with_name("layers_job.py")
JOB_TIMEOUT = 420.0
"""Seconds a multi-process run (three or two TensorFlow processes on a busy machine) may take."""

HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None


def _reports(out: str) -> list[dict]:
    """The ``LAYERS-REPORT`` records in a job's output."""
    found = []
    for line in out.splitlines():
        _, tag, rest = line.partition("LAYERS-REPORT ")
        if tag:
            found.append(json.loads(rest))
    return found


def _free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on 127.0.0.1 right now."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _cluster_run(kind: str, base: Path, job_args: Sequence[str] = ()) -> list[dict]:
    """A parameter server and 2 workers on 127.0.0.1; the workers' reports, by task.

    Each process writes to its own log file under `base` (a report is too large for a
    pipe nobody reads). Every process is stopped, and the test fails, past JOB_TIMEOUT
    or once a worker fails.
    """
    from towerkit.callbacks.plumbing import stop_process_group

    ports = ",".join(map(str, _free_ports(3)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    procs, logs = [], []
    for role, task in (("ps", 0), ("worker", 0), ("worker", 1)):
        log = base / f"{role}{task}.log"
        argv = [sys.executable, str(JOB), kind, role, str(task), "--ports", ports]
        with open(log, "w") as out:
            procs.append(
                prefork.popen(
                    [*argv, "--logdir", str(base), *job_args],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
        logs.append(log)
    deadline = time.monotonic() + JOB_TIMEOUT
    failed = None
    while failed is None and any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs[1:]):
            failed = "a worker failed"
        elif time.monotonic() > deadline:
            failed = f"the cluster did not exit within {JOB_TIMEOUT:g} s"
        time.sleep(0.5)
    for p in procs:
        stop_process_group(p, grace=5.0)
    outs = [log.read_text(errors="replace") for log in logs]
    if failed or any(p.returncode != 0 for p in procs):
        tails = "\n".join(f"--- {log.name}:\n{out[-3000:]}" for log, out in zip(logs, outs))
        pytest.fail(f"{failed or 'a process failed'}:\n{tails}")
    for log, out in zip(logs, outs):
        assert "ERROR:tensorflow" not in out, (log.name, out[-3000:])
    return sorted((r for out in outs[1:] for r in _reports(out)), key=lambda r: r["task"])


def _horovod_run(base: Path, job_args: Sequence[str] = ()) -> list[dict]:
    """Two horovod ranks over gloo on localhost; their reports, by rank."""
    from towerkit.trainers import launch_horovod_job

    reports = base / "reports"
    reports.mkdir()
    argv = [sys.executable, str(JOB), "horovod", "--logdir", str(base / "log")]
    job = launch_horovod_job(
        [*argv, "--report-dir", str(reports), *job_args],
        2,
        timeout=JOB_TIMEOUT,
        cwd=base,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"},
    )
    assert job.returncode == 0, job.output
    found = [json.loads(p.read_text()) for p in sorted(reports.glob("report-*.json"))]
    return sorted(found, key=lambda r: r["rank"])


def multi_process_run(name: str, base: Path, job_args: Sequence[str] = ()) -> dict:
    """A run of a multi-process trainer, as `run` gives it, with every process's report."""
    reports = (
        _horovod_run(base, job_args) if name == "horovod" else _cluster_run(name, base, job_args)
    )
    assert len(reports) == 2, reports
    (chief,) = [r for r in reports if r["is_chief"]]
    return {"name": name, "checkpoint": chief["checkpoint"], "facts": chief, "reports": reports}
