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
from towerkit.trainers._tf_lines import release_standard_error
from towerkit.trainers.parallel._health_core import (
    Reach,
    TaskHealth,
    advance_health,
    lost_reason,
    start_health,
)

__all__ = [
    "ClusterTimeouts",
    "LivenessState",
    "Prober",
    "TaskAddress",
    "TaskLostError",
    "dead_tasks",
    "known_alive",
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


def _healths(
    values: Iterable[tuple[TaskAddress, TaskHealth]],
) -> tuple[tuple[TaskAddress, TaskHealth], ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class LivenessState:
    """What the health checks have seen so far: each task's `TaskHealth`.

    Attributes:
        since: when the watch started (seconds, any monotonic clock).
        healths: ``(task, health)`` of each task an event was folded in for; a task
            not listed is as `start_health(since)` makes it (never seen).
    """

    since: float
    healths: tuple[tuple[TaskAddress, TaskHealth], ...] = attrs.field(
        default=(), converter=_healths
    )

    def health(self, task: TaskAddress) -> TaskHealth:
        """The health of `task` (never seen since the start when no event was folded in)."""
        for known, health in self.healths:
            if known == task:
                return health
        return start_health(self.since)


def known_alive(since: float, tasks: Iterable[TaskAddress]) -> LivenessState:
    """The state of a watch that starts at `since` knowing `tasks` alive (a session reached them).

    >>> t = TaskAddress(job="ps", index=0, address="h:1")
    >>> known_alive(3.0, [t]).health(t).alive_at
    3.0
    """
    return LivenessState(since=since, healths=[(t, start_health(since, alive=True)) for t in tasks])


def observe(
    state: LivenessState,
    task: TaskAddress,
    reach: Reach | None,
    now: float,
    timeouts: ClusterTimeouts,
    *,
    heard: bool = False,
    vouched: bool = False,
) -> LivenessState:
    """The state after one event about `task` at `now`: a probe's `reach`, or word it is alive.

    `advance_health` decides; the other tasks are untouched.

    Examples:
        >>> t = TaskAddress(job="ps", index=0, address="h:1")
        >>> s = observe(LivenessState(since=0.0), t, Reach.ANSWERS, 3.0, ClusterTimeouts())
        >>> s.health(t).status, s.health(t).alive_at
        (<Health.ANSWERING: 'answering'>, 3.0)
    """
    health = advance_health(
        state.health(task),
        reach,
        now,
        dead_after=timeouts.dead_after,
        start_within=timeouts.start_within,
        heard=heard,
        vouched=vouched,
    )
    rest = [(t, h) for t, h in state.healths if t != task]
    return attrs.evolve(state, healths=(*rest, (task, health)))


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
    """The tasks of `tasks` that are lost at `now`, each with the reason, in order.

    `lost_reason` decides: a task known alive once (it answered, or was heard from)
    is lost once unheard for more than ``dead_after`` seconds; one never known alive
    but seen accepting connections, once it has accepted none for more than
    ``dead_after``; one never seen at all, once ``start_within`` has passed since the
    watch began.

    Examples:
        >>> t = TaskAddress(job="ps", index=0, address="h:1")
        >>> s = observe(LivenessState(since=0.0), t, Reach.ANSWERS, 1.0, ClusterTimeouts())
        >>> dead_tasks(s, [t], 5.0, ClusterTimeouts(dead_after=10))
        ()
        >>> [(str(task), why) for task, why in dead_tasks(s, [t], 12.0, ClusterTimeouts(dead_after=10))]
        [("job 'ps' task 0 (h:1)", 'unreachable for 11 s')]
    """
    out = []
    for task in tasks:
        why = lost_reason(state.health(task), now, timeouts.dead_after, timeouts.start_within)
        if why:
            out.append((task, why))
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
    sock = _connect(address, timeout)
    if sock is None:
        return False, False
    with sock:
        return _answer(sock, b"", time.monotonic() + timeout)[0] is True, True


def _connect(address: str, timeout: float) -> socket.socket | None:
    """A connection to ``host:port`` that has sent the HTTP/2 preface; None: none in `timeout`."""
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except (OSError, ValueError):
        return None
    try:
        sock.sendall(_HTTP2_PREFACE)
    except OSError:
        sock.close()
        return None
    return sock


def _answer(sock: socket.socket, head: bytes, end: float) -> tuple[bool | None, bytes]:
    """Whether the server on `sock` answered by `end` (monotonic s): the first frame's header.

    Returns ``(answered, head)``: True, it sent a SETTINGS frame; False, it will not answer
    (closed, reset, or a first frame of another kind); None, nothing yet (the connection
    still waits). `head` is the header's bytes read so far (a read resumes after them);
    an `end` already past looks only at what has arrived.
    """
    try:
        while len(head) < 9:
            sock.settimeout(max(end - time.monotonic(), 0.0))
            try:
                chunk = sock.recv(9 - len(head))
            except (TimeoutError, BlockingIOError):
                return None, head
            if not chunk:
                return False, head
            head += chunk
    except OSError:
        return False, head
    return head[3] == _SETTINGS, head


class Prober:
    """Probes of tasks that keep each task's one connection accepted and not answered yet.

    A live server on a loaded machine may answer after a probe gave up; the next check
    reads that answer from the connection kept here, so the task is not taken for a
    stopped one (whose connection is never answered). Used from the watch's thread only.
    """

    def __init__(self) -> None:
        self._open: dict[TaskAddress, tuple[socket.socket, bytes]] = {}

    def reach(self, task: TaskAddress, timeout: float) -> Reach:
        """Probe `task`: its waiting connection's answer, else a new connection's (`Reach`)."""
        kept = self._open.pop(task, None)
        if kept is not None:
            answered, head = _answer(kept[0], kept[1], 0.0)
            if answered is True:
                kept[0].close()
                return Reach.ANSWERS
            if answered is False:  # closed without an answer: a new probe decides
                kept[0].close()
                kept = None
            else:
                kept = (kept[0], head)
        sock = _connect(task.address, timeout)
        if sock is None:
            if kept is not None:
                self._open[task] = kept
            return Reach.NOTHING
        answered, head = _answer(sock, b"", time.monotonic() + timeout)
        if answered is True:
            sock.close()
            if kept is not None:
                kept[0].close()
            return Reach.ANSWERS
        if answered is None and kept is None:
            self._open[task] = (sock, head)
        else:
            sock.close()
            if kept is not None:
                self._open[task] = kept
        return Reach.ACCEPTS

    def waiting(self) -> tuple[TaskAddress, ...]:
        """The tasks one of whose connections waits for its answer."""
        return tuple(self._open)

    def keep_only(self, tasks: Iterable[TaskAddress]) -> None:
        """Close the waiting connections of tasks not in `tasks` (no longer watched)."""
        for task in set(self._open) - set(tasks):
            self.drop(task)

    def drop(self, task: TaskAddress) -> None:
        """Close `task`'s waiting connection, if any."""
        kept = self._open.pop(task, None)
        if kept is not None:
            kept[0].close()

    def close(self) -> None:
        """Close every waiting connection."""
        for task in list(self._open):
            self.drop(task)


class ClusterWatch:
    """A daemon thread that checks the given tasks and reports each one that dies.

    Each task is checked every ``check_every`` seconds by opening a connection to its
    server (`probe`: the server must answer, not only accept); `heard_from` tells the
    watch of a task alive another way. Each check and word is folded into the task's
    `TaskHealth` (`observe`), and `dead_tasks` decides. Each dead task is logged as one
    error line, added to `lost` (with the reason), dropped from the watch, and passed
    to `on_dead` (from the watch's thread). ``still_needed(task)``, when given, is
    asked first: a task that ended normally (False) is only dropped. With `alive`,
    every task is known alive when the watch starts (a session just reached them), so
    each is bound by ``dead_after`` from the start, seen by a probe or not.
    """

    def __init__(
        self,
        tasks: Iterable[TaskAddress],
        timeouts: ClusterTimeouts,
        on_dead: Callable[[TaskAddress, str], None] | None = None,
        still_needed: Callable[[TaskAddress], bool] | None = None,
        name: str = "cluster-watch",
        *,
        alive: bool = False,
    ) -> None:
        self._tasks = list(tasks)
        self._timeouts = timeouts
        self._on_dead = on_dead
        self._still_needed = still_needed
        self._alive = alive
        self._stop = threading.Event()
        # the watch's thread and the caller's (heard_from) both fold events in
        self._lock = threading.Lock()
        self._state = LivenessState(since=time.monotonic())
        self.lost: list[tuple[TaskAddress, str]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ClusterWatch:
        """Start checking; returns self."""
        now = time.monotonic()
        tasks = self._tasks if self._alive else ()
        self._state = known_alive(now, tasks)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop checking (the thread ends within one check)."""
        self._stop.set()

    def forget(self, job: str, index: int) -> None:
        """Stop watching one task (it ended normally)."""
        self._tasks = [t for t in self._tasks if (t.job, t.index) != (job, index)]

    def heard_from(self, job: str, index: int) -> None:
        """Word that a watched task is alive now (it checked in): bound by ``dead_after`` from now."""
        for task in [t for t in self._tasks if (t.job, t.index) == (job, index)]:
            self._fold(task, None, heard=True)

    def vouch_for_all(self) -> None:
        """Word that every watched task was up (the job went past its start), reached or not.

        A task never known alive is then bound by ``dead_after`` from the first word.
        """
        for task in list(self._tasks):
            self._fold(task, None, vouched=True)

    def health(self, task: TaskAddress) -> TaskHealth:
        """What the watch has seen of `task` so far."""
        return self._state.health(task)

    def wait_reached(self, timeout: float) -> tuple[TaskAddress, str] | None:
        """Wait until a probe has reached every watched task; the first one lost meanwhile, or None.

        Reached: it answered, or at least accepted a connection (a loaded server may
        answer late). Returns None as well when `timeout` seconds pass first (the
        watch's bounds still apply to the tasks not reached).
        """
        end = time.monotonic() + timeout
        while not self.lost and time.monotonic() < end:
            if all(self.health(t).accepted_at is not None for t in list(self._tasks)):
                return None
            time.sleep(0.05)
        return self.lost[0] if self.lost else None

    def _fold(
        self, task: TaskAddress, found: Reach | None, *, heard: bool = False, vouched: bool = False
    ) -> None:
        with self._lock:
            now = time.monotonic()
            self._state = observe(
                self._state, task, found, now, self._timeouts, heard=heard, vouched=vouched
            )

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
        prober = Prober()
        try:
            self._check_until_stopped(prober)
        finally:
            prober.close()

    def _check_until_stopped(self, prober: Prober) -> None:
        timeouts = self._timeouts
        while not self._stop.is_set():
            began = time.monotonic()
            tasks = list(self._tasks)
            for task in tasks:
                self._fold(task, prober.reach(task, answer_within(timeouts)))
            prober.keep_only(self._tasks)  # a task forgotten meanwhile
            with self._lock:
                dead = dead_tasks(self._state, tasks, time.monotonic(), timeouts)
            for task, why in dead:
                if self._stop.is_set():
                    return
                self.forget(task.job, task.index)
                prober.drop(task)
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
    end_unless_set(done, after_s, error, "the training thread is still blocked")


def end_unless_set(
    done: threading.Event, after_s: float, error: Callable[[], BaseException], what: str
) -> None:
    """End the process with `error`'s line unless `done` is set within `after_s` seconds.

    From a daemon thread: `error`'s line is logged (with `what`) and printed on stderr as
    an uncaught error's would be, and the process ends with status 1, without running
    further Python cleanup (a thread blocked in TensorFlow would block it too).
    """

    def watch() -> None:
        if done.wait(after_s):
            return
        release_standard_error()  # a session start may hold descriptor 2: its lines first
        err = error()
        logger.error("%s; %s after %.0f s: exiting", err, what, after_s)
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
