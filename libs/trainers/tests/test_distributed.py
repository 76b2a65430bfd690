"""Distributed trainers on TensorFlow's runtime: 1 parameter server and 2 workers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import prefork
import pytest
import tensorflow as tf

from towerkit.towers import resolve_devices, visible_gpu_count
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DistributedTrainerParameterServer,
    DistributedTrainerReplicated,
    serve_parameters,
)

pytestmark = [
    pytest.mark.procs,
    pytest.mark.timeout(600),
]  # timeout: a cluster job may take JOB_TIMEOUT (300 s)

SCRIPT = Path(__file__).parent / "scripts" / "dist_job.py"
STEPS = 5
"""Steps per epoch in the job script."""

EPOCHS = 3
JOB_TIMEOUT = 300.0
"""Seconds the three processes may take together."""


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on 127.0.0.1 right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_cluster(tmp_path: Path, trainer: str, precision: str = "float32") -> dict:
    """Start the ps and both workers; wait for all three; return their reports and outputs.

    Every process runs in its own process group; past JOB_TIMEOUT all are stopped and
    the test fails, so a process that does not exit fails the test instead of hanging it.
    """
    ports = ",".join(map(str, free_ports(3)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    roles = [("ps", 0), ("worker", 0), ("worker", 1)]
    procs = {}
    started = time.monotonic()
    for role, task in roles:
        argv = [sys.executable, str(SCRIPT), role, str(task), "--ports", ports]
        argv += ["--trainer", trainer, "--logdir-base", str(tmp_path), "--max-epoch", str(EPOCHS)]
        argv += ["--precision", precision]
        procs[(role, task)] = prefork.popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
    failed = None
    while any(p.poll() is None for p in procs.values()):
        broken = [k for k, p in procs.items() if k[0] == "worker" and p.poll() not in (None, 0)]
        if broken:
            failed = f"worker {broken[0][1]} failed"
        elif time.monotonic() - started > JOB_TIMEOUT:
            failed = f"the cluster did not exit within {JOB_TIMEOUT:g} s"
        if failed:
            for proc in procs.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.5)
    outs = {k: p.communicate()[0] for k, p in procs.items()}
    if failed:
        pytest.fail(f"{failed}: {outs}")
    found = {}
    for key, out in outs.items():
        for line in out.splitlines():
            _, tag, rest = line.partition("DIST-REPORT ")
            if tag:
                found[key] = json.loads(rest)
    return {
        "codes": {k: p.returncode for k, p in procs.items()},
        "outs": outs,
        "reports": found,
        "seconds": time.monotonic() - started,
    }


@pytest.fixture(scope="module", params=["ps", "replicated", "replicated-mixed_float16"])
def cluster(request, tmp_path_factory):
    """One finished job per trainer kind (and one in mixed float16)."""
    gpus = visible_gpu_count()
    if 0 < gpus < 2:
        pytest.skip(f"2 towers per worker need 2 visible GPUs, or none; {gpus} visible")
    kind, _, precision = request.param.partition("-")
    tmp = tmp_path_factory.mktemp(f"dist-{request.param}")
    job = run_cluster(tmp, kind, precision or "float32")
    job["kind"] = kind
    job["precision"] = precision or "float32"
    job["base"] = tmp
    return job


@pytest.mark.slow
class TestCluster:
    """Real processes: training progresses, the chief alone saves, everybody exits."""

    def test_everybody_exits(self, cluster):
        """The ps returns once both workers checked in; all three exit with status 0."""
        assert cluster["codes"] == {("ps", 0): 0, ("worker", 0): 0, ("worker", 1): 0}, cluster[
            "outs"
        ]
        assert sorted(cluster["reports"][("ps", 0)]["done"]) == [0, 1]

    def test_no_tensorflow_error_logged(self, cluster):
        """No process logs a TensorFlow error (e.g. an op result 'never used')."""
        for key, out in cluster["outs"].items():
            assert "ERROR:tensorflow" not in out, (key, out)

    def test_training_progresses(self, cluster):
        """Both workers' costs fall; the shared variables classify held-out data well."""
        for task in (0, 1):
            rep = cluster["reports"][("worker", task)]
            costs = rep["costs"]
            assert len(costs) == STEPS * EPOCHS
            # The other worker may have trained the shared variables before this one's
            # first step (a loaded machine starts the processes far apart): then its first
            # epoch is already near the floor, and a low last epoch is what counts.
            assert np.mean(costs[-STEPS:]) < max(0.5 * np.mean(costs[:STEPS]), 0.05)
            assert rep["error"] < rep["initial_error"]
            assert rep["error"] < 0.15

    def test_only_chief_writes(self, cluster):
        """The chief's logdir holds its checkpoints and stats; the other worker's does not exist."""
        chief = cluster["reports"][("worker", 0)]
        other = cluster["reports"][("worker", 1)]
        assert chief["is_chief"]
        assert not other["is_chief"]
        want = {f"model-{STEPS * e}.index" for e in range(1, EPOCHS + 1)} | {"stats.json"}
        assert want <= set(chief["files"])
        assert other["files"] is None
        assert not (cluster["base"] / "worker1").exists()

    def test_global_step_counts_the_chief(self, cluster):
        """The shared global step counts the chief's steps: the checkpoint names match it."""
        chief = cluster["reports"][("worker", 0)]
        assert chief["trainer_global_step"] == STEPS * EPOCHS
        assert chief["global_step"] == STEPS * EPOCHS

    def test_precision(self, cluster):
        """Checkpoints hold float32 variables; in mixed float16 also the loss scale, reported."""
        from towerkit.sessinit import load_checkpoint_vars

        logdir = cluster["base"] / "worker0"
        values = load_checkpoint_vars(str(logdir / f"model-{STEPS * EPOCHS}"))
        assert {v.dtype for v in values.values() if v.dtype.kind == "f"} == {np.dtype(np.float32)}
        stats = json.loads((logdir / "stats.json").read_text())
        if cluster["precision"] == "mixed_float16":
            assert values["loss_scale"] == stats[-1]["loss_scale"] > 0
        else:
            assert "loss_scale" not in values
            assert "loss_scale" not in stats[-1]

    def test_devices_and_copies(self, cluster):
        """Two towers per worker on its logical CPUs; replicated copies are local and equal."""
        rep = cluster["reports"][("worker", 1)]
        assert rep["devices"] == [f"/job:worker/task:1{d}" for d in resolve_devices(2)]
        if cluster["kind"] == "replicated":
            assert "tower0/fc0/W" in rep["local_copies"]
            assert "tower1/fc1/b" in rep["local_copies"]
            assert rep["copies_equal"]
        else:
            assert rep["local_copies"] == []


