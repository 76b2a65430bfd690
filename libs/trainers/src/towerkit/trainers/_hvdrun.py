"""Launching a horovod job on this machine with a bounded wall time.

A horovod rank that is alive but never joins a collective makes the others wait
forever; ``horovodrun`` itself has no overall deadline. `launch_horovod_job` runs the
launcher in its own process group and stops the whole group past a timeout, so a
script, a test or a CI job that starts horovod training always ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

import attrs

from towerkit.callbacks import stop_process_group


@attrs.frozen
class HorovodJob:
    """What a finished (or stopped) horovod job left.

    Attributes:
        returncode: the launcher's exit status; -1 when the job was stopped at the timeout.
        output: the launcher's standard output and error (every rank's lines, prefixed
            with the rank by horovod), plus a last line saying so when it was stopped.
        seconds: the wall time of the job.
        timed_out: whether the job was stopped at the timeout.
    """

    returncode: int
    output: str
    seconds: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        """Whether every rank exited with status 0."""
        return self.returncode == 0 and not self.timed_out


def horovod_launch_argv(
    command: Sequence[str], processes: int, *, python: str | None = None
) -> list[str]:
    """The ``horovodrun`` command line for `processes` local ranks over gloo.

    >>> print(*horovod_launch_argv(["train.py"], 2, python="py"))
    py -m horovod.runner.launch -np 2 --gloo -H localhost:2 train.py

    Raises:
        ValueError: `processes` is not a positive int, or `command` is empty.
    """
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        msg = f"'processes' must be an int >= 1; got {processes!r}"
        raise ValueError(msg)
    command = [str(c) for c in command]
    if not command:
        msg = "'command' must name the program each rank runs; got an empty command"
        raise ValueError(msg)
    exe = python or sys.executable
    head = [exe, "-m", "horovod.runner.launch", "-np", str(processes), "--gloo"]
    return [*head, "-H", f"localhost:{processes}", *command]


def launch_horovod_job(
    command: Sequence[str],
    processes: int = 2,
    *,
    timeout: float,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    gloo_timeout: float = 60.0,
    grace: float = 15.0,
) -> HorovodJob:
    """Run `command` as `processes` horovod ranks over gloo on localhost, within `timeout`.

    The launcher (``python -m horovod.runner.launch``, i.e. ``horovodrun``) runs in a
    new process group. Past `timeout` seconds the group gets SIGTERM, and SIGKILL
    `grace` seconds later; the job then counts as failed (``returncode == -1``).

    Args:
        command: the program and arguments each rank runs, e.g. ``[sys.executable,
            "train.py"]``.
        processes: how many ranks.
        timeout: the most seconds the whole job may take.
        cwd: the working directory of the job.
        env: variables added to this process's environment for the job.
        gloo_timeout: ``HOROVOD_GLOO_TIMEOUT_SECONDS`` unless `env` or the environment
            sets it: how long gloo waits for a rank at rendezvous and in collectives.
        grace: seconds between SIGTERM and SIGKILL when stopping.

    Returns:
        A `HorovodJob`.

    Raises:
        ValueError: bad `processes`, `timeout` or `command`.
        FileNotFoundError: `cwd` does not exist.
    """
    argv = horovod_launch_argv(command, processes)
    if not timeout > 0:
        msg = f"'timeout' must be > 0 seconds; got {timeout!r}"
        raise ValueError(msg)
    if cwd is not None and not os.path.isdir(cwd):
        msg = f"'cwd' {os.fspath(cwd)!r} is not a directory"
        raise FileNotFoundError(msg)
    full_env = {
        "HOROVOD_GLOO_TIMEOUT_SECONDS": f"{gloo_timeout:g}",
        **os.environ,
        **(env or {}),
    }
    started = time.monotonic()
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process_group(proc, grace)
            out, _ = proc.communicate()
            out += f"\n[horovod job stopped after {timeout:g} s: a rank never finished]"
            return HorovodJob(-1, out, time.monotonic() - started, True)
    return HorovodJob(proc.returncode, out, time.monotonic() - started, False)
