"""Runners: how the suite gets a trainer's recorded runs, in this process or from a horovod job."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from towerkit.conformance._entries import TrainerEntry
from towerkit.conformance._errors import LaunchError
from towerkit.conformance._result import RunResult
from towerkit.conformance._scenario import Scenario, scenario_to_data

logger = logging.getLogger("towerkit.conformance")

HOROVOD_SKIP = "horovod not installed: run nox -s horovod"
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


class HorovodRunner:
    """Runs scenarios in a horovod job of `processes` ranks on this machine (gloo, loopback).

    The first request launches one job with every planned scenario, in order; each
    rank runs them all with its own trainer and writes its results to a file, which
    this process reads. A scenario not planned gets a job of its own.
    """

    in_process = False

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
        """The results of `scenario`, one per rank, rank 0 first.

        Raises:
            LaunchError: the job failed or timed out; the message has the launcher's output.
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

    def _launch(self, scenarios: list[Scenario]) -> None:
        self._launched += 1
        job_dir = self.workdir / f"job{self._launched}"
        out_dir = job_dir / "results"
        out_dir.mkdir(parents=True)
        job = {
            "entry": {
                "name": self.entry.name,
                "factory": self.entry.factory_path(),
                "capabilities": attrs.asdict(self.entry.capabilities),
            },
            "scenarios": [scenario_to_data(s) for s in scenarios],
            "workdir": str(self.workdir / "logs"),
            "out": str(out_dir),
        }
        job_file = job_dir / "job.json"
        job_file.write_text(json.dumps(job), encoding="utf-8")
        code, output, seconds = run_horovod_job(
            [sys.executable, "-m", "towerkit.conformance._worker", str(job_file)],
            processes=self.processes,
            timeout=self.timeout,
            cwd=Path.cwd(),
        )
        logger.info(
            "horovod job %d: %d scenarios in %.1f s", self._launched, len(scenarios), seconds
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
                f"the horovod job of {self.entry.name} ({self.processes} processes) exited with "
                f"status {code} after {seconds:.0f} s; scenarios without results: {missing}. "
                f"The launcher's output ends with:\n{tail}"
            )
            if done < len(scenarios):
                raise LaunchError(self._failure)


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

    The launcher runs in its own process group; past `timeout` seconds the group is
    stopped, so a hanging job never hangs the suite.

    Returns:
        The exit status (-1 after a timeout), the launcher's output and the seconds taken.
    """
    argv = [sys.executable, "-m", "horovod.runner.launch", "-np", str(processes), "--gloo"]
    argv += ["-H", f"localhost:{processes}", *command]
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "HOROVOD_GLOO_TIMEOUT_SECONDS": os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "60"),
        "PYTHONPATH": _python_path(),
    }
    started = time.monotonic()
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            out += f"\n[stopped after {timeout:g} s]"
            code = -1
    return code, out, time.monotonic() - started
