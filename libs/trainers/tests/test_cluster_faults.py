"""A task of a real 1-ps, 2-worker cluster on 127.0.0.1 dies (SIGKILL) or freezes (SIGSTOP).

The others end, naming it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import prefork
import pytest
from test_distributed import SCRIPT, free_ports

from towerkit.towers import visible_gpu_count

pytestmark = [
    pytest.mark.procs,
    pytest.mark.timeout(600),
]  # timeout: a cluster may take START_LIMIT (300 s) to start

TIMEOUTS = "1,5,5"
"""The job's ClusterTimeouts: check every 1 s, dead after 5 s, close the session within 5 s."""

BOUND = 90.0
"""Seconds the surviving processes may take to end (or to report) once a task is killed.

Within the timeouts above a death is found in about 6 s; a failed step, ``after_train``
and the bounded close add some more; the rest is headroom for a loaded machine.
"""

START_LIMIT = 300.0
"""Seconds the three processes may take to start and make their first step."""

ROLES = [("ps", 0), ("worker", 0), ("worker", 1)]


class Cluster:
    """The three processes of a job that would train for 100,000 epochs, output to files."""

    def __init__(
        self,
        tmp_path: Path,
        trainer: str = "ps",
        roles=ROLES,
        timeouts: str = TIMEOUTS,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.ports = free_ports(3)
        self.address = dict(zip(ROLES, (f"127.0.0.1:{p}" for p in self.ports)))
        self.logs = {key: tmp_path / f"{key[0]}{key[1]}.log" for key in ROLES}
        self.procs = {}
        self._args = (tmp_path, trainer, timeouts, extra)
        for role, task in roles:
            self.start(role, task)

    def start(self, role: str, task: int, ports: list[int] | None = None) -> None:
        """Start one task (with `ports`: the cluster as it is told of it)."""
        tmp_path, trainer, timeouts, extra = self._args
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, str(SCRIPT), role, str(task)]
        argv += ["--ports", ",".join(map(str, ports or self.ports)), "--trainer", trainer]
        argv += ["--logdir-base", str(tmp_path), "--max-epoch", "100000"]
        argv += ["--timeouts", timeouts, *extra]
        with open(self.logs[(role, task)], "w") as out:
            self.procs[(role, task)] = prefork.popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def output(self, key: tuple[str, int]) -> str:
        return self.logs[key].read_text(errors="replace")

    def outputs(self) -> dict:
        return {key: self.output(key) for key in self.procs}

    def wait_until(self, what, limit: float, message: str) -> None:
        end = time.monotonic() + limit
        while not what():
            if time.monotonic() > end:
                self.dump_stacks()
                pytest.fail(f"{message} within {limit:g} s: {self.outputs()}")
            time.sleep(0.5)

    def dump_stacks(self) -> None:
        """Each live process prints its threads' stacks to its output (SIGUSR2)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGUSR2)
        time.sleep(2)

    def training(self) -> bool:
        """Both workers made a step; a process that already ended fails the test."""
        ended = [k for k, p in self.procs.items() if p.poll() is not None]
        if ended:
            pytest.fail(f"{ended} ended before the kill: {self.outputs()}")
        return all("DIST-TRAINING" in self.output(("worker", i)) for i in (0, 1))

    def kill(self, key: tuple[str, int]) -> None:
        os.killpg(self.procs[key].pid, signal.SIGKILL)
        self.procs[key].wait()

    def freeze(self, key: tuple[str, int]) -> None:
        """SIGSTOP a task: its sockets stay open and its kernel accepts connections."""
        os.killpg(self.procs[key].pid, signal.SIGSTOP)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def cluster(tmp_path):
    gpus = visible_gpu_count()
    if 0 < gpus < 2:
        pytest.skip(f"2 towers per worker need 2 visible GPUs, or none; {gpus} visible")
    made = []

    def start(trainer: str = "ps", timeouts: str = TIMEOUTS, extra=()) -> Cluster:
        job = Cluster(tmp_path, trainer, timeouts=timeouts, extra=extra)
        made.append(job)
        job.wait_until(job.training, START_LIMIT, "the workers did not start training")
        return job

    yield start
    for job in made:
        job.stop_all()


def naming(job: str, index: int, address: str) -> re.Pattern[str]:
    """A line of output that names the task lost: its job, index and address."""
    return re.compile(rf"^.*job '{job}' task {index} \({re.escape(address)}\).*$", re.MULTILINE)


def one_line(out: str, pattern: re.Pattern[str]) -> str:
    found = pattern.findall(out)
    assert found, out
    return found[-1]


def workers_name_the_lost_ps(job: Cluster, what: str) -> list[str]:
    """Both workers end within BOUND, failed, each with a `TaskLostError` line naming the ps."""
    workers = [("worker", 0), ("worker", 1)]
    job.wait_until(
        lambda: all(job.procs[w].poll() is not None for w in workers),
        BOUND,
        f"the workers did not end after the parameter server was {what}",
    )
    lost = naming("ps", 0, job.address[("ps", 0)])
    lines = []
    for role, task in workers:
        out = job.output((role, task))
        assert job.procs[(role, task)].returncode != 0, out
        line = one_line(out, lost)
        assert line.startswith(f"towerkit.trainers.TaskLostError: worker {task} lost")
        assert "a parameter server" in line
        lines.append(line)
    return lines


@pytest.mark.slow
class TestTaskKilled:
    """SIGKILL one task mid-training: the others end within BOUND, one line naming it."""

    @pytest.mark.parametrize("trainer", ["ps", "replicated"])
    def test_parameter_server(self, cluster, trainer):
        """Both workers stop (no hang in a step or in Session.close) with TaskLostError."""
        job = cluster(trainer)
        job.kill(("ps", 0))
        workers_name_the_lost_ps(job, "killed")

    def test_parameter_server_between_steps(self, cluster):
        """Killed while no step runs: the loop stops, after_train fails, TaskLostError wins.

        The workers pause after epoch 2; the ps is killed meanwhile. No step fails: the
        watch stops the loop, the session is closed for after_train, and the callbacks
        that read the variables there fail; the error raised still names the ps.
        """
        job = cluster("replicated", extra=("--pause-at-epoch-end", "40"))
        workers = [("worker", 0), ("worker", 1)]
        job.wait_until(
            lambda: all("DIST-PAUSED" in job.output(w) for w in workers),
            START_LIMIT,
            "the workers did not pause after epoch 2",
        )
        job.kill(("ps", 0))
        for line in workers_name_the_lost_ps(job, "killed"):
            assert "training stopped at epoch 2" in line
        for role, task in workers:
            assert "after_train of" in job.output((role, task))

    def test_chief(self, cluster):
        """The other worker stops instead of training on unsaved; the ps stops waiting for it."""
        job = cluster()
        job.kill(("worker", 0))
        rest = [("ps", 0), ("worker", 1)]
        job.wait_until(
            lambda: all(job.procs[k].poll() is not None for k in rest),
            BOUND,
            "the ps and worker 1 did not end after the chief was killed",
        )
        lost = naming("worker", 0, job.address[("worker", 0)])
        other = job.output(("worker", 1))
        assert job.procs[("worker", 1)].returncode != 0, other
        line = one_line(other, lost)
        assert line.startswith("towerkit.trainers.TaskLostError: worker 1 lost the chief")
        assert "only the chief saves" in line
        ps = job.output(("ps", 0))
        assert job.procs[("ps", 0)].returncode != 0, ps
        line = one_line(ps, lost)
        assert line.startswith("towerkit.trainers.TaskLostError: ps task 0: lost")
        assert "the workers done: [1]" in line, f"worker 1's output:\n{other}\nthe ps's:\n{ps}"

    def test_other_worker(self, cluster):
        """The ps names the dead worker at once and keeps serving the chief, which trains on."""
        job = cluster()
        job.kill(("worker", 1))
        lost = naming("worker", 1, job.address[("worker", 1)])
        job.wait_until(
            lambda: lost.search(job.output(("ps", 0))) is not None,
            BOUND,
            "the ps did not report worker 1 dead",
        )
        assert "is dead" in one_line(job.output(("ps", 0)), lost)
        assert job.procs[("ps", 0)].poll() is None
        assert job.procs[("worker", 0)].poll() is None
        assert not lost.search(job.output(("worker", 0)))


@pytest.mark.slow
class TestTaskFrozen:
    """SIGSTOP one task mid-training: it answers nothing, though it still accepts connections."""

    def test_parameter_server(self, cluster):
        """At the operation deadline (20 s here) both workers stop, naming the frozen ps.

        The step in flight blocks until its deadline (TensorFlow cannot cancel a call
        to a server that does not answer); the watch has found the ps dead by then.
        """
        job = cluster("ps", timeouts=f"{TIMEOUTS},600,20")
        job.freeze(("ps", 0))
        for line in workers_name_the_lost_ps(job, "stopped"):
            assert "unreachable for" in line


@pytest.mark.slow
def test_chief_never_starts(tmp_path):
    """Without a chief, worker 1 stops waiting for it and the ps for both, naming them."""
    if 0 < visible_gpu_count() < 2:
        pytest.skip("2 towers per worker need 2 visible GPUs, or none")
    roles = [("ps", 0), ("worker", 1)]
    job = Cluster(tmp_path, roles=roles, timeouts="1,5,5,20")
    try:
        job.wait_until(
            lambda: all(p.poll() is not None for p in job.procs.values()),
            START_LIMIT,
            "the ps and worker 1 did not end without a chief",
        )
        chief = naming("worker", 0, job.address[("worker", 0)])
        other = job.output(("worker", 1))
        assert job.procs[("worker", 1)].returncode != 0, other
        line = one_line(other, chief)
        assert line.endswith("died before initializing the variables: never came up within 20 s")
        ps = job.output(("ps", 0))
        assert job.procs[("ps", 0)].returncode != 0, ps
        assert one_line(ps, chief).startswith("towerkit.trainers.TaskLostError: ps task 0")
        assert naming("worker", 1, job.address[("worker", 1)]).search(ps), ps
    finally:
        job.stop_all()


@pytest.mark.slow
def test_parameter_server_lost_while_a_worker_starts(tmp_path):
    """Worker 1 waits for a chief that never comes; the ps dies meanwhile: worker 1 ends
    within BOUND, naming the ps, before its first step (its session is closed)."""
    if 0 < visible_gpu_count() < 2:
        pytest.skip("2 towers per worker need 2 visible GPUs, or none")
    roles = [("ps", 0), ("worker", 1)]
    job = Cluster(tmp_path, roles=roles, timeouts="1,5,5,600", extra=("--log-info",))
    try:
        job.wait_until(
            lambda: "waiting for the chief to initialize" in job.output(("worker", 1)),
            START_LIMIT,
            "worker 1 did not start waiting for the chief",
        )
        job.kill(("ps", 0))
        job.wait_until(
            lambda: job.procs[("worker", 1)].poll() is not None,
            BOUND,
            "worker 1 did not end after the parameter server was killed",
        )
        out = job.output(("worker", 1))
        assert job.procs[("worker", 1)].returncode != 0, out
        line = one_line(out, naming("ps", 0, job.address[("ps", 0)]))
        assert line.startswith("towerkit.trainers.TaskLostError: worker 1 lost a parameter server")
        assert line.endswith("before the first step (the session was starting)"), line
    finally:
        job.stop_all()


@pytest.mark.slow
def test_parameter_server_lost_before_a_late_worker_reached_it(tmp_path):
    """The chief trains; worker 1 starts late and never reaches its parameter server
    (told of a port where nothing serves: as one killed before worker 1 reached it):
    the chief being past its start proves the ps was up, so worker 1 ends within BOUND
    (``dead_after``, not ``start_within``: 600 s), naming the ps."""
    if 0 < visible_gpu_count() < 2:
        pytest.skip("2 towers per worker need 2 visible GPUs, or none")
    job = Cluster(tmp_path, roles=[("ps", 0), ("worker", 0)], timeouts="1,5,5,600")
    try:
        job.wait_until(
            lambda: "DIST-TRAINING" in job.output(("worker", 0)),
            START_LIMIT,
            "the chief did not start training",
        )
        gone = free_ports(1)[0]
        job.start("worker", 1, ports=[gone, *job.ports[1:]])
        job.wait_until(
            lambda: job.procs[("worker", 1)].poll() is not None,
            START_LIMIT,  # its own start (imports, graph) on a loaded machine, then the bound
            "worker 1 did not end though its parameter server never came up",
        )
        out = job.output(("worker", 1))
        assert job.procs[("worker", 1)].returncode != 0, out
        assert job.procs[("worker", 0)].poll() is None, job.output(("worker", 0))
        line = one_line(out, naming("ps", 0, f"127.0.0.1:{gone}"))
        assert line.startswith("towerkit.trainers.TaskLostError: worker 1 lost a parameter server")
        assert "after the job went past its start" in line, line
        assert line.endswith("before the first step (the session was starting)"), line
        waited = re.search(r"unreachable for (\d+) s after the job", line)
        assert waited is not None, line
        assert int(waited.group(1)) < BOUND, line
    finally:
        job.stop_all()


class TestPreempted:
    """SIGTERM to the worker that is not the chief: every process ends cleanly, the chief saves."""

    def test_other_worker_signalled(self, cluster):
        """Both workers stop with status 143 within BOUND; the chief's checkpoint has its step."""
        job = cluster()
        os.kill(job.procs[("worker", 1)].pid, signal.SIGTERM)
        job.wait_until(
            lambda: all(p.poll() is not None for p in job.procs.values()),
            BOUND,
            "the cluster did not end after worker 1 was sent SIGTERM",
        )
        outputs = job.outputs()
        codes = {key: proc.returncode for key, proc in job.procs.items()}
        assert codes == {("ps", 0): 0, ("worker", 0): 143, ("worker", 1): 143}, outputs
        chief, other = outputs[("worker", 0)], outputs[("worker", 1)]
        assert "SIGTERM: every process of the job stops after a step they agree on" in other
        assert "another worker of the cluster was sent a preemption signal" in chief
        saved = re.search(r"preempted: saved at global step (\d+) \(epoch (\d+)", chief)
        assert saved, chief
        step = int(saved.group(1))
        logdir = job.logs[("worker", 0)].parent / "worker0"
        assert (logdir / f"model-{step}.index").exists(), sorted(os.listdir(logdir))
        positions = (logdir / "positions.json").read_text()
        assert f'"step": {step}, "epoch": {saved.group(2)}' in positions, positions
        assert not (job.logs[("worker", 1)].parent / "worker1").exists()
