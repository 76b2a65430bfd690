"""The cluster's plumbing: server facts, the done queue and check-in, serve_parameters, sessions."""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue as _queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers.compat import tf1
from towerkit.trainers._sesscreate import NewSessionCreator
from towerkit.trainers.parallel._health import (
    ClusterTimeouts,
    ClusterWatch,
    LivenessState,
    Prober,
    TaskAddress,
    TaskLostError,
    answer_within,
    close_within,
    dead_tasks,
    observe,
    task_addresses,
)
from towerkit.trainers.parallel._placed import placed_server

__all__ = ["DONE_QUEUE", "serve_parameters", "start_watch"]

logger = logging.getLogger("towerkit.trainers")

DONE_QUEUE = "towerkit_workers_done"
"""Shared name of the queue, one on each parameter server, where workers check in.

Each worker puts ``-1 - index`` when its training loop starts (it is alive: the
parameter server's watch bounds it by ``dead_after`` from then, though its probes may
never have reached it) and ``index`` when its training ends.
"""


def hello_value(task: int) -> int:
    """What worker `task` puts on the done queue when its loop starts (negative).

    >>> hello_value(0), hello_value(3), said_hello(-4)
    (-1, -4, 3)
    """
    return -1 - task


def said_hello(value: int) -> int:
    """The worker whose start `value` (from `hello_value`) announces."""
    return -1 - value


def _server_facts(server: Any) -> tuple[Any, str, int]:
    """(cluster, job name, task index) of a ``tf.compat.v1.train.Server``."""
    server_def = getattr(server, "server_def", None)
    if server_def is None or not isinstance(getattr(server, "target", None), (str, bytes)):
        msg = f"'server' must be a tf.compat.v1.train.Server; got {type(server).__name__}"
        raise TypeError(msg)
    cluster = tf1.train.ClusterSpec(server_def.cluster)
    missing = [job for job in ("ps", "worker") if job not in cluster.jobs]
    if missing:
        msg = (
            f"the server's cluster needs jobs 'ps' and 'worker'; it has {sorted(cluster.jobs)}, "
            f"missing {missing}"
        )
        raise ValueError(msg)
    return cluster, server_def.job_name, int(server_def.task_index)


def _target(server: Any) -> str:
    target = server.target
    return target.decode() if isinstance(target, bytes) else target


def _done_queue(ps_task: int, num_workers: int) -> Any:
    with tf1.device(f"/job:ps/task:{ps_task}"):
        return tf1.FIFOQueue(
            2 * max(num_workers, 1),
            [tf.int32],
            shapes=[[]],
            shared_name=DONE_QUEUE,
            name=f"workers_done_ps{ps_task}",
        )


