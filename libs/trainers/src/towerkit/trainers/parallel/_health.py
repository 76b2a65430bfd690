"""Liveness of the tasks of a TensorFlow cluster: bounds, pure decisions, a watcher thread."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
from attrs.validators import ge, gt, instance_of

from towerkit.trainers._errors import TaskLostError

__all__ = [
    "ClusterTimeouts",
    "LivenessState",
    "TaskAddress",
    "TaskLostError",
    "dead_tasks",
    "observe",
    "task_addresses",
]

logger = logging.getLogger("towerkit.trainers")


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"expected a number of seconds; got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    return float(value)


@attrs.frozen(kw_only=True)
class ClusterTimeouts:
    """How long the processes of a cluster wait for each other before giving up.

    Every wait of a distributed job is bounded by one of these: a task that died
    (killed, crashed, its machine gone) is found and named within
    ``dead_after + check_every`` seconds, and a session operation that blocks (a
    parameter server that stopped answering) fails after ``operation_seconds``.

    Attributes:
        check_every: seconds between two health checks of the other tasks (> 0).
        dead_after: a task that was up and has not answered a connection for this
            many seconds is dead (> 0).
        start_within: a task that never came up within this many seconds of the
            watch's start is dead (> 0).
        operation_seconds: the deadline of every session operation of a worker
            (``ConfigProto.operation_timeout_in_ms``; > 0).
        close_seconds: how long closing a worker's session may take; past it the
            session is left to the process's exit (>= 0).

    Examples:
        >>> ClusterTimeouts(dead_after=5)
        ClusterTimeouts(check_every=2.0, dead_after=5.0, start_within=600.0, operation_seconds=300.0, close_seconds=10.0)
        >>> ClusterTimeouts(check_every=0)
        Traceback (most recent call last):
        ...
        ValueError: 'check_every' must be > 0: 0.0
    """

    check_every: float = attrs.field(default=2.0, converter=_seconds, validator=gt(0))
    dead_after: float = attrs.field(default=20.0, converter=_seconds, validator=gt(0))
    start_within: float = attrs.field(default=600.0, converter=_seconds, validator=gt(0))
    operation_seconds: float = attrs.field(default=300.0, converter=_seconds, validator=gt(0))
    close_seconds: float = attrs.field(default=10.0, converter=_seconds, validator=ge(0))

    @property
    def operation_timeout_ms(self) -> int:
        """``operation_seconds`` in milliseconds, as ``ConfigProto`` takes it."""
        return max(1, int(self.operation_seconds * 1000))


@attrs.frozen(kw_only=True)
class TaskAddress:
    """One task of a cluster: its job, index and ``host:port``.

    Examples:
        >>> print(TaskAddress(job="ps", index=0, address="10.0.0.1:2222"))
        job 'ps' task 0 (10.0.0.1:2222)
    """

    job: str = attrs.field(validator=instance_of(str))
    index: int = attrs.field(validator=[instance_of(int), ge(0)])
    address: str = attrs.field(validator=instance_of(str))

    def __str__(self) -> str:
        return f"job {self.job!r} task {self.index} ({self.address})"


def task_addresses(
    cluster: Mapping[str, Any], jobs: Iterable[str], *, skip: Iterable[tuple[str, int]] = ()
) -> tuple[TaskAddress, ...]:
    """The tasks of `jobs` in a cluster's ``{job: [address, ...] or {index: address}}``.

    Args:
        cluster: what ``ClusterSpec.as_dict()`` gives.
        jobs: the jobs to list, in order.
        skip: ``(job, index)`` pairs to leave out (e.g. this process's own task).

    Raises:
        ValueError: a job that the cluster does not have.

    Examples:
        >>> spec = {"ps": ["h:1"], "worker": ["h:2", "h:3"]}
        >>> [str(t) for t in task_addresses(spec, ["worker"], skip=[("worker", 1)])]
        ["job 'worker' task 0 (h:2)"]
    """
    skipped = set(skip)
    out = []
    for job in jobs:
        if job not in cluster:
            msg = f"the cluster has no job {job!r}; it has {sorted(cluster)}"
            raise ValueError(msg)
        tasks = cluster[job]
        pairs = sorted(tasks.items()) if isinstance(tasks, Mapping) else enumerate(tasks)
        out += [
            TaskAddress(job=job, index=int(i), address=str(a))
            for i, a in pairs
            if (job, int(i)) not in skipped
        ]
    return tuple(out)


def _sightings(
    values: Iterable[tuple[TaskAddress, float]],
) -> tuple[tuple[TaskAddress, float], ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class LivenessState:
    """What the health checks have seen so far.

    Attributes:
        since: when the watch started (seconds, any monotonic clock).
        last_seen: ``(task, time)`` of the last successful check of each task seen up.
        last_listening: ``(task, time)`` of the last check whose connection each task
            accepted, answered in time or not (its server was there).
    """

    since: float
    last_seen: tuple[tuple[TaskAddress, float], ...] = attrs.field(default=(), converter=_sightings)
    last_listening: tuple[tuple[TaskAddress, float], ...] = attrs.field(
        default=(), converter=_sightings
    )


def _sighted(
    sightings: tuple[tuple[TaskAddress, float], ...], task: TaskAddress, now: float
) -> tuple[tuple[TaskAddress, float], ...]:
    return (*((t, s) for t, s in sightings if t != task), (task, now))


def observe(
    state: LivenessState, task: TaskAddress, up: bool, now: float, *, listening: bool | None = None
) -> LivenessState:
    """The state after one health check of `task` at time `now`.

    `up`: it answered in time; `listening`: it accepted the connection (default: `up`).

    Examples:
        >>> t = TaskAddress(job="ps", index=0, address="h:1")
        >>> observe(LivenessState(since=0.0), t, True, 3.0).last_seen == ((t, 3.0),)
        True
        >>> observe(LivenessState(since=0.0), t, False, 3.0, listening=True).last_listening
        ((TaskAddress(job='ps', index=0, address='h:1'), 3.0),)
    """
    if up:
        state = attrs.evolve(state, last_seen=_sighted(state.last_seen, task, now))
    if up or listening:
        state = attrs.evolve(state, last_listening=_sighted(state.last_listening, task, now))
    return state


def answer_within(timeouts: ClusterTimeouts) -> float:
    """How long one health check waits for a task's answer: ``check_every``, 2 to 5 s.

    At least 2 s: a live task on a loaded machine (CPU-bound processes on every core)
    can take over a second to answer, and a check that gives up sooner would count it
    as unreachable for as long as the load lasts.

    >>> answer_within(ClusterTimeouts(check_every=1)), answer_within(ClusterTimeouts(check_every=30))
    (2.0, 5.0)
    """
    return min(max(timeouts.check_every, 2.0), 5.0)


def dead_tasks(
    state: LivenessState, tasks: Iterable[TaskAddress], now: float, timeouts: ClusterTimeouts
) -> tuple[tuple[TaskAddress, str], ...]:
    """The tasks of `tasks` that are dead at `now`, each with the reason, in order.

    A task seen up is dead once it has not answered for more than ``dead_after``
    seconds. A task never seen up (on a loaded machine a live server may answer late
    every time) but seen accepting connections is dead once it has accepted none for
    more than ``dead_after`` seconds: its server is gone. Any other task never seen up
    is dead once ``start_within`` seconds have passed since the watch began.

    Examples:
        >>> t = TaskAddress(job="ps", index=0, address="h:1")
        >>> s = observe(LivenessState(since=0.0), t, True, 1.0)
        >>> dead_tasks(s, [t], 5.0, ClusterTimeouts(dead_after=10))
        ()
        >>> [(str(task), why) for task, why in dead_tasks(s, [t], 12.0, ClusterTimeouts(dead_after=10))]
        [("job 'ps' task 0 (h:1)", 'unreachable for 11 s')]
    """
    seen = dict(state.last_seen)
    listened = dict(state.last_listening)
    out = []
    for task in tasks:
        last = seen.get(task)
        heard = listened.get(task)
        if last is None and heard is not None:
            if now - heard > timeouts.dead_after:
                gone = f"accepts no connection for {now - heard:.0f} s (it never answered in time)"
                out.append((task, gone))
        elif last is None:
            if now - state.since > timeouts.start_within:
                out.append((task, f"never came up within {timeouts.start_within:g} s"))
        elif now - last > timeouts.dead_after:
            out.append((task, f"unreachable for {now - last:.0f} s"))
    return tuple(out)


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""What an HTTP/2 client sends first: the connection preface, then an empty SETTINGS frame."""

_SETTINGS = 4
"""The type of an HTTP/2 SETTINGS frame (the 4th byte of a frame's 9-byte header)."""


def is_up(address: str, timeout: float) -> bool:
    """Whether the server at ``host:port`` answers an HTTP/2 connection within `timeout` s.

    A TensorFlow server (gRPC, so HTTP/2) answers a client's connection preface with a
    SETTINGS frame. Accepting the TCP connection is not enough: the kernel accepts it
    for a process that is stopped (SIGSTOP, a frozen container) or hung, and such a
    task would otherwise look up while every operation on it blocks.
    """
    return probe(address, timeout)[0]


def probe(address: str, timeout: float) -> tuple[bool, bool]:
    """``(answers, accepts)``: `is_up`, and whether the connection was accepted at all."""
    host, _, port = address.rpartition(":")
    end = time.monotonic() + timeout
    accepted = False
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            accepted = True
            sock.sendall(_HTTP2_PREFACE)
            head = b""
            while len(head) < 9:
                left = end - time.monotonic()
                if left <= 0:
                    return False, True
                sock.settimeout(left)
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    return False, True
                head += chunk
            return head[3] == _SETTINGS, True
    except (OSError, ValueError):
        return False, accepted


class ClusterWatch:
    """A daemon thread that checks the given tasks and reports each one that dies.

    Each task is checked every ``check_every`` seconds by opening a connection to its
    server (`is_up`: the server must answer, not only accept); `dead_tasks` decides.
    Each dead task is logged as one error line, added to `lost` (with the reason),
    dropped from the watch, and passed to `on_dead` (from the watch's thread).
    ``still_needed(task)``, when given, is asked first: a task that ended normally
    (False) is only dropped.
    """

    def __init__(
        self,
        tasks: Iterable[TaskAddress],
        timeouts: ClusterTimeouts,
        on_dead: Callable[[TaskAddress, str], None] | None = None,
        still_needed: Callable[[TaskAddress], bool] | None = None,
        name: str = "cluster-watch",
    ) -> None:
        self._tasks = list(tasks)
        self._timeouts = timeouts
        self._on_dead = on_dead
        self._still_needed = still_needed
        self._stop = threading.Event()
        self._state = LivenessState(since=time.monotonic())
        self.lost: list[tuple[TaskAddress, str]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ClusterWatch:
        """Start checking; returns self."""
        self._state = LivenessState(since=time.monotonic())
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop checking (the thread ends within one check)."""
        self._stop.set()

    def forget(self, job: str, index: int) -> None:
        """Stop watching one task (it ended normally)."""
        self._tasks = [t for t in self._tasks if (t.job, t.index) != (job, index)]

    def check_now(self) -> tuple[TaskAddress, str] | None:
        """Check every watched task once, now; the first one down, with a reason, or None."""
        if self.lost:
            return self.lost[0]
        wait = answer_within(self._timeouts)
        for task in list(self._tasks):
            if not is_up(task.address, wait):
                return task, "not answering"
        return None

    def blame(
        self, session_error: bool, tasks: Iterable[TaskAddress] | None = None
    ) -> tuple[TaskAddress, str] | None:
        """The task to name for a failure, or None.

        The first task lost; else, after a failed session call, the first of `tasks`
        (default: the watched ones) that is down now.
        """
        if self.lost or not session_error:
            return self.lost[0] if self.lost else None
        return (self if tasks is None else ClusterWatch(tasks, self._timeouts)).check_now()

    def _run(self) -> None:
        timeouts = self._timeouts
        while not self._stop.is_set():
            began = time.monotonic()
            tasks = list(self._tasks)
            for task in tasks:
                up, accepted = probe(task.address, answer_within(timeouts))
                now = time.monotonic()
                self._state = observe(self._state, task, up, now, listening=accepted)
            for task, why in dead_tasks(self._state, tasks, time.monotonic(), timeouts):
                if self._stop.is_set():
                    return
                self.forget(task.job, task.index)
                if self._still_needed is not None and not self._still_needed(task):
                    continue
                self.lost.append((task, why))
                logger.error("%s is dead: %s", task, why)
                if self._on_dead is not None:
                    self._on_dead(task, why)
            self._stop.wait(max(0.0, timeouts.check_every - (time.monotonic() - began)))


def exit_if_stuck(
    done: threading.Event,
    timeouts: ClusterTimeouts,
    error: Callable[[], BaseException],
    *,
    starting: bool = False,
) -> None:
    """End the process with `error`'s line unless `done` is set in time.

    In time: within the operation deadline, the close bound and two health checks; while
    the session starts (`starting`), within the close bound and two health checks: a
    session being created waits for every task it may use, a lost one forever. For
    a worker whose parameter server stopped answering: TensorFlow bounds a step by the
    operation deadline but not a call that registers new fetches (an epoch-end save),
    and closing the session blocks as well, so such a call would wait forever. The lost
    task is already named; the process ends as an uncaught `error` would end it (its
    line on stderr, status 1), without running further Python cleanup.
    """
    after_s = timeouts.close_seconds + 2 * timeouts.check_every
    after_s += 0.0 if starting else timeouts.operation_seconds

    def watch() -> None:
        if done.wait(after_s):
            return
        err = error()
        logger.error("%s; the training thread is still blocked after %.0f s: exiting", err, after_s)
        print(
            f"{type(err).__module__}.{type(err).__qualname__}: {err}", file=sys.stderr, flush=True
        )
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=watch, name="exit-if-stuck", daemon=True).start()


def close_within(sess: Any, seconds: float) -> bool:
    """Close `sess`, waiting `seconds` at most; whether it closed in time.

    Closing a session one of whose tasks is gone blocks in TensorFlow (and so would
    the session's finalizer at the process's exit): past the bound the close is left
    to a daemon thread, which the process's exit ends.
    """
    closer = threading.Thread(target=sess.close, name="close-session", daemon=True)
    closer.start()
    closer.join(seconds)
    return not closer.is_alive()
