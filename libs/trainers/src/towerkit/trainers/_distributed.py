"""Distributed trainers on TensorFlow's own runtime: parameter servers and worker processes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from towerkit.callbacks import Callback, HookedSession
from towerkit.towers import TowerFunc, resolve_devices
from towerkit.towers.compat import tf1
from towerkit.trainers._allreduce import scale_gradient, sum_gradients
from towerkit.trainers._builder import build_towers, warn_missing_devices
from towerkit.trainers._dataparallel import tower_variable_key
from towerkit.trainers._errors import TrainerStateError
from towerkit.trainers._grad_sync import align_tower_grads, make_replicas_local
from towerkit.trainers._sesscreate import NewSessionCreator
from towerkit.trainers._tower import SingleCostTrainer
from towerkit.trainers._trainer_parts import ChiefOwnsLogdir, SessionInitThenRun

__all__ = [
    "DONE_QUEUE",
    "DistributedTrainerBase",
    "DistributedTrainerParameterServer",
    "DistributedTrainerReplicated",
    "serve_parameters",
]

logger = logging.getLogger("towerkit.trainers")

DONE_QUEUE = "towerkit_workers_done"
"""Shared name of the queue, one on each parameter server, where finished workers check in."""


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
            max(num_workers, 1),
            [tf.int32],
            shapes=[[]],
            shared_name=DONE_QUEUE,
            name=f"workers_done_ps{ps_task}",
        )


def serve_parameters(
    server: Any, timeout: float | None = None, poll_seconds: float = 1.0
) -> list[int]:
    """Serve as a parameter server until every worker has finished training; then return.

    Call it in each ``ps`` process instead of ``server.join()`` (which never returns).
    Each worker's distributed trainer checks in on every parameter server when its
    training ends, normally or not; once all workers have, this returns and the
    process can exit. The variables stay on the server while it runs.

    Args:
        server: this process's ``tf.compat.v1.train.Server``, of job ``ps``.
        timeout: seconds to wait at most (None: no limit).
        poll_seconds: how often to check the deadline while waiting.

    Returns:
        The task indices of the workers, in the order they finished.

    Raises:
        ValueError: the server is not a ``ps`` task.
        TimeoutError: `timeout` passed before every worker finished; the message
            names the ones still missing.
    """
    cluster, job, task = _server_facts(server)
    if job != "ps":
        msg = f"serve_parameters runs in a 'ps' process; this server is job {job!r}, task {task}"
        raise ValueError(msg)
    num_workers = cluster.num_tasks("worker")
    graph = tf.Graph()
    with graph.as_default():
        take = _done_queue(task, num_workers).dequeue()
    done: list[int] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    options = tf1.RunOptions(timeout_in_ms=max(int(poll_seconds * 1000), 1))
    logger.info("ps task %d: serving until %d workers are done", task, num_workers)
    config = tf1.ConfigProto(device_filters=[f"/job:ps/task:{task}"])
    with tf1.Session(_target(server), graph=graph, config=config) as sess:
        while len(done) < num_workers:
            try:
                done.append(int(sess.run(take, options=options)))
                logger.info("ps task %d: worker %d is done", task, done[-1])
            except tf.errors.DeadlineExceededError:
                if deadline is not None and time.monotonic() > deadline:
                    waiting = sorted(set(range(num_workers)) - set(done))
                    msg = (
                        f"ps task {task}: workers {waiting} did not finish within "
                        f"{timeout:g} s (done: {done})"
                    )
                    raise TimeoutError(msg) from None
    return done


class _CheckIn(Callback):
    """Put this worker's index on every parameter server's done queue at the end of training."""

    _chief_only = False
    name_scope = "CheckIn"

    def __init__(self, enqueue: Any, timeout_ms: int) -> None:
        self._enqueue = enqueue
        self._options = tf1.RunOptions(timeout_in_ms=timeout_ms)

    def _after_train(self) -> None:
        try:
            self.trainer.sess.run(self._enqueue, options=self._options)
        except tf.errors.OpError as err:
            logger.warning("could not tell the parameter servers this worker is done: %s", err)


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

    def _chief_finished(self, sess: Any) -> bool:
        return bool(sess.run(self._done_exists)) and bool(sess.run(self._done_value))

    def create_session(self) -> Any:
        if self._is_chief:
            sess = NewSessionCreator(target=self._target, config=self._config).create_session()
            sess.run(self._done_init)
            logger.info("chief: initialized the variables on the parameter servers")
            return sess
        graph = tf1.get_default_graph()
        sess = tf1.Session(target=self._target, graph=graph, config=self._config)
        deadline = time.monotonic() + self._timeout
        waited = False
        while True:
            pending = sess.run(self._ready_op)
            if len(pending) == 0 and self._chief_finished(sess):
                break
            if time.monotonic() > deadline:
                sess.close()
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
        if self._local_init:
            sess.run(self._local_init)
        return sess


class DistributedTrainerBase(ChiefOwnsLogdir, SingleCostTrainer):
    """Training on a TensorFlow cluster: a ``worker`` process per machine, ``ps`` processes.

    The cluster is the server's: jobs ``ps`` (parameter servers, which call
    `serve_parameters`) and ``worker`` (each builds the model on its devices and runs
    this trainer). Worker 0 is the chief: it initializes the variables on the
    parameter servers, runs ``session_init`` (other workers take the values from the
    parameter servers, waiting for the chief) and runs the chief-only callbacks, so
    only it writes checkpoints and statistics (only the chief creates or moves the
    log directory; other workers keep its path). The global step lives on the
    parameter servers and counts the chief's steps (each worker's
    ``trainer.global_step`` counts from the value it found at start). When
    training loop ends, normally or not, each worker checks in on every parameter
    server, so `serve_parameters` returns once all have and every process exits (a
    worker that fails before its loop starts never checks in: give
    `serve_parameters` a timeout).

    Without GPUs, towers go to logical CPU devices ``/job:worker/task:<i>/cpu:<k>``:
    create each worker's server with a config that has them, e.g.
    ``tf.compat.v1.train.Server(cluster, "worker", i,
    config=session_config_for_devices(resolve_devices(gpus)))``: a worker's devices
    come from its server's config. Only the default session creator or a
    `NewSessionCreator` is accepted; its config is used for the session on the
    cluster, whose device filters default to the parameter servers and this worker
    (so a worker never waits for the others).

    These trainers are kept for completeness: TensorFlow no longer maintains its
    graph-mode distributed runtime, its performance is modest, and model saving
    and restoring in distributed runs have seen little use. Prefer `HorovodTrainer`.

    Attributes:
        WAIT_FOR_CHIEF_SECONDS: how long a non-chief worker waits for the chief to
            initialize the variables before giving up.
        CHECK_IN_TIMEOUT_MS: how long a worker tries to check in at the end.
    """

    WAIT_FOR_CHIEF_SECONDS: float = 600.0
    CHECK_IN_TIMEOUT_MS: int = 30_000

    def __init__(self, gpus: int | Sequence[int], server: Any) -> None:
        cluster, job, task = _server_facts(server)
        if job != "worker":
            msg = (
                f"distributed trainers run in 'worker' processes; this server is job {job!r}, "
                f"task {task}: a 'ps' process calls serve_parameters(server) instead"
            )
            raise ValueError(msg)
        super().__init__()
        self._server = server
        self._cluster = cluster
        self._task = task
        self._num_workers = cluster.num_tasks("worker")
        self._num_ps = cluster.num_tasks("ps")
        self.is_chief = task == 0
        self._worker = f"/job:worker/task:{task}"
        self._devices = tuple(f"{self._worker}{d}" for d in resolve_devices(gpus))
        self._check_in: Any = None

    @property
    def server(self) -> Any:
        """The ``tf.compat.v1.train.Server`` of this worker."""
        return self._server

    @property
    def task_index(self) -> int:
        """This worker's index in job ``worker`` (0 is the chief)."""
        return self._task

    @property
    def num_workers(self) -> int:
        """Workers in the cluster."""
        return self._num_workers

    @property
    def devices(self) -> tuple[str, ...]:
        """This worker's tower devices, with job and task."""
        return self._devices

    def _ps_device(self, tower_device: str) -> Any:
        return tf1.train.replica_device_setter(
            ps_tasks=self._num_ps, worker_device=tower_device, cluster=self._cluster
        )

    def setup_graph(
        self,
        inputs_desc: Sequence[tf.TensorSpec],
        input: Any,
        get_cost_fn: Callable[..., Any],
        get_opt_fn: Callable[[], Any],
    ) -> list[Callback]:
        """As `SingleCostTrainer.setup_graph`; the global step goes to the parameter servers."""
        self._require_phase("setup_graph", "new")
        with self._graph.as_default(), tf1.device("/job:ps/task:0"):
            self._ensure_global_step()
        with self._graph.as_default():
            self._check_in = tf.group(
                *[
                    _done_queue(k, self._num_workers).enqueue(tf.constant(self._task, tf.int32))
                    for k in range(self._num_ps)
                ],
                name="check_in",
            )
        return super().setup_graph(inputs_desc, input, get_cost_fn, get_opt_fn)

    def setup_callbacks(self, callbacks: Sequence[Callback] | None, monitors: Any) -> None:
        """As `Trainer.setup_callbacks`, plus the check-in at the end, after the other callbacks."""
        cbs = list(callbacks or [])
        if self._check_in is not None:
            cbs.append(_CheckIn(self._check_in, self.CHECK_IN_TIMEOUT_MS))
        super().setup_callbacks(cbs, monitors)

    def initialize(self, session_creator: Any, session_init: Any) -> None:
        """Create the session on the cluster (the chief initializes, others wait), hook callbacks.

        Raises:
            TypeError: a session creator other than a `NewSessionCreator`.
            TimeoutError: (non-chief) the chief did not initialize in time.
        """
        if not isinstance(session_creator, NewSessionCreator):
            msg = (
                "distributed trainers make their own sessions on the cluster: pass no "
                "session_creator (or a NewSessionCreator, whose config is used); got "
                f"{type(session_creator).__name__}. Configure devices through the server's config"
            )
            raise TypeError(msg)
        if session_creator.target:
            logger.warning(
                "ignoring the session creator's target %r: sessions connect to this worker's server",
                session_creator.target,
            )
        with self._graph.as_default():
            global_vars = tf1.global_variables()
            on_ps = [v for v in global_vars if "/job:ps" in v.device]
            others = [v for v in global_vars + tf1.local_variables() if "/job:ps" not in v.device]
            ready = tf1.report_uninitialized_variables(on_ps, name="ps_variables_not_ready")
            local_init = [v.initializer for v in others] + list(
                tf1.get_collection(tf1.GraphKeys.TABLE_INITIALIZERS)
            )
            after = self._after_init_ops()
            with tf1.device(on_ps[0].device if on_ps else None), tf1.name_scope(None):
                # Outside every collection: never saved, restored or initialized by others.
                done = tf1.Variable(False, trainable=False, collections=[], name="chief_init_done")
                raise_done = done.assign(True, read_value=False)
                chief_done = (
                    done.initializer,
                    tf1.is_variable_initialized(done),
                    done.read_value(),
                )
            # Both are run by the session creator, which TensorFlow's use-tracking of
            # these two functions' results does not see: without this, it logs an error
            # ("Object was never used") when they are collected.
            ready.mark_used()
            chief_done[1].mark_used()
        if self.is_chief:
            after = [*after, raise_done]
        config = tf1.ConfigProto()
        config.CopyFrom(session_creator.config)
        if not config.device_filters:
            config.device_filters.extend(["/job:ps", self._worker])
        creator = _DistributedSessionCreator(
            _target(self._server),
            config,
            self.is_chief,
            ready,
            local_init,
            self.WAIT_FOR_CHIEF_SECONDS,
            chief_done,
        )
        if not self.is_chief and session_init is not None:
            logger.info("worker %d: session_init runs on the chief only: skipped", self._task)
            session_init = None
        wrapped = SessionInitThenRun(session_init, after, "copied the global variables locally")
        super().initialize(creator, wrapped)
        warn_missing_devices(self.sess, self._devices)

    def _after_init_ops(self) -> list[Any]:
        return []

    def initialize_hooks(self) -> None:
        """As `Trainer.initialize_hooks`; only the chief increments the shared global step."""
        step_op = self._step_op if self.is_chief else None
        self.hooked_sess = HookedSession(self.sess, self._callbacks.cbs, step_op=step_op)

    def _average_on_worker(self, rows: Sequence[Sequence[tuple[Any, Any]]]) -> list[Any]:
        n = len(self._devices)
        out = []
        with tf1.device(f"{self._worker}/cpu:0"), tf1.name_scope("average_gradients"):
            for row in rows:
                out.append(scale_gradient(sum_gradients([g for g, _ in row]), 1.0 / n))
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(task={self._task}, workers={self._num_workers}, "
            f"ps={self._num_ps}, devices={list(self._devices)}, phase={self._phase!r})"
        )