def serve_parameters(
    server: Any = None,
    timeout: float | None = None,
    poll_seconds: float = 1.0,
    timeouts: ClusterTimeouts | None = None,
) -> list[int]:
    """Serve as a parameter server until every worker has finished training; then return.

    Call it in each ``ps`` process instead of ``server.join()`` (which never returns).
    Each worker's distributed trainer checks in on every parameter server when its
    training ends, normally or not; once all workers have, this returns and the
    process can exit. The variables stay on the server while it runs.

    It never waits for a dead worker: every ``timeouts.check_every`` seconds it
    checks that the workers still to check in answer a connection (`is_up`), and
    each worker checks in a first time when its training loop starts. A worker
    known alive (it answered, or checked in at its start) that is then unheard for
    ``timeouts.dead_after`` seconds (killed, crashed, stopped, its machine gone), or
    that never comes up within ``timeouts.start_within`` seconds, is dead: one error
    line names it (job, index, address), the others are still served, and once none
    is left to wait for, `TaskLostError` is raised naming every dead worker. So a
    worker lost once training runs is named within ``dead_after + 2 * check_every``
    seconds (with the defaults, 24 s), one that never starts within ``start_within``.

    Args:
        server: this process's ``tf.compat.v1.train.Server``, of job ``ps``; None:
            started where the environment places it (`cluster_placement`: ``TF_CONFIG``
            or a SLURM step; this process must be a ``ps`` task there).
        timeout: seconds to wait at most, whatever the workers do (None: no limit
            but the dead-worker checks).
        poll_seconds: how often to check the deadline while waiting.
        timeouts: the health-check bounds (default: `ClusterTimeouts()`).

    Returns:
        The task indices of the workers, in the order they finished.

    Raises:
        ValueError: the server is not a ``ps`` task.
        TimeoutError: `timeout` passed before every worker finished; the message
            names the ones still missing.
        TaskLostError: a worker died before checking in; the message names it.
        RuntimeError: the check-in queue on this server failed (logged first).
    """
    server = placed_server(server, 0, job="ps")
    cluster, job, task = _server_facts(server)
    if job != "ps":
        msg = f"serve_parameters runs in a 'ps' process; this server is job {job!r}, task {task}"
        raise ValueError(msg)
    timeouts = ClusterTimeouts() if timeouts is None else timeouts
    if not isinstance(timeouts, ClusterTimeouts):
        msg = f"'timeouts' must be a ClusterTimeouts; got {type(timeouts).__name__}"
        raise TypeError(msg)
    num_workers = cluster.num_tasks("worker")
    graph = tf.Graph()
    with graph.as_default():
        queue = _done_queue(task, num_workers)
        take, close = queue.dequeue(), queue.close(cancel_pending_enqueues=False)
    done: list[int] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    logger.info("ps task %d: serving until %d workers are done", task, num_workers)
    config = tf1.ConfigProto(device_filters=[f"/job:ps/task:{task}"])
    workers = task_addresses(cluster.as_dict(), ["worker"])
    watch = ClusterWatch(workers, timeouts, name=f"ps{task}-watch").start()
    taken: _queue.Queue[int | None] = _queue.Queue()
    try:
        with tf1.Session(_target(server), graph=graph, config=config) as sess:
            # A dequeue cut by a deadline can drop the value it had just taken (TensorFlow
            # skips the cancelled attempt after the queue handed it the element): one
            # thread takes with no deadline, until the queue is closed, and this loop
            # polls what it took.
            taker = threading.Thread(
                target=_take_all, args=(sess, take, taken), name=f"ps{task}-check-ins", daemon=True
            )
            taker.start()
            try:
                while len(set(done) | {t.index for t, _ in watch.lost}) < num_workers:
                    try:
                        value = taken.get(timeout=poll_seconds)
                    except _queue.Empty:
                        if deadline is not None and time.monotonic() > deadline:
                            waiting = sorted(set(range(num_workers)) - set(done))
                            msg = (
                                f"ps task {task}: workers {waiting} did not finish within "
                                f"{timeout:g} s (done: {done})"
                            )
                            raise TimeoutError(msg) from None
                        continue
                    if value is None:  # the queue failed (logged): nothing more will come
                        waiting = sorted(set(range(num_workers)) - set(done))
                        msg = f"ps task {task}: its check-in queue failed; waiting for {waiting}"
                        raise RuntimeError(msg)
                    if value < 0:  # a worker's loop started: alive now, whatever probes saw
                        watch.heard_from("worker", said_hello(value))
                        continue
                    done.append(value)
                    watch.forget("worker", value)
                    logger.info("ps task %d: worker %d is done", task, value)
            finally:
                # closed, the queue still gives what it holds, then ends the taker: a worker
                # that checked in and ended at once (found dead before its check-in was
                # taken) is done, not lost
                with contextlib.suppress(tf.errors.OpError):
                    sess.run(close, options=tf1.RunOptions(timeout_in_ms=5_000))
                taker.join(timeouts.close_seconds)
            done.extend(_rest(taken, done))
    finally:
        watch.stop()
    lost = [(t, why) for t, why in watch.lost if t.index not in done]
    if lost:
        names = "; ".join(f"{t} {why}" for t, why in lost)
        msg = f"ps task {task}: lost {names}; the workers done: {done}"
        raise TaskLostError(msg, lost[0][0])
    return done


