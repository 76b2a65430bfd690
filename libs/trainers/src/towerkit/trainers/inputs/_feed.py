"""A background thread that feeds a Python iterable's datapoints into a queue of the graph."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from towerkit.callbacks import ParallelTimeoutError
from towerkit.callbacks.plumbing import DatapointLayout, conform_datapoint, timeout_message
from towerkit.trainers._errors import InputDataError, InputProducerError, InputTimeoutError
from towerkit.trainers._interrupt import aborting, on_abort, remove_on_abort
from towerkit.trainers._tf_lines import tensorflow_lines_hidden
from towerkit.trainers.inputs._callbacks import _InputCallback

__all__ = ["InputFeeder", "QueueFeeder", "SwitchInterval"]

logger = logging.getLogger("towerkit.trainers")


class QueueFeeder:
    """Feed an iterable's datapoints, pass after pass, into a queue, from a thread of its own.

    The thread runs ``iter(iterable)`` again after each pass, checks and converts
    each datapoint against `layout` (`conform_datapoint`), and runs the enqueue op
    with it; the enqueue blocks while the queue is full. The training step dequeues
    in its own session call, so producing the next batches overlaps with the step
    and the step itself involves no Python.

    The enqueue runs in the feeding thread itself, not in TensorFlow's thread pool
    (for one small op, the hand-over to a pool thread cost more than the op). While
    the thread runs, the interpreter's switch interval is lowered to
    `switch_interval_s` and restored when the last feeder stops: a producer busy in
    pure-Python code holds the GIL, and the training thread, returning from its
    session call, would otherwise wait for it up to Python's default 5 ms (or until
    the producer's next enqueue, after a whole batch of its work).

    When the data is wrong (wrong arity, dtype or shape, or a pass with no datapoint)
    or the iterable raises, the thread keeps the error (`failure`), closes the queue
    and ends: the batches already queued are still used, then the dequeue fails and
    the trainer raises the kept error instead of TensorFlow's. ``stop`` closes the
    queue, cancelling a blocked enqueue, and joins the thread.

    With a `timeout`, a watchdog thread checks that the iterable gives each datapoint
    (and starts each pass) within `timeout` seconds; when it does not, the failure is
    an `InputTimeoutError` naming the input, the datapoint waited for and how long,
    and the queue is closed, so the training step stops waiting once the queued
    batches are used. While feeding, the second Ctrl-C closes the queue too (see
    ``deferred_sigint``), so a step waiting on a blocked iterable is interrupted.

    Args:
        name: the input's description, used in messages and as the thread's name.
        iterable: re-iterable datapoints.
        layout: what each datapoint must be.
        placeholders: the tensors the enqueue op takes the datapoint from, in order.
        enqueue: the op putting one datapoint into the queue.
        close: the op closing the queue, leaving queued datapoints to the dequeues.
        cancel: the op closing the queue and cancelling blocked enqueues.
        timeout: seconds the iterable may take to give a datapoint, or None (no limit).
    """

    join_timeout_s = 10.0
    """How long ``stop`` waits for a producer busy in the iterable's code."""

    stuck_join_timeout_s = 0.5
    """How long ``stop`` waits after a timeout or an abort, when the producer is known stuck."""

    switch_interval_s: float | None = 1e-4
    """The interpreter's switch interval while feeding, in seconds (None: leave it)."""

    def __init__(
        self,
        name: str,
        iterable: Iterable[Any],
        layout: DatapointLayout,
        placeholders: Sequence[Any],
        enqueue: Any,
        close: Any,
        cancel: Any,
        timeout: float | None = None,
    ) -> None:
        self._name = name
        self._timeout = timeout
        self._waiting_since: float | None = None
        self._position = (0, 0)
        self._abort_token: int | None = None
        self._watchdog: threading.Thread | None = None
        self._fail_lock = threading.Lock()
        self._iterable = iterable
        self._layout = layout
        self._placeholders = list(placeholders)
        self._enqueue = enqueue
        self._close_op = close
        self._cancel_op = cancel
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._failure: BaseException | None = None
        self._sess: Any = None
        self._switching = False
        self.skip = 0
        """Datapoints the next ``start`` drops before feeding (a resumed run's, `skip_steps`)."""

    @property
    def failure(self) -> BaseException | None:
        """The error that ended the thread early (an `InputDataError` or `InputProducerError`)."""
        return self._failure

    @property
    def thread(self) -> threading.Thread | None:
        """The feeding thread of the current run, None before ``start``."""
        return self._thread

    def start(self, sess: Any) -> None:
        """Start feeding the queue of `sess` (stopping a thread of an earlier start first)."""
        if self._thread is not None:
            self.stop()
        self._sess = sess
        self._stopping = threading.Event()
        self._failure = None
        opts = config_pb2.CallableOptions()
        # The enqueue is one small op: run it in this thread, not TensorFlow's pool
        # (a hand-over to a pool thread and back cost more than the op itself).
        opts.run_options.inter_op_thread_pool = -1
        opts.feed.extend(p.name for p in self._placeholders)
        opts.target.append(self._enqueue.name)
        put = sess._make_callable_from_options(opts)
        self._thread = threading.Thread(
            target=self._run, args=(put, self._stopping), name=f"feed {self._name}", daemon=True
        )
        if self.switch_interval_s is not None:
            _SWITCH_INTERVAL.lower(self.switch_interval_s)
            self._switching = True
        self._waiting_since = None
        self._abort_token = on_abort(self._name, self._abort)
        self._thread.start()
        if self._timeout is not None:
            self._watchdog = threading.Thread(
                target=self._watch,
                args=(self._stopping, self._timeout),
                name=f"watch {self._name}",
                daemon=True,
            )
            self._watchdog.start()

    def stop(self) -> None:
        """Close the queue (cancelling a blocked enqueue) and wait for the thread to end."""
        thread, self._thread = self._thread, None
        if self._switching:
            self._switching = False
            _SWITCH_INTERVAL.restore()
        if self._abort_token is not None:
            remove_on_abort(self._abort_token)
            self._abort_token = None
        if thread is None:
            return
        self._stopping.set()
        # The enqueue waiting on a full queue ends CANCELLED: expected, so TensorFlow's
        # warning about it is hidden (until the thread has ended, a few lines below).
        with tensorflow_lines_hidden():
            self._stop_thread(thread)

    def _stop_thread(self, thread: threading.Thread) -> None:
        """Cancel the enqueue, then join the watchdog and the feeding thread."""
        self._run_quietly(self._cancel_op)
        if self._watchdog is not None:
            self._watchdog.join()
            self._watchdog = None
        # A thread stuck in the iterable is not waited for after a timeout or an abort.
        stuck = aborting() or isinstance(self._failure, InputTimeoutError)
        waited = (
            min(self.stuck_join_timeout_s, self.join_timeout_s) if stuck else self.join_timeout_s
        )
        thread.join(waited)
        if thread.is_alive():
            logger.warning(
                "%s: the feeding thread is still busy in the iterable after %.1f s; it is a "
                "daemon thread and ends with the process",
                self._name,
                waited,
            )

    def _abort(self) -> None:
        """The second Ctrl-C: close the queue so a step waiting on it returns."""
        self._stopping.set()
        self._run_quietly(self._cancel_op)

    def _watch(self, stopping: threading.Event, timeout: float) -> None:
        """Fail the input when the iterable takes longer than `timeout` s for a datapoint."""
        wait = timeout
        while not stopping.wait(wait):
            since = self._waiting_since
            if since is None:
                wait = timeout
                continue
            waited = time.monotonic() - since
            if waited < timeout:
                wait = timeout - waited
                continue
            msg = timeout_message(self._name, waited, timeout, *self._position)
            stopping.set()
            self._fail(InputTimeoutError(msg))
            return

    def _run_quietly(self, op: Any) -> None:
        sess = self._sess
        if sess is None or getattr(sess, "_closed", False):
            return
        try:
            sess.run(op)
        except (tf.errors.OpError, RuntimeError) as err:
            logger.debug("%s: closing the queue: %s", self._name, err)

    def _run(self, put: Callable[..., Any], stopping: threading.Event) -> None:
        try:
            # The trainer's session is the thread's default one, as in the training loop:
            # an iterable may run a predictor of the trainer (a replay memory's player).
            with self._sess.as_default():
                self._produce(put, stopping)
        except _Ended:
            return
        except BaseException as err:
            self._fail(err)

    def _produce(self, put: Callable[..., Any], stopping: threading.Event) -> None:
        layout = self._layout
        timed = self._timeout is not None
        clock = time.monotonic
        passes = 0
        to_skip, self.skip = self.skip, 0  # once: a later start feeds from the first datapoint
        while not stopping.is_set():
            passes += 1
            count = 0
            if timed:
                self._position = (passes, 0)
                self._waiting_since = clock()
            it = iter(self._iterable)
            try:
                for dp in it:
                    if timed:
                        self._waiting_since = None
                    if to_skip:
                        to_skip -= 1
                        count += 1
                        continue
                    try:
                        values = conform_datapoint(dp, layout, InputDataError)
                    except InputDataError as err:
                        msg = (
                            f"{self._name}: datapoint #{count} of pass {passes} does not fit "
                            f"the input signature ({layout}): {err}"
                        )
                        raise _DataFault(msg) from None
                    try:
                        put(*values)
                    except (tf.errors.OpError, RuntimeError) as err:
                        if stopping.is_set() or getattr(self._sess, "_closed", False):
                            raise _Ended from None
                        msg = f"{self._name}: feeding the queue failed: {err}"
                        raise _DataFault(msg, InputProducerError) from err
                    count += 1
                    if stopping.is_set():
                        return
                    if timed:
                        self._position = (passes, count)
                        self._waiting_since = clock()
            finally:
                self._waiting_since = None
                close = getattr(it, "close", None)
                if callable(close):
                    close()
            if count == 0:
                msg = (
                    f"{self._name}: pass {passes} over the iterable yielded no datapoint; "
                    f"expected datapoints ({layout})"
                )
                raise _DataFault(msg)

    def _fail(self, err: BaseException) -> None:
        with self._fail_lock:
            if self._failure is not None:  # the first failure (e.g. a timeout) is kept
                return
            self._keep_failure(err)
        self._run_quietly(self._close_op)

    def _keep_failure(self, err: BaseException) -> None:
        if isinstance(err, InputTimeoutError):
            failure: BaseException = err
        elif isinstance(err, ParallelTimeoutError):  # the pool's own bound: the same words
            failure = InputTimeoutError(str(err))
            failure.__cause__ = err
        elif isinstance(err, _DataFault):
            failure = err.kind(str(err))
            failure.__cause__ = err.__cause__
        else:
            msg = f"{self._name}: the iterable raised {type(err).__name__}: {err}"
            failure = InputProducerError(msg)
            failure.__cause__ = err
        self._failure = failure
        logger.debug("%s: feeding stopped: %s", self._name, failure)


