"""Running `hosts_job.py` as a horovod job over simulated hosts, and reading what it left."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from simhosts import IFACE, SimulatedHosts, host_list

from towerkit.callbacks import read_stats_file
from towerkit.trainers import HorovodJob, launch_horovod_job

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "hosts_job.py"
STEPS = 4
"""Steps per epoch in the job script."""

JOB_TIMEOUT = 420.0
"""Seconds a job may take at most (TensorFlow imports on a loaded 2-core machine dominate)."""

GLOO_TIMEOUT = 20.0
"""How long gloo waits for a silent peer: the bound on noticing a host gone from the network."""


def run_hvd(
    hosts: SimulatedHosts,
    cwd: Path,
    count: int,
    args: list[str],
    *,
    timeout: float = JOB_TIMEOUT,
) -> HorovodJob:
    """The job script as `count` ranks, one per host, the launcher on host 0."""
    env = {
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p
        ),
    }
    return launch_horovod_job(
        [sys.executable, str(SCRIPT), *args],
        count,
        timeout=timeout,
        cwd=cwd,
        env=hosts.env({**os.environ, **env}),
        gloo_timeout=GLOO_TIMEOUT,
        grace=5,
        hosts=host_list(hosts.addresses[:count]),
        network_interface=IFACE,
        ssh_identity_file=hosts.identity_file,
        launcher_prefix=hosts.exec_argv(0),
    )


def reports(out: str) -> dict[int, dict]:
    """Each rank's ``RANK-REPORT``, by rank."""
    found = {}
    for line in out.splitlines():
        _, tag, rest = line.partition("RANK-REPORT ")
        if tag:
            report = json.loads(rest)
            found[report["rank"]] = report
    return found


def epoch_steps(logdir: Path) -> list[tuple[int, int]]:
    """``(epoch_num, global_step)`` of each epoch record of stats.json."""
    records = read_stats_file(logdir / "stats.json") or []
    return [(r["epoch_num"], r["global_step"]) for r in records if "epoch_num" in r]


def checkpoint_step(logdir: Path) -> int:
    """The global step stored in the latest checkpoint, after reading every variable of it."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(logdir))
    assert latest is not None, os.listdir(logdir)
    reader = tf.train.load_checkpoint(latest)
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        assert np.all(np.isfinite(value)) if value.dtype.kind == "f" else True, name
    step = int(reader.get_tensor("global_step"))
    assert latest.endswith(f"model-{step}"), latest
    return step


def shard_values(rank: int, size: int) -> set[float]:
    """The first feature of every row of `rank`'s shard, as the job script cuts it."""
    sys.path.insert(0, str(ROOT / "libs" / "trainers" / "tests" / "scripts"))
    from dp_model import data

    x, _ = data(240, seed=10)
    return {float(v) for v in x[rank::size][:, 0]}


def wait_until_only_sshd(hosts: SimulatedHosts, limit: float) -> float:
    """Seconds until no process but sshd runs on any host; fails past `limit`."""
    keep = {p.pid for p in hosts.sshd}
    start = time.monotonic()
    while True:
        left = {i: [p for p in hosts.pids(i) if p not in keep] for i in range(len(hosts.names))}
        if not any(left.values()):
            return time.monotonic() - start
        if time.monotonic() - start > limit:
            msg = f"processes still running on the hosts {limit:g} s after the job: {left}"
            raise AssertionError(msg)
        time.sleep(0.5)