def _take_all(sess: Any, take: Any, into: _queue.Queue[int | None]) -> None:
    """Put every value `take` gives into `into`, then None once the queue is closed."""
    try:
        while True:
            into.put(int(sess.run(take)))
    except tf.errors.OutOfRangeError:  # closed, and nothing left in it
        pass
    except tf.errors.OpError as err:
        logger.warning("the parameter server's check-in queue failed: %s", err)
    finally:
        into.put(None)


def _rest(taken: _queue.Queue[int | None], done: list[int]) -> list[int]:
    """The workers' check-ins left in `taken` that `done` does not hold yet, in order."""
    rest: list[int] = []
    while True:
        try:
            value = taken.get_nowait()
        except _queue.Empty:
            return rest
        if value is not None and value >= 0 and value not in done and value not in rest:
            rest.append(value)


_CHIEF = "/job:worker/task:0/device:CPU:0"


def _chief_past_start() -> Any:
    """The flag the chief initializes on its own task once its session reached every ps.

    Outside every collection; the same shared name in every graph.
    """
    with tf1.device(_CHIEF), tf1.name_scope(None):
        return tf1.Variable(
            False, trainable=False, collections=[], name="towerkit_chief_past_start"
        )


def start_watch(
    ps: Sequence[TaskAddress],
    timeouts: ClusterTimeouts,
    on_dead: Callable[[TaskAddress, str], None],
    started: threading.Event,
    target: str | None,
) -> ClusterWatch:
    """The watch of the parameter servers while a worker's session starts.

    With `target` (a non-chief worker's server), a daemon thread asks the chief, every
    ``check_every`` until `started` is set, whether its session has reached every
    parameter server (a session's first call waits for all of them); once it has, the
    job is past its start, and a parameter server this worker never reached is bound
    by ``dead_after`` (`ClusterWatch.vouch_for_all`) instead of ``start_within``.
    """
    watch = ClusterWatch(ps, timeouts, on_dead=on_dead, name="start-watch").start()
    if target is not None:
        args = (watch, timeouts, started, target)
        asker = threading.Thread(target=_ask_chief, args=args, name="chief-started", daemon=True)
        asker.start()
        # A short run can end while the question's call is still in flight (its first
        # call registers a graph on the chief, with no deadline): the call returning while
        # the interpreter finalizes would end the daemon thread inside TensorFlow and
        # abort the process (SIGABRT, "exception not rethrown"). At exit, wait for it.
        atexit.register(asker.join, timeouts.close_seconds)
    return watch


def _ask_chief(
    watch: ClusterWatch, timeouts: ClusterTimeouts, started: threading.Event, target: str
) -> None:
    graph = tf1.Graph()
    with graph.as_default():
        past_start = tf1.is_variable_initialized(_chief_past_start())
    config = tf1.ConfigProto(operation_timeout_in_ms=timeouts.operation_timeout_ms)
    config.device_filters.append("/job:worker/task:0")
    sess = tf1.Session(target=target, graph=graph, config=config)
    try:
        while not started.is_set():
            with contextlib.suppress(tf.errors.OpError):
                if sess.run(past_start):
                    logger.info("the chief is past its start: every parameter server was up")
                    watch.vouch_for_all()
                    return
            started.wait(timeouts.check_every)
    finally:
        close_within(sess, timeouts.close_seconds)


