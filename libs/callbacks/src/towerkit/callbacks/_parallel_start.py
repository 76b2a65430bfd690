"""Before a pool starts: the machine's room for its workers, and a main module that would re-run.

Under ``spawn`` and ``forkserver`` multiprocessing prepares each worker by importing
the main module (the training script, as ``__mp_main__``: what is under
``if __name__ == "__main__":`` does not run). A script that trains at its top level,
without that guard, would train again in every worker; `unguarded_main_line` finds
it in this process, before any worker starts, from the bytecode that runs (not the
file, which may have been edited since).
"""

from __future__ import annotations

import contextlib
import dis
import os
import sys
import threading
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

from towerkit.callbacks._parallel_core import StartLimit, room_for_workers

__all__ = ["machine_limits", "unguarded_main_line"]

FDS_PER_WORKER = 3
"""Open files the pool's process holds per worker: its pipe's read end and its process
sentinel (a third, the pipe's write end, while it starts)."""

TASKS_PER_WORKER = 2
"""Tasks (threads) a worker runs: its main thread and the one watching its parent."""

RESERVE = 64
"""Files and tasks left free for the training process itself (TensorFlow's threads, its
checkpoints and event files)."""


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _tasks_running() -> int | None:
    """Tasks (threads) of the whole system, from ``/proc/loadavg`` (Linux)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return None


def _open_files() -> int | None:
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/self/fd"))
    return None


def _cgroup_pids() -> tuple[str, int, int] | None:
    """The cgroup (v2) task limit of this process and the tasks in it, where there is one."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            base = os.path.join("/sys/fs/cgroup", line[3:].lstrip("/"))
            limit = _read_int(os.path.join(base, "pids.max"))
            current = _read_int(os.path.join(base, "pids.current"))
            if limit is not None and current is not None:
                return base, limit, current
    return None


def machine_limits() -> list[StartLimit]:
    """The limits of this machine and process on a pool's workers (Linux; fewer elsewhere)."""
    try:
        import resource
    except ImportError:  # Windows: none of these limits
        return []
    limits = []
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = _open_files()
    if soft != resource.RLIM_INFINITY and in_use is not None:
        room = room_for_workers(soft, in_use, FDS_PER_WORKER, RESERVE)
        limits.append(StartLimit(what=f"open files: ulimit -n {soft}, {in_use} open", workers=room))
    tasks = _tasks_running()
    if tasks is not None:
        for name, path in (
            ("kernel.pid_max", "/proc/sys/kernel/pid_max"),
            ("kernel.threads-max", "/proc/sys/kernel/threads-max"),
        ):
            value = _read_int(path)
            if value is not None:
                room = room_for_workers(value, tasks, TASKS_PER_WORKER, RESERVE)
                limits.append(
                    StartLimit(what=f"{name} {value}, {tasks} tasks running", workers=room)
                )
        nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if nproc != resource.RLIM_INFINITY and os.geteuid() != 0:
            room = room_for_workers(nproc, tasks, TASKS_PER_WORKER, RESERVE)
            what = f"processes: ulimit -u {nproc}, {tasks} tasks running"
            limits.append(StartLimit(what=what, workers=room))
    cgroup = _cgroup_pids()
    if cgroup is not None:
        base, limit, current = cgroup
        room = room_for_workers(limit, current, TASKS_PER_WORKER, RESERVE)
        what = f"cgroup {base}/pids.max {limit}, {current} tasks in it"
        limits.append(StartLimit(what=what, workers=room))
    return limits


def guarded_offsets(code: CodeType) -> list[tuple[int, int]]:
    r"""The bytecode offsets of `code` (a module's) run only under ``if __name__ == "__main__":``.

    Read from the code object itself, not from its file: a script edited while it runs
    is judged by the code that runs.

    Examples:
        >>> code = compile("x = 1\nif __name__ == '__main__':\n    x = 2\n", "s", "exec")
        >>> [start < end for start, end in guarded_offsets(code)]
        [True]
        >>> guarded_offsets(compile("x = 1\n", "s", "exec"))
        []
    """
    found = []
    skipped = {"TO_BOOL", "CACHE", "NOP", "EXTENDED_ARG"}  # between them on some versions
    ops = [op for op in dis.get_instructions(code) if op.opname not in skipped]
    for i in range(len(ops) - 3):
        load_a, load_b, compare, jump = ops[i : i + 4]
        names = {(load_a.opname, load_a.argval), (load_b.opname, load_b.argval)}
        if (
            names == {("LOAD_NAME", "__name__"), ("LOAD_CONST", "__main__")}
            and compare.opname == "COMPARE_OP"
            and "==" in str(compare.argval)
            and jump.opname.startswith("POP_JUMP")
            and jump.opname.endswith("IF_FALSE")
            and isinstance(jump.argval, int)
        ):
            found.append((jump.offset, jump.argval))
    return found


def _frames(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def unguarded_main_line(start_method: str) -> tuple[str, int] | None:
    """The main module's file and line that runs now outside a main guard, or None.

    Where the main thread is still running the main module's top-level code (its
    ``<module>`` frame) outside ``if __name__ == "__main__":``, every worker started
    under ``spawn`` or ``forkserver`` would run that line again when it imports the
    main module. None under ``fork``, or for an interactive main module.
    """
    if start_method == "fork":
        return None
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not path.endswith(".py"):
        return None
    frame: Any = sys._current_frames().get(threading.main_thread().ident or -1)
    top = next(
        (f for f in _frames(frame) if f.f_code.co_name == "<module>" and f.f_globals is vars(main)),
        None,
    )
    if top is None:
        return None
    at = top.f_lasti
    if any(start < at < end for start, end in guarded_offsets(top.f_code)):
        return None
    return path, top.f_lineno