class DistributedTrainerParameterServer(DistributedTrainerBase):
    """Distributed training with the one copy of the variables on the parameter servers.

    Each worker builds one tower per local device, all sharing the variables, which
    are spread over the parameter servers (round robin). The gradients of a worker's
    towers are averaged on the worker and applied to the variables on the
    parameter servers; the gradients of different workers are not averaged: each
    worker applies its own, as they come (with or without locking, as the
    optimizer does). Each worker reads the variables once per step into a cache on
    ``caching_device``.

    Args:
        gpus: a number of towers, or a list of GPU ids, on each worker.
        server: this worker's ``tf.compat.v1.train.Server``.
        caching_device: ``'cpu'`` (the worker's CPU) or ``'gpu'`` (tower 0's device):
            where variables read from the parameter servers are cached.

    Raises:
        TypeError, ValueError: bad arguments, or a server that is not a worker.
    """

    def __init__(self, gpus: int | Sequence[int], server: Any, caching_device: str = "cpu") -> None:
        if caching_device not in ("cpu", "gpu"):
            msg = f"'caching_device' must be 'cpu' or 'gpu'; got {caching_device!r}"
            raise ValueError(msg)
        super().__init__(gpus, server)
        self._caching = caching_device

    @property
    def caching_device(self) -> str:
        """Where variables read from the parameter servers are cached: ``'cpu'`` or ``'gpu'``."""
        return self._caching

    def _setup_graph(
        self, input: Any, get_cost_fn: TowerFunc, get_opt_fn: Callable[[], Any]
    ) -> list[Callback]:
        cache = f"{self._worker}/cpu:0" if self._caching == "cpu" else self._devices[0]
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        setters = [self._ps_device(d) for d in self._devices]
        with tf1.variable_scope(
            tf1.get_variable_scope(), caching_device=cache, auxiliary_name_scope=False
        ):
            tower_grads = build_towers(setters, get_grads, [""] * len(self._devices))
        rows = align_tower_grads(tower_grads)
        averaged = self._average_on_worker(rows)
        opt = get_opt_fn()
        self.train_op = opt.apply_gradients(
            [(g, row[0][1]) for g, row in zip(averaged, rows)], name="train_op"
        )
        return []


