"""Stopping a child process together with every process it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any

__all__ = ["stop_process_group"]


def stop_process_group(proc: subprocess.Popen[Any], grace: float = 10.0) -> int:
    """Stop `proc` and every process of its group: SIGTERM, then SIGKILL after `grace` seconds.

    `proc` must lead its own process group (started with ``start_new_session=True``),
    as launchers of several processes (``horovodrun``, a parameter server and its
    workers) are: stopping only the launcher would leave its children running. The
    group gets SIGTERM, so each process can clean up; whatever is left after `grace`
    seconds (children may outlive the launcher) gets SIGKILL. A group that has already
    ended is no error.

    Args:
        proc: the group's leader, started with ``start_new_session=True``.
        grace: seconds the group has to end after SIGTERM (>= 0).

    Returns:
        The leader's exit status (negative: the signal that ended it).

    Raises:
        ValueError: `grace` is negative, or `proc` does not lead its own process group.
    """
    if not grace >= 0:
        msg = f"'grace' must be >= 0 seconds; got {grace!r}"
        raise ValueError(msg)
    try:
        leads = proc.poll() is not None or os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:  # ended between the two calls
        leads = True
    if not leads:
        msg = (
            f"process {proc.pid} does not lead its own process group: start it with "
            f"start_new_session=True"
        )
        raise ValueError(msg)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()