def session_start_ops(
    chief_init: Sequence[Any] | None,
) -> tuple[Any, list[Any], tuple[Any, Any, Any], Any]:
    """The ops of a worker's session start, in the default graph.

    Returns ``(ready, local_init, chief_done, raise_done)``: the names of the parameter
    servers' variables not initialized yet; the initializers of every other variable
    and of the tables; the (initializer, is-initialized, value) of the flag the chief
    raises once its ``session_init`` has run (only then are the global values final),
    the initializer grouped, on the chief (`chief_init` given, maybe empty), with
    `chief_init` and the flag on the chief's own task that says its session is past its
    start; the op that raises it.
    """
    global_vars = tf1.global_variables()
    on_ps = [v for v in global_vars if "/job:ps" in v.device]
    others = [v for v in global_vars + tf1.local_variables() if "/job:ps" not in v.device]
    ready = tf1.report_uninitialized_variables(on_ps, name="ps_variables_not_ready")
    local_init = [v.initializer for v in others]
    local_init += list(tf1.get_collection(tf1.GraphKeys.TABLE_INITIALIZERS))
    with tf1.device(on_ps[0].device if on_ps else None), tf1.name_scope(None):
        # Outside every collection: never saved, restored or initialized by others.
        done = tf1.Variable(False, trainable=False, collections=[], name="chief_init_done")
        raise_done = done.assign(True, read_value=False)
        init = tf.group(
            done.initializer,
            *([] if chief_init is None else [_chief_past_start().initializer]),
            *(chief_init or ()),
        )
        chief_done = (init, tf1.is_variable_initialized(done), done.read_value())
    # Both are run by the session creator, which TensorFlow's use-tracking of these two
    # functions' results does not see: without this, it logs an error ("Object was
    # never used") when they are collected.
    ready.mark_used()
    chief_done[1].mark_used()
    return ready, local_init, chief_done, raise_done


class _DistributedSessionCreator:
    """Sessions on the cluster: the chief initializes, the other workers wait for it."""

    def __init__(
        self,
        target: str,
        config: Any,
        is_chief: bool,
        ready_op: Any,
        local_init: Sequence[Any],
        timeout: float,
        chief_done: tuple[Any, Any, Any],
        chief: TaskAddress | None = None,
        timeouts: ClusterTimeouts | None = None,
    ) -> None:
        self._target = target
        self._config = config
        self._is_chief = is_chief
        self._ready_op = ready_op
        self._local_init = list(local_init)
        self._timeout = timeout
        # (initializer, is-initialized, value) of the flag the chief raises once its
        # session_init has run: only then are the global values final.
        self._done_init, self._done_exists, self._done_value = chief_done
        self._chief = chief
        self._timeouts = ClusterTimeouts() if timeouts is None else timeouts

    def _check_chief(self, state: LivenessState, prober: Prober) -> LivenessState:
        """One health check of the chief while waiting; raise when it is dead."""
        if self._chief is None:
            return state
        found = prober.reach(self._chief, answer_within(self._timeouts))
        state = observe(state, self._chief, found, time.monotonic(), self._timeouts)
        for task, why in dead_tasks(state, [self._chief], time.monotonic(), self._timeouts):
            msg = f"the chief, {task}, died before initializing the variables: {why}"
            logger.error("%s", msg)
            raise TaskLostError(msg, task)
        return state

    def _chief_finished(self, sess: Any) -> bool:
        return bool(sess.run(self._done_exists)) and bool(sess.run(self._done_value))

    def create_session(self) -> Any:
        """The chief's session once it initialized the variables, another's once the chief has.

        A session whose start fails is closed (waiting the close bound at most).
        """
        if self._is_chief:
            sess = NewSessionCreator(target=self._target, config=self._config).create_session()
        else:
            sess = tf1.Session(
                target=self._target, graph=tf1.get_default_graph(), config=self._config
            )
        try:
            if self._is_chief:
                sess.run(self._done_init)
                logger.info("chief: initialized the variables on the parameter servers")
            else:
                self._wait_for_chief(sess)
        except BaseException:
            close_within(sess, self._timeouts.close_seconds)
            raise
        return sess

    def _wait_for_chief(self, sess: Any) -> None:
        state = LivenessState(since=time.monotonic())
        prober = Prober()
        try:
            self._wait_until_initialized(sess, state, prober)
        finally:
            prober.close()
        if self._local_init:
            sess.run(self._local_init)

    def _wait_until_initialized(self, sess: Any, state: LivenessState, prober: Prober) -> None:
        deadline = time.monotonic() + self._timeout
        waited = False
        while True:
            pending = sess.run(self._ready_op)
            if len(pending) == 0 and self._chief_finished(sess):
                break
            state = self._check_chief(state, prober)
            if time.monotonic() > deadline:
                names = [p.decode() if isinstance(p, bytes) else str(p) for p in pending[:10]]
                msg = f"the chief did not initialize the variables within {self._timeout:g} s; " + (
                    f"still uninitialized: {names}"
                    if names
                    else "they are initialized but its session_init has not finished"
                )
                raise TimeoutError(msg)
            if not waited:
                logger.info("waiting for the chief to initialize %d variables", len(pending))
                waited = True
            time.sleep(0.5)