class DistributedTrainerReplicated(DistributedTrainerBase):
    """Distributed training with a copy of the model on every local device of each worker.

    Each worker builds one tower per local device, each with its own copy of the
    variables (local variables, under ``tower<k>/``). A global copy of every tower
    variable, under its plain name, lives on the parameter servers. Every step, the
    gradients of a worker's towers are averaged on the worker and applied to the
    global copy (as in `DistributedTrainerParameterServer`, the gradients of
    different workers are not averaged), then every local copy of the trainable
    variables takes the new global values. At the start every local copy takes the
    global values; the chief copies tower 0's non-trainable variables (e.g. moving
    statistics) to the global copy after every epoch and at the end, so checkpoints,
    which hold the global copy under plain names, load into a single-tower graph.

    Args:
        gpus: a number of towers, or a list of GPU ids, on each worker.
        server: this worker's ``tf.compat.v1.train.Server``.

    Raises:
        TypeError, ValueError: bad arguments, or a server that is not a worker.
    """

    def __init__(self, gpus: int | Sequence[int], server: Any) -> None:
        super().__init__(gpus, server)
        self._initial_sync: Any = None

    def _setup_graph(
        self, input: Any, get_cost_fn: TowerFunc, get_opt_fn: Callable[[], Any]
    ) -> list[Callback]:
        n = len(self._devices)
        graph = self._graph
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        tower_grads = build_towers(self._devices, get_grads, [f"tower{k}" for k in range(n)])
        rows = align_tower_grads(tower_grads)
        trainable = {id(v) for v in tf1.trainable_variables()}
        local_copies = make_replicas_local(graph, n, first=0)
        shadows: dict[str, Any] = {}
        pushes = []
        with (
            tf1.device(self._ps_device(f"{self._worker}/cpu:0")),
            tf1.name_scope(None),
            tf1.variable_scope(tf1.VariableScope(reuse=False, name=""), auxiliary_name_scope=False),
        ):
            for v in local_copies:
                if not v.op.name.startswith("tower0/"):
                    continue
                key = tower_variable_key(v.op.name)
                is_trainable = id(v) in trainable
                shadow = tf1.get_variable(
                    key,
                    initializer=v.initial_value,
                    dtype=v.dtype.base_dtype,
                    trainable=is_trainable,
                )
                shadows[key] = shadow
                if not is_trainable:
                    pushes.append(shadow.assign(v.read_value(), read_value=False))
        averaged = self._average_on_worker(rows)
        opt = get_opt_fn()
        apply = opt.apply_gradients(
            [(g, shadows[tower_variable_key(row[0][1].op.name)]) for g, row in zip(averaged, rows)],
            name="apply_gradients",
        )
        copies, initial = [], []
        for v in local_copies:
            shadow = shadows.get(tower_variable_key(v.op.name))
            if shadow is None:
                continue
            with tf1.device(v.device):
                initial.append(v.assign(shadow.read_value(), read_value=False))
        with tf1.control_dependencies([apply]):
            for row in rows:
                for _, v in row:
                    shadow = shadows[tower_variable_key(v.op.name)]
                    with tf1.device(v.device):
                        copies.append(v.assign(shadow.read_value(), read_value=False))
        with tf1.name_scope(None):
            self.train_op = tf.group(*copies, name="train_op")
            self._initial_sync = tf.group(*initial, name="sync_from_global")
        if pushes:
            with tf1.name_scope(None):
                return [_PushToShadows(tf.group(*pushes, name="push_to_global"))]
        return []

    def _after_init_ops(self) -> list[Any]:
        if self._initial_sync is None:
            msg = "DistributedTrainerReplicated.initialize needs setup_graph first"
            raise TrainerStateError(msg)
        return [self._initial_sync]
