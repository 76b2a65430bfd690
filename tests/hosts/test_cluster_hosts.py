"""The TF-cluster trainers with each task on its own simulated host, from real addresses."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hvd_hosts import ROOT, checkpoint_step, epoch_steps
from simhosts import SimulatedHosts

SCRIPT = ROOT / "libs" / "trainers" / "tests" / "scripts" / "dist_job.py"
STEPS = 5
"""Steps per epoch of the job script."""

START_LIMIT = 300.0
"""Seconds the three tasks may take to start and make their first steps."""

JOB_TIMEOUT = 420.0
"""Seconds a whole 2-epoch job may take."""

BOUND = 90.0
"""Seconds the workers may take to end once the parameter server is killed: a death is
found within the job's timeouts (check every 1 s, dead after 5 s, close within 5 s),
then a failed step and ``after_train``; the rest is headroom for a loaded machine."""

ROLES = [("ps", 0), ("worker", 0), ("worker", 1)]
_ports = itertools.count(23000)


pytestmark = [pytest.mark.timeout(1200), pytest.mark.procs]


class ClusterOnHosts:
    """ps on host 0, worker 0 (the chief) on host 1, worker 1 on host 2; output to files."""

    def __init__(self, hosts: SimulatedHosts, base: Path, trainer: str, epochs: int) -> None:
        port = next(_ports)
        self.base = base
        self.address = {key: f"{hosts.addresses[i]}:{port}" for i, key in enumerate(ROLES)}
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        self.logs = {key: base / f"{key[0]}{key[1]}.log" for key in ROLES}
        self.procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        for index, (role, task) in enumerate(ROLES):
            argv = [*hosts.exec_argv(index), sys.executable, str(SCRIPT), role, str(task)]
            argv += ["--ports", ",".join([str(port)] * 3)]
            argv += ["--hosts", ",".join(hosts.addresses[:3]), "--trainer", trainer]
            argv += ["--logdir-base", str(base), "--max-epoch", str(epochs), "--timeouts", "1,5,5"]
            with open(self.logs[(role, task)], "w") as out:
                self.procs[(role, task)] = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )

    def output(self, key: tuple[str, int]) -> str:
        return self.logs[key].read_text(errors="replace")

    def outputs(self) -> dict:
        return {key: self.output(key)[-3000:] for key in self.procs}

    def report(self, key: tuple[str, int]) -> dict:
        for line in self.output(key).splitlines():
            _, tag, rest = line.partition("DIST-REPORT ")
            if tag:
                return json.loads(rest)
        pytest.fail(f"no report from {key}: {self.output(key)[-3000:]}")

    def wait_until(self, what, limit: float, message: str) -> float:
        start = time.monotonic()
        while not what():
            if time.monotonic() - start > limit:
                self.dump_stacks()
                pytest.fail(f"{message} within {limit:g} s: {self.outputs()}")
            time.sleep(0.5)
        return time.monotonic() - start

    def dump_stacks(self) -> None:
        """Each live process prints its threads' stacks to its output (SIGUSR2)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGUSR2)
        time.sleep(2)

    def ended(self, keys=ROLES) -> bool:
        return all(self.procs[k].poll() is not None for k in keys)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def clusters(hosts, tmp_path):
    made: list[ClusterOnHosts] = []

    def start(trainer: str, epochs: int) -> ClusterOnHosts:
        job = ClusterOnHosts(hosts, tmp_path, trainer, epochs)
        made.append(job)
        return job

    yield start
    for job in made:
        job.stop_all()


@pytest.mark.parametrize("trainer", ["replicated", "ps"])
def test_cluster_across_hosts(clusters, trainer):
    """Two epochs of each cluster trainer: every task exits 0; the chief alone writes;
    the global step counts the chief's steps; stats and checkpoint exact."""
    job = clusters(trainer, 2)
    job.wait_until(job.ended, JOB_TIMEOUT, "the cluster did not finish")
    codes = {k: p.returncode for k, p in job.procs.items()}
    assert codes == {k: 0 for k in ROLES}, job.outputs()
    chief, other = job.report(("worker", 0)), job.report(("worker", 1))
    assert chief["is_chief"]
    assert not other["is_chief"]
    assert chief["global_step"] == chief["trainer_global_step"] == 2 * STEPS
    assert other["files"] is None
    logdir = job.base / "worker0"
    assert epoch_steps(logdir) == [(1, STEPS), (2, 2 * STEPS)]
    assert checkpoint_step(logdir) == 2 * STEPS
    assert sorted(job.report(("ps", 0))["done"]) == [0, 1]


def test_parameter_server_killed(clusters):
    """SIGKILL the ps (host 0) mid-training: both workers end within BOUND, naming it by address.

    The chief's log directory keeps whole checkpoints and a readable stats.json whose
    epochs run from 1 without a gap.
    """
    job = clusters("ps", 100000)
    logdir = job.base / "worker0"

    def saved() -> bool:
        if any(job.procs[k].poll() is not None for k in ROLES):
            pytest.fail(f"a task ended before the kill: {job.outputs()}")
        return logdir.is_dir() and any(f.startswith("model-") for f in os.listdir(logdir))

    job.wait_until(saved, START_LIMIT, "the chief did not save a first checkpoint")
    os.killpg(job.procs[("ps", 0)].pid, signal.SIGKILL)
    job.procs[("ps", 0)].wait()
    workers = [("worker", 0), ("worker", 1)]
    took = job.wait_until(lambda: job.ended(workers), BOUND, "the workers did not end")
    assert took < BOUND
    lost = re.compile(rf"^.*job 'ps' task 0 \({re.escape(job.address[('ps', 0)])}\).*$", re.M)
    for role, task in workers:
        out = job.output((role, task))
        assert job.procs[(role, task)].returncode != 0, out
        lines = lost.findall(out)
        assert lines, out[-3000:]
        assert lines[-1].startswith(f"towerkit.trainers.TaskLostError: worker {task} lost")
    steps = epoch_steps(logdir)
    assert [e for e, _ in steps] == list(range(1, len(steps) + 1))
    assert all(s == e * STEPS for e, s in steps)
    assert checkpoint_step(logdir) in {s for _, s in steps} | {len(steps) * STEPS + STEPS}
