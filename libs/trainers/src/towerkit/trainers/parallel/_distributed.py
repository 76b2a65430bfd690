"""Distributed trainers on TensorFlow's own runtime: parameter servers and worker processes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from towerkit.callbacks import Callback, HookedSession
from towerkit.towers import FLOAT32, Precision, TowerFn, TowerFunc, resolve_devices
from towerkit.towers.compat import tf1
from towerkit.trainers._errors import TrainerStateError
from towerkit.trainers._seams import OptimizerFactory
from towerkit.trainers._sesscreate import NewSessionCreator
from towerkit.trainers._tower import SingleCostTrainer
from towerkit.trainers.parallel._allreduce import average_rows
from towerkit.trainers.parallel._builder import build_towers, warn_missing_devices
from towerkit.trainers.parallel._cluster import (
    DONE_QUEUE,
    _CheckIn,
    _DistributedSessionCreator,
    _PushToShadows,
    _server_facts,
    _target,
    check_in_ops,
    lost_error,
    serve_parameters,
    session_start_ops,
    start_watch,
)
from towerkit.trainers.parallel._cluster_sum import ClusterProcessSum
from towerkit.trainers.parallel._dataparallel import tower_variable_key
from towerkit.trainers.parallel._grad_sync import align_tower_grads, make_replicas_local
from towerkit.trainers.parallel._health import (
    ClusterTimeouts,
    ClusterWatch,
    TaskAddress,
    TaskLostError,
    close_within,
    end_unless_set,
    exit_if_stuck,
    task_addresses,
)
from towerkit.trainers.parallel._placed import placed_server
from towerkit.trainers.parallel._trainer_parts import (
    ChiefOwnsLogdir,
    PreemptionFlag,
    SessionInitThenRun,
)

if TYPE_CHECKING:
    from towerkit.callbacks import LoopBounds, MonitorBase, Monitors
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._sesscreate import SessionCreatorLike
    from towerkit.trainers.inputs._base import InputSource

__all__ = [
    "DONE_QUEUE",
    "DistributedTrainerBase",
    "DistributedTrainerParameterServer",
    "DistributedTrainerReplicated",
    "serve_parameters",
]

logger = logging.getLogger("towerkit.trainers")


class DistributedTrainerBase(ClusterProcessSum, ChiefOwnsLogdir, SingleCostTrainer):
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
    worker that fails before its loop starts never checks in: once its process has
    ended, `serve_parameters` finds it dead and says so).

    Without GPUs, towers go to logical CPU devices ``/job:worker/task:<i>/cpu:<k>``, which
    the worker's server config must have (`cluster_server` starts such a server). Only the
    default session creator or a `NewSessionCreator` is accepted; its config is used for the
    session on the cluster, whose device filters default to the parameter servers and this
    worker (so a worker never waits for the others).

    A preemption signal to any worker stops every worker after its call in flight, the
    chief saving (`PreemptionFlag`). Kept for completeness (TensorFlow no longer
    maintains this runtime, and saving in it has seen little use): prefer `HorovodTrainer`.

    No wait is unbounded (see `ClusterTimeouts`): every session operation of a
    worker has a deadline (``ConfigProto.operation_timeout_in_ms``, from
    ``timeouts.operation_seconds`` unless the session creator's config sets one),
    and from the session's start a thread checks that the parameter servers (and, in
    the loop, on the other workers, the chief) still answer a connection (a stopped or
    hung process accepts one but answers nothing); one lost while the session starts
    is named in the same way, the session closed. When one dies, training stops after the
    current step (or the failed step ends it), ``after_train`` runs (on a closed
    session once a parameter server is lost, so that no callback waits on it),
    closing the session waits ``timeouts.close_seconds`` at most, and `TaskLostError`
    is raised with one line naming the task lost (job, index, address). A worker
    never trains on without its chief, which alone saves; a chief that ended its
    training normally is not lost.

    Attributes:
        WAIT_FOR_CHIEF_SECONDS: how long a non-chief worker waits for the chief to
            initialize the variables before giving up.
        CHECK_IN_TIMEOUT_MS: how long a worker tries to check in at the end.
        timeouts: the `ClusterTimeouts` of this worker.
    """

    SUPPORTS_STEPS_PER_EXECUTION = False
    PREEMPT_EVERYWHERE = True

    def _k_refusal(self) -> str:
        return (
            "its workers share variables on parameter servers step by step; a K-step "
            "loop inside one worker's call would hide its steps from the others and "
            "the chief's per-step check-in"
        )

    WAIT_FOR_CHIEF_SECONDS: float = 600.0
    CHECK_IN_TIMEOUT_MS: int = 30_000

    def __init__(
        self,
        gpus: int | Sequence[int],
        server: Any = None,
        *,
        timeouts: ClusterTimeouts | None = None,
    ) -> None:
        cluster, job, task = _server_facts(server := placed_server(server, gpus))
        if job != "worker":
            msg = (
                f"distributed trainers run in 'worker' processes; this server is job {job!r}, "
                f"task {task}: a 'ps' process calls serve_parameters(server) instead"
            )
            raise ValueError(msg)
        timeouts = ClusterTimeouts() if timeouts is None else timeouts
        if not isinstance(timeouts, ClusterTimeouts):
            msg = f"'timeouts' must be a ClusterTimeouts; got {type(timeouts).__name__}"
            raise TypeError(msg)
        super().__init__()
        self.timeouts = timeouts
        self._watch: ClusterWatch | None = None
        self._loop_done = threading.Event()
        self._close_stuck = False  # a close of the session was left blocked
        self._chief_finished_flag: Any = None
        self._finished_var: Any = None
        self._preempt_flag: tuple[Any, Any, Any] | None = None
        self._server = server
        self._cluster = cluster
        self._task = task
        self._num_workers: int = cluster.num_tasks("worker")
        self._num_ps = cluster.num_tasks("ps")
        self.is_chief = task == 0
        self._worker = f"/job:worker/task:{task}"
        self._devices = tuple(f"{self._worker}{d}" for d in resolve_devices(gpus))
        self._check_in: tuple[Any, Any] | None = None

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
        input: InputSource,
        get_cost_fn: TowerFn,
        get_opt_fn: OptimizerFactory,
        *,
        steps_per_execution: int = 1,
        precision: str | Precision = FLOAT32,
        xla: bool | str | None = None,
    ) -> list[Callback]:
        """As `SingleCostTrainer.setup_graph`; the global step goes to the parameter servers."""
        self._require_phase("setup_graph", "new")
        self._set_steps_per_execution(steps_per_execution)
        with self._graph.as_default(), tf1.device("/job:ps/task:0"):
            self._ensure_global_step()
        with self._graph.as_default():
            with tf1.device("/job:ps/task:0"), tf1.name_scope(None):
                # Raised by the chief when it checks in: from then on its end is normal.
                # Outside every collection: never saved, restored or initialized by others.
                finished = tf1.Variable(
                    False, trainable=False, collections=[], name="chief_training_finished"
                )
                self._finished_var = finished
                self._chief_finished_flag = finished.read_value()
                flag = tf1.Variable(False, trainable=False, collections=[], name="preempted")
                self._preempt_flag = (flag, flag.read_value(), flag.assign(True, read_value=False))
                raise_finished = [finished.assign(True, read_value=False)] if self.is_chief else []
            self._check_in = check_in_ops(
                self._task, self._num_workers, self._num_ps, raise_finished
            )
        return super().setup_graph(
            inputs_desc, input, get_cost_fn, get_opt_fn, precision=precision, xla=xla
        )

    def setup_callbacks(
        self,
        callbacks: Sequence[Callback] | None,
        monitors: Sequence[MonitorBase] | Monitors | None,
    ) -> None:
        """As `Trainer.setup_callbacks`, plus the check-in at the end, after the other callbacks."""
        cbs = list(callbacks or [])
        if self._preempt_flag is not None:
            cbs.append(PreemptionFlag(*self._preempt_flag[1:], self._task, lambda: self._interrupt))
        if self._check_in is not None:
            ps = task_addresses(self._cluster.as_dict(), ["ps"])
            cbs.append(_CheckIn(self._check_in, self.CHECK_IN_TIMEOUT_MS, self._finishing, ps))
        super().setup_callbacks(cbs, monitors)

    def initialize(
        self, session_creator: SessionCreatorLike, session_init: SessionInit | None
    ) -> None:
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
            after = self._after_init_ops()
            chief_init = self._chief_initializers() if self.is_chief else None
            ready, local_init, chief_done, raise_done = session_start_ops(chief_init)
        if self.is_chief:
            after = [*after, raise_done]
        config = tf1.ConfigProto()
        config.CopyFrom(session_creator.config)
        if not config.device_filters:
            config.device_filters.extend(["/job:ps", self._worker])
        if not config.operation_timeout_in_ms:
            config.operation_timeout_in_ms = self.timeouts.operation_timeout_ms
        creator = _DistributedSessionCreator(
            _target(self._server),
            config,
            self.is_chief,
            ready,
            local_init,
            self.WAIT_FOR_CHIEF_SECONDS,
            chief_done,
            chief=task_addresses(self._cluster.as_dict(), ["worker"])[0],
            timeouts=self.timeouts,
        )
        if not self.is_chief and session_init is not None:
            logger.info("worker %d: session_init runs on the chief only: skipped", self._task)
            session_init = None
        wrapped = SessionInitThenRun(session_init, after, "copied the global variables locally")
        tasks, started = self._watched_tasks(), threading.Event()

        def lost_at_start(task: TaskAddress, why: str) -> None:
            exit_if_stuck(
                started, self.timeouts, lambda: self._lost_error(task, why), starting=True
            )

        ps = [t for t in tasks if t.job == "ps"]  # watched from the start
        target = None if self.is_chief else _target(self._server)
        watch = start_watch(ps, self.timeouts, lost_at_start, started, target)
        try:
            # The session's first call waits for every parameter server, with no deadline
            # (TensorFlow's graph extension): it starts once the watch has reached them
            # all, so that one lost during the call is found and the wait bounded.
            unreached = watch.wait_reached(self.timeouts.start_within)
            if unreached is None:
                super().initialize(creator, wrapped)
        except Exception as err:
            started.set()
            if self.sess is not None:
                close_within(self.sess, self.timeouts.close_seconds)
            self._raise_lost(watch.blame(isinstance(err, tf.errors.OpError), tasks), err)
            raise
        finally:
            started.set()
            watch.stop()
        self._raise_lost(unreached, None)
        warn_missing_devices(self.sess, self._devices)

    def _after_init_ops(self) -> list[Any]:
        return []

    def _watched_tasks(self) -> tuple[TaskAddress, ...]:
        skip = [("worker", i) for i in range(1, self._num_workers)]
        if self.is_chief:
            skip.append(("worker", 0))
        return task_addresses(self._cluster.as_dict(), ["ps", "worker"], skip=skip)

    def _still_needed(self, task: TaskAddress) -> bool:
        """Whether `task`, now unreachable, had more to do (False: the chief checked in)."""
        if task.job != "worker" or self._chief_finished_flag is None:
            return True
        options = tf1.RunOptions(timeout_in_ms=5_000)
        try:
            return not bool(self.sess.run(self._chief_finished_flag, options=options))
        except tf.errors.OpError:
            return True

    def _on_lost(self, task: TaskAddress, why: str) -> None:
        if self.hooked_sess is not None:
            self.hooked_sess.request_stop()
        if task.job == "ps":  # a call it blocks may have no deadline: bound the wait
            exit_if_stuck(self._loop_done, self.timeouts, lambda: self._lost_error(task, why))

    def _chief_initializers(self) -> list[Any]:
        """The initializers of the flags the chief keeps on a parameter server (not saved)."""
        if self._finished_var is None:
            return []
        return [v.initializer for v in [self._finished_var, *(self._preempt_flag or ())[:1]]]

    def _finishing(self) -> bool:
        """At the end of training: stop watching; whether the parameter servers are all up."""
        watch = self._watch
        if watch is None:
            return True
        watch.stop()
        return not any(t.job == "ps" for t, _ in watch.lost)

    def _lost_error(self, task: TaskAddress, why: str) -> TaskLostError:
        at = (self.epoch_num, self.global_step) if self.hooked_sess is not None else None
        return lost_error(self._task, task, why, at)

    def _main_loop(self, bounds: LoopBounds) -> None:
        """As `Trainer.main_loop`, watching the parameter servers and the chief meanwhile.

        Raises:
            TaskLostError: a parameter server (or, on another worker, the chief) died
                during training; the message names it.
        """
        watch = ClusterWatch(
            self._watched_tasks(),
            self.timeouts,
            on_dead=self._on_lost,
            still_needed=self._still_needed,
            name=f"worker{self._task}-watch",
            alive=True,  # the session reached them all (the chief: it initialized)
        )
        self._watch = watch.start()
        try:
            super()._main_loop(bounds)
        except Exception as err:
            # a failed step, or (the session closed for a lost parameter server) a
            # failed after_train: either way the task lost is what the user must read
            self._raise_lost(watch.blame(isinstance(err, tf.errors.OpError)), err)
            raise
        finally:
            watch.stop()
            self._loop_done.set()
        self._raise_lost(watch.lost[0] if watch.lost else None, None)

    def _raise_lost(self, found: tuple[TaskAddress, str] | None, err: Exception | None) -> None:
        """Raise `TaskLostError` naming `found` (logged first), from `err`; nothing when None."""
        if found is not None:
            error = self._lost_error(*found)
            logger.error("%s", error)
            if self._close_stuck:  # a TensorFlow thread waits on the lost task: bound the exit
                after_s = self.timeouts.close_seconds + 2 * self.timeouts.check_every
                end_unless_set(threading.Event(), after_s, lambda: error, "the process runs on")
            raise error from err

    def _finish(self, failed: BaseException | None) -> None:
        """``after_train`` on a closed session once a ps is lost (its calls: `exit_if_stuck`)."""
        watch = self._watch
        lost = [task for task, _ in watch.lost if task.job == "ps"] if watch is not None else []
        if lost:
            logger.warning(
                "worker %d: %s is lost: the session is closed before after_train (a callback "
                "that uses it fails instead of waiting for it)",
                self._task,
                lost[0],
            )
            self._close_stuck = not close_within(self.sess, self.timeouts.close_seconds)
        super()._finish(failed)

    def _close_session(self) -> None:
        """Close the session, waiting ``timeouts.close_seconds`` at most.

        Closing a session whose parameter server died blocks in TensorFlow; past
        the bound the close is left to a daemon thread and the process's exit.
        """
        if not close_within(self.sess, self.timeouts.close_seconds):
            self._close_stuck = True
            logger.warning(
                "worker %d: closing the session did not end within %g s (a task of the "
                "cluster is gone); leaving it",
                self._task,
                self.timeouts.close_seconds,
            )

    def initialize_hooks(self) -> None:
        """As `Trainer.initialize_hooks`; only the chief increments the shared global step."""
        step_op = self._step_op if self.is_chief else None
        self.hooked_sess = HookedSession(self.sess, self._callbacks.cbs, step_op=step_op)

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
        server: this worker's ``tf.compat.v1.train.Server``; None: started from
            ``TF_CONFIG`` or a SLURM step (`cluster_placement`, `cluster_server`).
        caching_device: ``'cpu'`` (the worker's CPU) or ``'gpu'`` (tower 0's device):
            where variables read from the parameter servers are cached.

    Raises:
        TypeError, ValueError: bad arguments, or a server that is not a worker.
    """

    def __init__(
        self,
        gpus: int | Sequence[int],
        server: Any = None,
        caching_device: str = "cpu",
        *,
        timeouts: ClusterTimeouts | None = None,
    ) -> None:
        if caching_device not in ("cpu", "gpu"):
            msg = f"'caching_device' must be 'cpu' or 'gpu'; got {caching_device!r}"
            raise ValueError(msg)
        super().__init__(gpus, server, timeouts=timeouts)
        self._caching = caching_device

    @property
    def caching_device(self) -> str:
        """Where variables read from the parameter servers are cached: ``'cpu'`` or ``'gpu'``."""
        return self._caching

    def _setup_graph(
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
    ) -> list[Callback]:
        cache = f"{self._worker}/cpu:0" if self._caching == "cpu" else self._devices[0]
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        setters = [self._ps_device(d) for d in self._devices]
        with tf1.variable_scope(
            tf1.get_variable_scope(), caching_device=cache, auxiliary_name_scope=False
        ):
            tower_grads = build_towers(setters, get_grads, [""] * len(self._devices))
        rows = align_tower_grads(tower_grads)
        averaged = average_rows(rows, f"{self._worker}/cpu:0")
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
        server: this worker's ``tf.compat.v1.train.Server``; None: started from
            ``TF_CONFIG`` or a SLURM step (`cluster_placement`, `cluster_server`).

    Raises:
        TypeError, ValueError: bad arguments, or a server that is not a worker.
    """

    def __init__(
        self,
        gpus: int | Sequence[int],
        server: Any = None,
        *,
        timeouts: ClusterTimeouts | None = None,
    ) -> None:
        super().__init__(gpus, server, timeouts=timeouts)
        self._initial_sync: Any = None

    def _setup_graph(
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
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
        averaged = average_rows(rows, f"{self._worker}/cpu:0")
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