class SwitchInterval:
    """The interpreter's switch interval, lowered while any holder needs it, then restored.

    ``lower`` and ``restore`` pair up, from any thread: the first ``lower`` saves the
    interval in effect, each one lowers it to at most its value, and the last
    ``restore`` puts the saved interval back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._saved = 0.0

    @property
    def holders(self) -> int:
        """How many ``lower`` calls are not restored yet."""
        return self._holders

    def lower(self, seconds: float) -> None:
        """Make the switch interval at most `seconds` until the matching ``restore``."""
        with self._lock:
            if self._holders == 0:
                self._saved = sys.getswitchinterval()
            self._holders += 1
            if seconds < sys.getswitchinterval():
                sys.setswitchinterval(seconds)

    def restore(self) -> None:
        """End one ``lower``; the last one puts back the interval the first one found."""
        with self._lock:
            if self._holders == 0:
                return
            self._holders -= 1
            if self._holders == 0:
                sys.setswitchinterval(self._saved)


_SWITCH_INTERVAL = SwitchInterval()
"""The process's one switch-interval holder count, shared by every feeder."""


class _DataFault(Exception):
    """Raised inside the feeding thread: the failure to keep, of the given kind."""

    def __init__(self, msg: str, kind: type[Exception] = InputDataError) -> None:
        super().__init__(msg)
        self.kind = kind


