"""Ctrl-C during training: the first SIGINT asks the loop to stop at the next step boundary.

Python runs signal handlers in the main thread, between bytecodes: a main thread blocked
in a session call (a step waiting for data that never comes) would never see them. So
while the loop runs, a watcher thread also learns of each SIGINT, through the wakeup
file descriptor that the interpreter writes a byte to when a signal arrives
(``signal.set_wakeup_fd``), and acts for a blocked main thread: it logs the first
Ctrl-C at once, and on the second it cancels the waits registered with `on_abort`
(an input's queue), so the blocked call returns and ``KeyboardInterrupt`` is raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from towerkit.trainers._stop import StopEvent, StopState, join_stop_states, next_stop_state
from towerkit.trainers._tf_lines import release_standard_error

logger = logging.getLogger("towerkit.trainers")

ABORT_GRACE_S = 10.0
"""Seconds the main thread has, after the second Ctrl-C, to leave a blocked call before
the process exits with status 130."""


class StopControl:
    """The running loop's stop control: `StopState` (pure, ``_stop``) as signals change it.

    Every change is a `StopEvent` applied by `take` through `next_stop_state`; the flags
    of the record are mirrored in plain attributes, which the loop polls between steps
    at the cost of one attribute read.

    Attributes:
        state: the `StopState` now.
        requested: True once the first SIGINT arrived or a preemption was agreed; the
            loop then ends after the step (or epoch phase) it is in, runs
            ``after_train``, closes the session, and raises ``KeyboardInterrupt``
            (Ctrl-C) or `TrainingPreempted`.
        aborted: True once the second SIGINT arrived: ``KeyboardInterrupt`` is raised
            in the main thread at once (after the waits registered with `on_abort`
            are cancelled, when it was blocked in one).
        raised: True once that ``KeyboardInterrupt`` has been raised.
        signals: the SIGINTs counted so far.
        preempted: True once the loop is to save and stop for a preemption
            (`PreemptionPolicy`): ``requested`` is then True too.
        signalled: True once a preemption signal arrived in this process.
        coordinated: whether the processes of the job agree on the step they stop
            at (horovod ranks): a signal then only sets ``signalled``, and `agree`
            sets ``preempted`` once every process has learnt of it (see
            `PreemptionVote`); otherwise the signal sets ``preempted`` itself.
    """

    __slots__ = (
        "_lock",
        "aborted",
        "coordinated",
        "preempted",
        "raised",
        "requested",
        "signalled",
        "signals",
        "state",
    )

    def __init__(self, *, coordinated: bool = False) -> None:
        self._lock = threading.RLock()
        self._mirror(StopState(coordinated=coordinated))

    def _mirror(self, state: StopState) -> None:
        self.state = state
        self.requested = state.requested
        self.aborted = state.aborted
        self.raised = state.raised
        self.signals = state.sigints
        self.preempted = state.preempted
        self.signalled = state.signalled
        self.coordinated = state.coordinated

    def take(self, event: StopEvent) -> StopState:
        """Apply `event`; the state before it.

        Safe from the watcher thread and from a signal handler that interrupts the main
        thread inside another `take`: the result is joined with the state found when
        it is stored (`join_stop_states`), so neither update is lost.
        """
        with self._lock:
            before = self.state
            after = next_stop_state(before, event)
            self._mirror(join_stop_states(self.state, after))
        return before

    def agree(self) -> None:
        """The job agreed to stop for a preemption: the loop saves and stops after this call."""
        self.take(StopEvent.AGREED)


# -- waits that the second Ctrl-C cancels -------------------------------------------------

_ABORT_LOCK = threading.Lock()
_ABORT_ACTIONS: dict[int, tuple[str, Callable[[], None]]] = {}
_ABORTING = threading.Event()
_NEXT_TOKEN = [0]


def on_abort(name: str, action: Callable[[], None]) -> int:
    """Register `action`, which unblocks a wait of the step (e.g. closes an input's queue).

    The second Ctrl-C runs every registered action, from another thread than the main
    one, so a main thread blocked in that wait returns.

    Returns:
        A token for `remove_on_abort`.
    """
    with _ABORT_LOCK:
        _NEXT_TOKEN[0] += 1
        token = _NEXT_TOKEN[0]
        _ABORT_ACTIONS[token] = (name, action)
    return token


def remove_on_abort(token: int) -> None:
    """Forget the action registered under `token` (no error when it is gone)."""
    with _ABORT_LOCK:
        _ABORT_ACTIONS.pop(token, None)


def aborting() -> bool:
    """Whether a second Ctrl-C is aborting training now (threads are then not waited for)."""
    return _ABORTING.is_set()


def _run_abort_actions() -> None:
    with _ABORT_LOCK:
        actions = list(_ABORT_ACTIONS.values())
    for name, action in actions:
        try:
            action()
        except Exception:
            logger.exception("%s: unblocking it after the second Ctrl-C failed", name)


# -- the watcher -----------------------------------------------------------------------

_FIRST = "signal %d: training stops after the current step (press Ctrl-C again to abort now)"
_AGAIN = "signal %d again: training aborts now"


class _Watcher:
    """Count SIGINTs from the interpreter's wakeup fd, in the main thread's handler or a thread."""

    def __init__(
        self, state: StopControl, sigint: bool = True, preempt: Preempt | None = None
    ) -> None:
        self._state = state
        self._sigint = sigint
        self._preempt = preempt
        self._lock = threading.RLock()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._stop_read, self._stop_write = os.pipe()
        self._thread: threading.Thread | None = None
        self._left = threading.Event()

    def install(self) -> bool:
        """Take the wakeup fd and start the thread; False when someone else holds the fd."""
        try:
            old = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        except (ValueError, OSError) as err:
            logger.debug("Ctrl-C watcher not installed: %s", err)
            self._close()
            return False
        if old != -1:
            signal.set_wakeup_fd(old)
            self._close()
            return False
        self._thread = threading.Thread(target=self._run, name="towerkit Ctrl-C", daemon=True)
        self._thread.start()
        return True

    def uninstall(self) -> None:
        """Give the wakeup fd back and end the thread."""
        signal.set_wakeup_fd(-1)
        self._left.set()
        os.write(self._stop_write, b"x")
        if self._thread is not None:
            self._thread.join(5.0)
        self._close()

    def _close(self) -> None:
        for fd in (self._read, self._write, self._stop_read, self._stop_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def handle(self, in_main: bool) -> None:
        """Take the SIGINTs that arrived; in the main thread, raise once aborting."""
        state = self._state
        abort_now = False
        notes = []
        with self._lock:
            try:
                data = os.read(self._read, 4096)
            except OSError:
                data = b""
            preempts = (
                [b for b in data if b in self._preempt.policy.signals]
                if self._preempt is not None
                else []
            )
            for _ in range(data.count(signal.SIGINT) if self._sigint else 0):
                before = state.take(StopEvent.SIGINT)
                if before.sigints == 0:
                    notes.append(_FIRST)
                elif not before.aborted:
                    abort_now = True
                    _ABORTING.set()
                    notes.append(_AGAIN)
            raise_now = in_main and state.aborted and not state.raised
            if raise_now:
                state.take(StopEvent.ABORT_RAISED)
        # Logged outside the lock: the main thread may hold a logging lock when its
        # handler runs.
        for signum in preempts:
            self._preempt.arrived(signum)  # type: ignore[union-attr]
        for note in notes:
            logger.warning(note, signal.SIGINT)
        if raise_now:
            raise KeyboardInterrupt
        if abort_now and not in_main:
            self._abort()

    def _abort(self) -> None:
        """In the watcher thread: unblock the main thread, and exit if it stays blocked."""
        _run_abort_actions()
        if self._left.wait(ABORT_GRACE_S) or self._state.raised:
            return
        release_standard_error()
        logger.error(
            "training is still blocked %.0f s after the second Ctrl-C, in a call Python "
            "cannot interrupt: the process exits now (status 130)",
            ABORT_GRACE_S,
        )
        logging.shutdown()
        os._exit(130)

    def _run(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self._read, self._stop_read], [], [])
            except (OSError, ValueError):
                return
            if self._stop_read in ready:
                return
            self.handle(in_main=False)

    def raised_or_left(self) -> None:
        """The main thread raised the abort, or the loop is over: no exit is needed."""
        self._left.set()


# -- preemption signals ------------------------------------------------------------------


class Preempt:
    """The first preemption signal asks the loop to save and stop; a second one, or the grace running out, exits."""

    def __init__(self, state: StopControl, policy: Any) -> None:
        self.state = state
        self.policy = policy
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def arrived(self, signum: int) -> None:
        """Take one preemption signal (from the watcher thread or the main thread's handler)."""
        from towerkit.trainers._preempt import PREEMPTED_EXIT_STATUS

        name = signal.Signals(signum).name
        with self._lock:
            first = not self.state.take(StopEvent.PREEMPT_SIGNAL).signalled
            if first:
                self._timer = threading.Timer(self.policy.grace_s, self._expired, (name,))
                self._timer.daemon = True
                self._timer.start()
        if first:
            when = (
                "every process of the job stops after a step they agree on (the chief "
                "saves) and exits"
                if self.state.coordinated
                else "training saves after the session call in flight and exits"
            )
            logger.warning(
                "%s: %s (status %d); grace %.0f s; a second signal exits at once",
                name,
                when,
                PREEMPTED_EXIT_STATUS,
                self.policy.grace_s,
            )
            return
        logger.error("%s again: the process exits now (status %d)", name, PREEMPTED_EXIT_STATUS)
        _exit_now(PREEMPTED_EXIT_STATUS)

    def _expired(self, name: str) -> None:
        from towerkit.trainers._preempt import PREEMPTED_EXIT_STATUS

        logger.error(
            "%s: the %.0f s grace ran out before the run saved and stopped: the process "
            "exits now (status %d); the next run resumes from the newest complete checkpoint",
            name,
            self.policy.grace_s,
            PREEMPTED_EXIT_STATUS,
        )
        _exit_now(PREEMPTED_EXIT_STATUS)

    def cancel(self) -> None:
        """The loop is over: no forced exit."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()


def _exit_now(status: int) -> None:
    """Leave at once: every file is written atomically, so nothing is half-written."""
    release_standard_error()
    for handler in logging.getLogger().handlers + logger.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(status)


_TAKEN: dict[int, Any] = {}
"""The signals a `deferred_sigint` context of this process handles now, each with the
handler it replaced."""


def _signals_back_in_child() -> None:
    """In a process forked while training (a data worker): its signals are its own again.

    It inherits the training process's handlers and wakeup fd; without this, a SIGTERM
    that ends it (a pool's ``terminate``) would run the preemption handler there and
    write to the training process's wakeup fd, which would take it for its own.
    """
    if not _TAKEN:
        return
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for signum, previous in _TAKEN.items():
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, previous)
    _TAKEN.clear()


os.register_at_fork(after_in_child=_signals_back_in_child)


@contextlib.contextmanager
def deferred_sigint(policy: Any = None, *, coordinated: bool = False) -> Iterator[StopControl]:
    """Turn the first SIGINT into a request to stop; a second one interrupts at once.

    Python's default handler raises ``KeyboardInterrupt`` wherever the main thread
    is, which may be halfway through a callback writing a file. Inside this
    context the first SIGINT only sets ``requested`` (and logs it at once); the
    training loop checks it between steps. A second SIGINT raises
    ``KeyboardInterrupt`` immediately, for a step that hangs: a step blocked waiting
    for an input registered with `on_abort` is unblocked first, and a step blocked
    anywhere else Python cannot reach makes the process exit with status 130 after
    `ABORT_GRACE_S` seconds.

    With a `PreemptionPolicy`, its signals (SIGTERM, SIGUSR1) set ``preempted`` and
    ``requested``: the loop stops after the session call in flight and saves. A second
    one, or ``grace_s`` seconds without the context ending, exits the process at once
    with status 143.

    With ``coordinated``, a preemption signal only sets ``signalled``: the processes
    of the job agree on the step to stop at first (`StopControl.agree`).

    Each handler is installed only in the main thread and only when the signal still
    has Python's default handler (a handler the user installed is left alone); the
    previous handlers are restored on exit.

    Yields:
        The `StopControl` the loop polls.
    """
    state = StopControl(coordinated=coordinated)
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    take_int = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    preempt_sigs = [
        s
        for s in (policy.signals if policy is not None else ())
        if signal.getsignal(s) == signal.SIG_DFL
    ]
    if not take_int and not preempt_sigs:
        yield state
        return
    preempt = Preempt(state, policy) if preempt_sigs else None

    watcher: _Watcher | None = _Watcher(state, sigint=take_int, preempt=preempt)
    if not watcher.install():  # type: ignore[union-attr]
        watcher = None

    def handler(signum: int, frame: Any) -> None:
        del frame
        if watcher is not None:
            watcher.handle(in_main=True)
            return
        if state.take(StopEvent.SIGINT).sigints:  # the second: abort now
            state.take(StopEvent.ABORT_RAISED)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        logger.warning(_FIRST, signum)

    def preempt_handler(signum: int, frame: Any) -> None:
        del frame
        if watcher is not None:
            watcher.handle(in_main=True)
        elif preempt is not None:
            preempt.arrived(signum)

    _ABORTING.clear()
    if take_int:
        signal.signal(signal.SIGINT, handler)
        _TAKEN[signal.SIGINT] = signal.default_int_handler
    for s in preempt_sigs:
        signal.signal(s, preempt_handler)
        _TAKEN[s] = signal.SIG_DFL
    try:
        yield state
    finally:
        if take_int:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _TAKEN.pop(signal.SIGINT, None)
        for s in preempt_sigs:
            signal.signal(s, signal.SIG_DFL)
            _TAKEN.pop(s, None)
        if preempt is not None:
            preempt.cancel()
        if watcher is not None:
            watcher.raised_or_left()
            watcher.uninstall()
        _ABORTING.clear()
