"""Runners: how the suite gets a trainer's recorded runs, in this process or from a horovod job."""

from __future__ import annotations

import abc
import importlib.util
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from towerkit.callbacks.plumbing import stop_process_group
from towerkit.conformance._entries import TrainerEntry
from towerkit.conformance._errors import LaunchError
from towerkit.conformance._result import RunResult
from towerkit.conformance._scenario import Scenario, scenario_to_data

logger = logging.getLogger("towerkit.conformance")

HOROVOD_SKIP = (
    "horovod not installed here: nox -s conformance builds it for the shipped rows, and "
    "with --horovod for rows of your own (elsewhere: the install-horovod tool)"
)
"""The skip reason of horovod rows where horovod cannot be imported."""

JOB_TIMEOUT = 480.0
"""Seconds a multi-process job may take before it is stopped and reported as failed."""


def horovod_available() -> bool:
    """Whether ``horovod.tensorflow`` can be found (without importing TensorFlow's ops)."""
    try:
        return importlib.util.find_spec("horovod.tensorflow") is not None
    except (ImportError, ValueError):
        return False


class InProcessRunner:
    """Runs scenarios with one trainer in this process; results are cached per scenario."""

    in_process = True

    def __init__(self, entry: TrainerEntry, workdir: Path) -> None:
        self.entry = entry
        self.workdir = workdir
        self._cache: dict[Scenario, list[RunResult]] = {}

    def run(self, scenario: Scenario, *, cache: bool = True) -> list[RunResult]:
        """The results of `scenario` (one: this process is rank 0)."""
        from towerkit.conformance._execute import execute

        if cache and scenario in self._cache:
            return self._cache[scenario]
        results = [execute(self.entry, scenario, self.workdir)]
        if cache:
            self._cache[scenario] = results
        return results


class JobRunner(abc.ABC):
    """Runs scenarios in a job of `processes` worker processes on this machine.

    The first request launches one job with every planned scenario, in order; each
    process runs them all with its own trainer and writes its results to a file,
    which this process reads. A scenario not planned gets a job of its own.
    Subclasses say how a job starts (`HorovodRunner`, `ClusterRunner`).
    """

    in_process = False
    kind = "job"

    def __init__(
        self,
        entry: TrainerEntry,
        workdir: Path,
        planned: Callable[[], Sequence[Scenario]],
        processes: int,
        timeout: float = JOB_TIMEOUT,
    ) -> None:
        self.entry = entry
        self.workdir = workdir
        self._planned = planned
        self.processes = processes
        self.timeout = timeout
        self._results: dict[Scenario, list[RunResult]] = {}
        self._launched = 0
        self._failure: str | None = None

    def run(self, scenario: Scenario, *, cache: bool = True) -> list[RunResult]:
        """The results of `scenario`, one per process, rank 0 first.

        Raises:
            LaunchError: the job failed or timed out; the message has the processes' output.
        """
        del cache
        if scenario not in self._results:
            if self._failure is not None and self._launched == 1:
                raise LaunchError(self._failure)
            batch = [] if self._launched else list(self._planned())
            if scenario not in batch:
                batch.append(scenario)
            self._launch(batch)
        return self._results[scenario]

    def _job(self, scenarios: list[Scenario], out_dir: Path) -> dict[str, Any]:
        return {
            "entry": {
                "name": self.entry.name,
                "factory": self.entry.factory_path(),
                "capabilities": attrs.asdict(self.entry.capabilities),
            },
            "scenarios": [scenario_to_data(s) for s in scenarios],
            "workdir": str(self.workdir / f"logs{self._launched}"),
            "out": str(out_dir),
        }

    @abc.abstractmethod
    def _start(self, job_file: Path, job: dict[str, Any]) -> tuple[int, str, float]:
        """Start the processes of `job`; return exit status, output and seconds."""

    def _launch(self, scenarios: list[Scenario]) -> None:
        self._launched += 1
        job_dir = self.workdir / f"job{self._launched}"
        out_dir = job_dir / "results"
        out_dir.mkdir(parents=True)
        job = self._job(scenarios, out_dir)
        job_file = job_dir / "job.json"
        job_file.write_text(json.dumps(job), encoding="utf-8")
        code, output, seconds = self._start(job_file, job)
        logger.info(
            "%s job %d: %d scenarios in %.1f s", self.kind, self._launched, len(scenarios), seconds
        )
        per_rank: list[list[dict[str, Any]]] = []
        for rank in range(self.processes):
            path = out_dir / f"rank{rank}.json"
            per_rank.append(json.loads(path.read_text(encoding="utf-8")) if path.is_file() else [])
        done = min(len(r) for r in per_rank)
        for i, scenario in enumerate(scenarios[:done]):
            self._results[scenario] = [RunResult.from_data(r[i]) for r in per_rank]
        if code != 0 or done < len(scenarios):
            tail = "\n".join(output.splitlines()[-60:])
            missing = [s.name for s in scenarios[done:]]
            self._failure = (
                f"the {self.kind} job of {self.entry.name} ({self.processes} processes) exited "
                f"with status {code} after {seconds:.0f} s; scenarios without results: "
                f"{missing}. The output ends with:\n{tail}"
            )
            if done < len(scenarios):
                raise LaunchError(self._failure)


