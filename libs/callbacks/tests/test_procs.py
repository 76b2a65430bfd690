"""`stop_process_group`: a launcher and every process it started, stopped together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from towerkit.callbacks.plumbing import stop_process_group

pytestmark = pytest.mark.procs

LAUNCHER = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    if sys.argv[1] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2]])
    print(child.pid, flush=True)
    time.sleep(120)
    """
)
"""A launcher that starts one child, prints the child's pid and waits."""

CHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
"""A child that ignores SIGTERM: only SIGKILL stops it."""


def start(mode: str, child: str = CHILD) -> tuple[subprocess.Popen, int]:
    """Start a launcher in its own group; return it and its child's pid."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, mode, child],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still there (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pgid: int, seconds: float = 10.0) -> bool:
    """Wait until the group has no process left; whether it got there."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return False


class TestStopProcessGroup:
    """The leader and its children end; SIGTERM first, SIGKILL for what is left."""

    def test_stops_leader_and_child(self):
        """A launcher that obeys SIGTERM ends by it; its stubborn child is killed after the grace."""
        proc, child = start("polite")
        started = time.monotonic()
        code = stop_process_group(proc, grace=5.0)
        assert code == -signal.SIGTERM
        assert time.monotonic() - started < 5.0
        assert wait_gone(proc.pid), f"child {child} outlived its launcher"

    def test_stubborn_leader_gets_sigkill(self):
        """A launcher that ignores SIGTERM is killed once the grace is over."""
        proc, _ = start("stubborn")
        started = time.monotonic()
        code = stop_process_group(proc, grace=0.5)
        assert code == -signal.SIGKILL
        assert time.monotonic() - started >= 0.5
        assert wait_gone(proc.pid)

    def test_ended_group(self):
        """A group that has already ended is no error; the leader's status comes back."""
        proc = subprocess.Popen(
            [sys.executable, "-c", "raise SystemExit(3)"], start_new_session=True
        )
        proc.wait()
        assert stop_process_group(proc, grace=0.1) == 3

    def test_fail(self):
        """A negative grace, or a process outside its own group, is rejected."""
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            with pytest.raises(ValueError, match=r"'grace' must be >= 0 seconds; got -1"):
                stop_process_group(proc, grace=-1)
            with pytest.raises(ValueError, match=r"does not lead its own process group"):
                stop_process_group(proc)
        finally:
            proc.kill()
            proc.wait()