class _Ended(Exception):
    """Raised inside the feeding thread: the queue was closed by ``stop`` or the session."""


class InputFeeder(_InputCallback):
    """Before training: reset the source's Python state, then start its feeding thread.

    After training (also after an error or Ctrl-C) the thread is stopped and joined,
    so no thread outlives the run. It runs on every worker, chief or not.

    Args:
        name: the source's description, for ``str``.
        reset: the source's ``reset_state``.
        feeder: the thread's owner.
    """

    def __init__(self, name: str, reset: Callable[[], None], feeder: QueueFeeder) -> None:
        self._name = name
        self._reset = reset
        self._feeder = feeder

    @property
    def feeder(self) -> QueueFeeder:
        """The thread's owner."""
        return self._feeder

    def input_failure(self) -> BaseException | None:
        """The error that stopped the feeding thread, or None."""
        return self._feeder.failure

    def explain_failure(self, err: BaseException) -> BaseException | None:
        """The feeding thread's error when it stopped, which the failed step does not tell.

        Bad data, the iterable's own error or a timeout closes the queue, so the step
        fails with TensorFlow's end-of-queue error, which says nothing of the cause.
        """
        return self._feeder.failure

    def _before_train(self) -> None:
        self._reset()
        self._feeder.start(self.trainer.sess)

    def _after_train(self) -> None:
        self._feeder.stop()

    def __str__(self) -> str:
        return f"InputFeeder({self._name})"