def lost_error(
    worker: int, task: TaskAddress, why: str, at: tuple[int, int] | None
) -> TaskLostError:
    """The error of worker `worker` that lost `task` (`why`), at ``(epoch, global step)`` `at`.

    `at` is None while the session starts.
    """
    role = "the chief" if task.job == "worker" else "a parameter server"
    msg = f"worker {worker} lost {role}, {task}: {why}; " + (
        f"training stopped at epoch {at[0]}, global step {at[1]}"
        if at is not None
        else "before the first step (the session was starting)"
    )
    if task.job == "worker":
        msg += " (only the chief saves: a worker does not train on without it)"
    return TaskLostError(msg, task)


def check_in_ops(task: int, num_workers: int, num_ps: int, after: Sequence[Any]) -> tuple[Any, Any]:
    """``(hello, check_in)``: worker `task` puts its start, then its end, on every done queue.

    The end is put after the ops `after` (the chief's flag that its end is normal).
    """
    queues = [_done_queue(k, num_workers) for k in range(num_ps)]
    hello = tf.group(
        *[q.enqueue(tf.constant(hello_value(task), tf.int32)) for q in queues], name="hello"
    )
    with tf1.control_dependencies(list(after)):
        check_in = tf.group(
            *[q.enqueue(tf.constant(task, tf.int32)) for q in queues], name="check_in"
        )
    return hello, check_in


class _CheckIn(Callback):
    """Tell every parameter server this worker's loop started, then that its training ended.

    At the start: its index as `hello_value`, so that each parameter server knows it
    alive. At the end, first the trainer stops watching the other tasks (they may end
    normally from now on); nothing is put when a parameter server is known lost.
    """

    _chief_only = False
    name_scope = "CheckIn"

    def __init__(
        self,
        ops: tuple[Any, Any],
        timeout_ms: int,
        finishing: Callable[[], bool],
        servers: Sequence[TaskAddress] = (),
    ) -> None:
        self._hello, self._enqueue = ops
        self._servers = ", ".join(map(str, servers)) or "the parameter servers"
        self._options = tf1.RunOptions(timeout_in_ms=timeout_ms)
        self._finishing = finishing

    def _before_train(self) -> None:
        try:
            self.trainer.sess.run(self._hello, options=self._options)
        except tf.errors.OpError as err:
            logger.warning("could not tell the parameter servers this worker started: %s", err)

    def _after_train(self) -> None:
        if not self._finishing():
            logger.warning("a parameter server is lost: this worker does not check in")
            return
        # The check-in is the run's first call of its op: TensorFlow registers it on every
        # parameter server with no deadline, so a server that stopped answering (and the
        # health watch has stopped by now) would hold this call forever. Bound it.
        seconds = self._options.timeout_in_ms / 1000

        def check_in() -> None:
            try:
                self.trainer.sess.run(self._enqueue, options=self._options)
            except tf.errors.OpError as err:
                logger.warning("could not tell %s this worker is done: %s", self._servers, err)

        thread = threading.Thread(target=check_in, name="check-in", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            logger.warning(
                "could not tell %s this worker is done: no answer within %g s; going on",
                self._servers,
                seconds,
            )


class _PushToShadows(Callback):
    """On the chief, copy tower 0's non-trainable variables to their global copies every epoch."""

    _chief_only = True
    name_scope = "PushToShadows"

    def __init__(self, op: Any) -> None:
        self._op = op

    def _trigger_epoch(self) -> None:
        self.trainer.sess.run(self._op)

    def _after_train(self) -> None:
        self.trainer.sess.run(self._op)