def _cluster_server(job: str):
    """A one-ps, one-worker cluster's server for `job` in this process (not started)."""
    ports = free_ports(2)
    cluster = tf1.train.ClusterSpec(
        {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    )
    return tf1.train.Server(cluster, job_name=job, task_index=0, start=False)


class TestArguments:
    """Roles and arguments are checked at construction."""

    def test_wrong_role(self):
        """A ps server cannot train; a worker cannot serve parameters."""
        with tf.Graph().as_default():
            ps = _cluster_server("ps")
            with pytest.raises(
                ValueError, match=r"this server is job 'ps', task 0: a 'ps' process"
            ):
                DistributedTrainerParameterServer(1, ps)
            worker = _cluster_server("worker")
            with pytest.raises(ValueError, match=r"serve_parameters runs in a 'ps' process"):
                serve_parameters(worker)

    def test_fail(self):
        """Not a server, or a bad caching device."""
        with pytest.raises(
            TypeError, match=r"'server' must be a tf\.compat\.v1\.train\.Server; got str"
        ):
            DistributedTrainerReplicated(1, "grpc://localhost:1")
        with (
            tf.Graph().as_default(),
            pytest.raises(ValueError, match=r"'caching_device' must be 'cpu' or 'gpu'; got 'tpu'"),
        ):
            DistributedTrainerParameterServer(1, _cluster_server("worker"), caching_device="tpu")

    def test_serve_timeout(self):
        """A ps whose workers never come gives up after its timeout, naming them."""
        with tf.Graph().as_default():
            ps = _cluster_server("ps")
            ps.start()
            with pytest.raises(TimeoutError, match=r"workers \[0\] did not finish within 1 s"):
                serve_parameters(ps, timeout=1, poll_seconds=0.2)