class HorovodRunner(JobRunner):
    """A job of `processes` horovod ranks over gloo on localhost (``horovodrun --gloo``)."""

    kind = "horovod"

    def _start(self, job_file: Path, job: dict[str, Any]) -> tuple[int, str, float]:
        del job
        return run_horovod_job(
            [sys.executable, "-m", "towerkit.conformance._worker", str(job_file)],
            processes=self.processes,
            timeout=self.timeout,
            cwd=Path.cwd(),
        )


class ClusterRunner(JobRunner):
    """A TensorFlow cluster on 127.0.0.1: one parameter server and `processes` workers."""

    kind = "tf-distributed"

    def _job(self, scenarios: list[Scenario], out_dir: Path) -> dict[str, Any]:
        job = super()._job(scenarios, out_dir)
        ports = free_ports(1 + self.processes)
        job["cluster"] = {
            "ps": [f"127.0.0.1:{ports[0]}"],
            "worker": [f"127.0.0.1:{p}" for p in ports[1:]],
        }
        return job

    def _start(self, job_file: Path, job: dict[str, Any]) -> tuple[int, str, float]:
        del job
        return run_cluster_job(
            job_file, workers=self.processes, timeout=self.timeout, cwd=Path.cwd()
        )


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 right now."""
    import socket

    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": _python_path(),
    }


def run_cluster_job(
    job_file: Path, *, workers: int, timeout: float, cwd: Path
) -> tuple[int, str, float]:
    """Run the parameter server and `workers` worker processes of a cluster job.

    Each process runs in its own process group; once every worker has exited (or
    after `timeout` seconds) the parameter server and any worker still running are
    stopped, so the job never outlives the call.

    Returns:
        The largest worker exit status (-1 after a timeout), the processes' output
        and the seconds taken.
    """
    command = [sys.executable, "-m", "towerkit.conformance._cluster", str(job_file)]
    logs = job_file.parent
    started = time.monotonic()
    procs: list[tuple[str, subprocess.Popen[bytes], Any]] = []
    try:
        for role, index in [("ps", 0), *(("worker", i) for i in range(workers))]:
            log = open(logs / f"{role}{index}.log", "w", encoding="utf-8")  # noqa: SIM115
            proc = subprocess.Popen(
                [*command, role, str(index)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd=cwd,
                start_new_session=True,
            )
            procs.append((f"{role}{index}", proc, log))
        deadline = started + timeout
        codes = []
        for name, proc, _ in procs[1:]:
            try:
                codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(-1)
                logger.error("cluster job: %s still running after %g s", name, timeout)
    finally:
        for _, proc, log in procs:
            stop_process_group(proc, grace=15.0)
            log.close()
    output = []
    for name, _, _ in procs:
        text = (logs / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        output.append(f"--- {name} ---\n{text}")
    code = -1 if -1 in codes else max(codes, default=0)
    return code, "\n".join(output), time.monotonic() - started


def _python_path() -> str:
    """The directories of this process's ``sys.path``, so the job imports what this process does."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    extra = os.environ.get("PYTHONPATH")
    if extra:
        paths.append(extra)
    return os.pathsep.join(dict.fromkeys(paths))


def run_horovod_job(
    command: Sequence[str], *, processes: int, timeout: float, cwd: Path
) -> tuple[int, str, float]:
    """Run `command` as `processes` horovod ranks over gloo on localhost.

    Uses the trainers lib's `launch_horovod_job`: past `timeout` seconds the job's
    process group is stopped, so a hanging job never hangs the suite.

    Returns:
        The exit status (-1 after a timeout), the launcher's output and the seconds taken.
    """
    from towerkit.trainers import launch_horovod_job

    job = launch_horovod_job(
        command,
        processes,
        timeout=timeout,
        cwd=cwd,
        env={
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "60"),
            "PYTHONPATH": _python_path(),
        },
    )
    return job.returncode, job.output, job.seconds
