"""Data-parallel trainers in one process: a tower per device, replicated or shared variables."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers import (
    TowerContext,
    TowerFunc,
    resolve_devices,
    session_config_for_devices,
)
from towerkit.towers.compat import tf1
from towerkit.trainers._allreduce import allreduce, nccl_available, scale_gradient, sum_gradients
from towerkit.trainers._dataparallel import (
    check_allreduce_mode,
    choose_allreduce_mode,
    device_key,
    least_loaded,
    match_tower_variables,
    missing_devices,
    replica_index,
    replica_sources,
)
from towerkit.trainers._resume import plan_logdir
from towerkit.trainers._sesscreate import NewSessionCreator
from towerkit.trainers._tower import SingleCostTrainer

__all__ = [
    "AsyncMultiGPUTrainer",
    "SyncMultiGPUTrainer",
    "SyncMultiGPUTrainerParameterServer",
    "SyncMultiGPUTrainerReplicated",
]

logger = logging.getLogger("towerkit.trainers")

VARIABLE_OP_TYPES = frozenset(
    {"Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable", "_VarHandlesOp"}
)
"""Op types that hold a variable's state: what a parameter-server placement moves."""

GradsAndVars = list[tuple[Any, Any]]


# -- pieces shared by every data-parallel trainer -------------------------------------------


class SessionInitThenRun:
    """A session initializer that runs another one (when given), then some ops.

    Data-parallel trainers wrap the user's ``session_init`` in it, so the copies of
    the variables are made equal right after the values are loaded (restored or
    initialized), before the trainer reads the global step.

    Args:
        session_init: the user's session initializer, or None.
        ops: the ops to run after it (e.g. copying tower 0's variables to the others).
        what: what the ops do, for the log.
        on_error: turns an error of the ops into the exception to raise (raised
            from the original); None raises the original.
    """

    def __init__(
        self,
        session_init: Any,
        ops: Sequence[Any],
        what: str,
        on_error: Callable[[Exception], Exception] | None = None,
    ) -> None:
        self._inner = session_init
        self._ops = [op for op in ops if op is not None]
        self._what = what
        self._on_error = on_error

    def setup_graph(self, graph: Any = None) -> None:
        """Build the wrapped initializer's ops, when it has a ``setup_graph``."""
        setup = getattr(self._inner, "setup_graph", None)
        if callable(setup):
            setup() if graph is None else setup(graph)

    def init(self, sess: Any) -> None:
        """Run the wrapped initializer, then the ops."""
        if self._inner is not None:
            self._inner.init(sess)
        if self._ops:
            try:
                sess.run(self._ops)
            except tf.errors.OpError as err:
                if self._on_error is None:
                    raise
                raise self._on_error(err) from err
            logger.info("%s", self._what)

    def __repr__(self) -> str:
        return f"SessionInitThenRun({self._inner!r}, {self._what!r})"


class RunOpEachEpoch(Callback):
    """Run an op at the end of every epoch, on every worker (chief or not).

    Args:
        op: the op, or a function returning it, called in ``before_train`` (so the op
            may be built after the callbacks are set up).
        what: a short description for the log.
    """

    _chief_only = False

    def __init__(self, op: Any, what: str) -> None:
        self._op_arg = op
        self._op: Any = None
        self._what = what

    def _before_train(self) -> None:
        self._op = self._op_arg() if callable(self._op_arg) else self._op_arg

    def _trigger_epoch(self) -> None:
        if self._op is not None:
            self.trainer.sess.run(self._op)

    def __str__(self) -> str:
        return f"RunOpEachEpoch({self._what})"


class ChiefOwnsLogdir:
    """Mixin for multi-process trainers: only the chief creates, moves or writes the logdir.

    On other processes ``set_logdir`` keeps the path (``trainer.logdir``, for
    callbacks that are not chief-only) but neither creates, checks nor moves the
    directory, so processes sharing a file system never race on it.
    """

    is_chief: bool
    _logdir: str | None

    def set_logdir(
        self, logdir: str | os.PathLike[str] | None, logdir_action: str = "error"
    ) -> None:
        """As `Trainer.set_logdir` on the chief; other processes only keep the path."""
        if self.is_chief or logdir is None:
            super().set_logdir(logdir, logdir_action)  # type: ignore[misc]
            return
        self._require_phase("set_logdir", "new")  # type: ignore[attr-defined]
        plan_logdir(None, logdir_action)
        self._logdir = os.path.abspath(os.fspath(logdir))
        logger.info("not the chief: the logdir %s is left to the chief", self._logdir)


def session_creator_for_devices(session_creator: Any, devices: Sequence[str]) -> Any:
    """`session_creator`, or a copy whose session has every device of `devices`.

    A `NewSessionCreator` (the default one, or one made from a user's session config)
    becomes one whose config also asks for as many logical CPU devices as ``/cpu:k``
    towers need; the rest of its config is kept. Other creators are used as they are.
    """
    if not isinstance(session_creator, NewSessionCreator):
        return session_creator
    config = session_creator.config
    merged = session_config_for_devices(devices, config)
    if merged == config:
        return session_creator
    logger.info(
        "session config: %d logical CPU devices for towers on %s",
        merged.device_count["CPU"],
        list(devices),
    )
    return NewSessionCreator(target=session_creator.target, config=merged)


def warn_missing_devices(sess: Any, devices: Sequence[str]) -> None:
    """Log a warning when the session lacks some tower devices (they fall back elsewhere)."""
    try:
        available = [d.name for d in sess.list_devices()]
    except tf.errors.OpError as err:
        logger.debug("cannot list the session's devices: %s", err)
        return
    missing = missing_devices(devices, available)
    if missing:
        logger.warning(
            "the session has no device %s: those towers run on other devices (soft placement). "
            "Make the session with towerkit.towers.session_config_for_devices(devices) to get them",
            missing,
        )


def build_towers(
    devices: Sequence[Any],
    get_grads: Callable[[], GradsAndVars],
    vs_names: Sequence[str],
    ns_names: Sequence[str] | None = None,
) -> list[GradsAndVars]:
    """Build one training tower per device and return each tower's (gradient, variable) pairs.

    Tower ``k`` (0-based) is built under ``TowerContext(ns_names[k], is_training=True,
    vs_name=vs_names[k], index=k, total=n)`` in ``tf.device(devices[k])`` (a device
    string or a device function).
    """
    n = len(devices)
    ns_names = ns_names or [f"tower{k}" for k in range(n)]
    out = []
    for k, (device, vs, ns) in enumerate(zip(devices, vs_names, ns_names)):
        with (
            tf1.device(device),
            TowerContext(ns, is_training=True, vs_name=vs, index=k, total=n),
        ):
            where = device if isinstance(device, str) else getattr(device, "description", device)
            logger.info("building tower %d of %d on %s", k, n, where)
            out.append(get_grads())
    return out


def align_tower_grads(tower_grads: Sequence[GradsAndVars]) -> list[list[tuple[Any, Any]]]:
    """One row per variable of tower 0: that variable's (gradient, variable) in every tower.

    Raises:
        TowerVariableMismatchError: the towers trained different variables.
    """
    names = [[v.op.name for _, v in grads] for grads in tower_grads]
    order = match_tower_variables(names)
    return [[tower_grads[t][row[t]] for t in range(len(tower_grads))] for row in order]


def make_replicas_local(graph: Any, num_towers: int, first: int = 1) -> list[Any]:
    """Move the variables of towers ``first..num_towers-1`` into ``LOCAL_VARIABLES`` only.

    After it, the global, trainable and model-variable collections hold one copy of
    the model (as a single tower's graph does), so savers, restores and summaries
    see the master copy only; the replicas (``tower<k>/...``, their optimizer slots
    included) are still initialized with the local variables.

    Returns:
        The replica variables moved, in graph order.
    """
    keys = (
        tf1.GraphKeys.GLOBAL_VARIABLES,
        tf1.GraphKeys.TRAINABLE_VARIABLES,
        tf1.GraphKeys.MODEL_VARIABLES,
    )
    moved: list[Any] = []
    seen: set[int] = set()
    for key in keys:
        ref = graph.get_collection_ref(key)
        keep = []
        for v in ref:
            k = replica_index(v.op.name)
            if k is not None and first <= k < num_towers:
                if id(v) not in seen:
                    seen.add(id(v))
                    moved.append(v)
            else:
                keep.append(v)
        ref[:] = keep
    local = graph.get_collection_ref(tf1.GraphKeys.LOCAL_VARIABLES)
    have = {id(v) for v in local}
    local.extend(v for v in moved if id(v) not in have)
    return moved


def copy_masters_op(masters: Sequence[Any], replicas: Sequence[Any], name: str) -> Any:
    """An op copying each master variable into its replicas (paired by name); a no-op when none.

    Replicas without a master are left alone, with a warning.
    """
    sources = replica_sources([v.op.name for v in masters], [v.op.name for v in replicas])
    assigns, orphans = [], []
    for replica, src in zip(replicas, sources):
        if src is None:
            orphans.append(replica.op.name)
            continue
        master = masters[src]
        with tf1.device(replica.device):
            assigns.append(replica.assign(master.read_value(), read_value=False))
    if orphans:
        logger.warning(
            "tower variables without a tower-0 counterpart are not synchronized: %s", orphans
        )
    with tf1.name_scope(None):
        return tf.group(*assigns, name=name)


class _DeviceSetter:
    """Places variables on the parameter devices (least loaded first), other ops on a tower's device."""

    def __init__(self, worker_device: str, ps_devices: Sequence[str], loads: list[int]) -> None:
        self.worker_device = worker_device
        self.ps_devices = tuple(ps_devices)
        self.loads = loads
        self.description = f"{worker_device} (variables on {list(ps_devices)})"

    def __call__(self, op: Any) -> str:
        if op.device:
            return op.device
        if op.type not in VARIABLE_OP_TYPES:
            return self.worker_device
        i = least_loaded(self.loads) if len(self.ps_devices) > 1 else 0
        self.loads[i] += _variable_bytes(op)
        return self.ps_devices[i]


def _variable_bytes(op: Any) -> int:
    """Bytes of the variable an op creates (1 when unknown)."""
    try:
        shape = tf.TensorShape(op.get_attr("shape"))
        dtype = tf.as_dtype(op.get_attr("dtype"))
    except (ValueError, TypeError):
        return 1
    n = shape.num_elements() if shape.is_fully_defined() else 1
    return max(1, n * max(dtype.size, 1))


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, int)) or isinstance(value, float):
        msg = f"{name!r} must be a bool; got {type(value).__name__}"
        raise TypeError(msg)
    return bool(value)


class _DataParallelTrainer(SingleCostTrainer):
    """A single-cost trainer with one training tower per device of this process.

    Each tower takes its own batch from the input (the total batch of a step is the
    input's batch times the number of towers). The session gets the devices the
    towers need: with towers on logical CPU devices, the default session creator (or
    one made from ``session_config``) asks for them.
    """

    def __init__(self, gpus: int | Sequence[int]) -> None:
        super().__init__()
        self._gpus = gpus
        self._devices = resolve_devices(gpus)

    @property
    def devices(self) -> tuple[str, ...]:
        """The towers' devices, in tower order (``/gpu:k``, or ``/cpu:k`` without GPUs)."""
        return self._devices

    @property
    def num_towers(self) -> int:
        """How many training towers the trainer builds."""
        return len(self._devices)

    def initialize(self, session_creator: Any, session_init: Any) -> None:
        """As `Trainer.initialize`, with a session that has every tower's device."""
        super().initialize(
            session_creator_for_devices(session_creator, self._devices),
            self._wrap_session_init(session_init),
        )
        warn_missing_devices(self.sess, self._devices)

    def _wrap_session_init(self, session_init: Any) -> Any:
        return session_init

    def _gpu_towers(self) -> int:
        return sum(1 for d in self._devices if device_key(d)[2] == "GPU")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(devices={list(self._devices)}, phase={self._phase!r})"


# -- the trainers ----------------------------------------------------------------------------


class SyncMultiGPUTrainerReplicated(_DataParallelTrainer):
    """Synchronous data-parallel training with a full copy of the model on each device.

    Tower 0 creates the model's variables under their plain names (as a single-tower
    trainer does); tower ``k >= 1`` creates its own copy under variable scope
    ``tower<k>``. Every step, each tower computes gradients on its own batch; the
    gradients of each variable are all-reduced across towers (summed, then divided by
    the number of towers when ``average``), and each tower applies the result to its
    own copy with the same optimizer, so the copies stay equal. The copies are made
    equal when the session starts (after ``session_init``) and, with
    ``BROADCAST_EVERY_EPOCH``, again after every epoch.

    Checkpoints and restores see one copy: the copies of towers ``k >= 1`` (and their
    optimizer slots) live in ``LOCAL_VARIABLES`` only, so the global, trainable and
    model-variable collections hold tower 0's variables under their plain names. A
    checkpoint of this trainer loads into a single-tower graph and the other way
    round; predictors and inference runners use tower 0's variables.

    All-reduce modes: ``'cpu'`` sums on the CPU and copies the result to each tower;
    ``'hierarchical'`` sums within groups of towers (4 of 8), then across the groups'
    leaders, then back (designed for 8-GPU machines, runs on any devices); ``'nccl'``
    uses NCCL between GPUs. With ``mode=None`` the choice is automatic: hierarchical
    for 8 GPU towers, NCCL for other all-GPU layouts when TensorFlow has NCCL, CPU
    otherwise. NCCL asked for where it cannot run falls back to ``'cpu'`` with a
    warning. Without GPUs the towers go to logical CPU devices ``/cpu:k``.

    Args:
        gpus: a number of towers, or a list of GPU ids.
        average: average (True) or sum (False) the gradients across towers.
        mode: ``'nccl'``, ``'hierarchical'``, ``'cpu'`` or None (automatic).
        use_nccl: deprecated: True means ``mode='nccl'``, False ``mode='cpu'``.

    Attributes:
        BROADCAST_EVERY_EPOCH: copy tower 0's variables to the other towers after
            every epoch. In theory a no-op, since the copies stay equal; cheap, and it
            stops rounding differences from accumulating.

    Raises:
        TypeError, ValueError: bad arguments (``gpus`` as for ``resolve_devices``).
    """

    BROADCAST_EVERY_EPOCH: bool = True

    def __init__(
        self,
        gpus: int | Sequence[int],
        average: bool = True,
        mode: str | None = None,
        use_nccl: bool | None = None,
    ) -> None:
        if use_nccl is not None:
            warnings.warn(
                "SyncMultiGPUTrainerReplicated(use_nccl=...) is deprecated: use mode='nccl' or "
                "mode='cpu'",
                DeprecationWarning,
                stacklevel=2,
            )
            if mode is not None:
                msg = "give 'mode' or the deprecated 'use_nccl', not both"
                raise ValueError(msg)
            mode = "nccl" if use_nccl else "cpu"
        self._mode_arg = check_allreduce_mode(mode)
        self._average = _check_bool("average", average)
        super().__init__(gpus)
        self._mode: str | None = None
        self._sync_op: Any = None
        self._replicas: list[Any] = []

    @property
    def average(self) -> bool:
        """Whether gradients are averaged (True) or summed across towers."""
        return self._average

    @property
    def mode(self) -> str | None:
        """The all-reduce mode in use (known after ``setup_graph``), or the one asked for."""
        return self._mode if self._mode is not None else self._mode_arg

    @property
    def replica_variables(self) -> tuple[Any, ...]:
        """The variables of towers 1.. (in ``LOCAL_VARIABLES``), after ``setup_graph``."""
        return tuple(self._replicas)

    def _setup_graph(
        self, input: Any, get_cost_fn: TowerFunc, get_opt_fn: Callable[[], Any]
    ) -> list[Callback]:
        n = self.num_towers
        choice = choose_allreduce_mode(self._mode_arg, n, self._gpu_towers(), nccl_available())
        (logger.warning if choice.fallback else logger.info)("all-reduce: %s", choice.reason)
        self._mode = choice.mode
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        vs_names = [""] + [f"tower{k}" for k in range(1, n)]
        tower_grads = build_towers(self._devices, get_grads, vs_names)
        rows = align_tower_grads(tower_grads)
        reduced = allreduce(
            [[g for g, _ in row] for row in rows], self._devices, choice.mode, self._average
        )
        pairs = [(reduced[i][t], rows[i][t][1]) for t in range(n) for i in range(len(rows))]
        opt = get_opt_fn()
        self.train_op = opt.apply_gradients(pairs, name="train_op")
        self._replicas = make_replicas_local(self._graph, n)
        masters = tf1.global_variables()
        self._sync_op = copy_masters_op(masters, self._replicas, "sync_replicas")
        cbs: list[Callback] = []
        if self.BROADCAST_EVERY_EPOCH and n > 1:
            cbs.append(RunOpEachEpoch(self._sync_op, "copy tower 0's variables to the others"))
        return cbs

    def _wrap_session_init(self, session_init: Any) -> Any:
        if self._sync_op is None or not self._replicas:
            return session_init
        return SessionInitThenRun(
            session_init,
            [self._sync_op],
            f"copied tower 0's variables to the {len(self._replicas)} replica variables",
        )


class SyncMultiGPUTrainerParameterServer(_DataParallelTrainer):
    """Synchronous data-parallel training with one shared copy of the variables.

    Every tower reads the same variables (created by tower 0, shared by the others).
    Each step the towers' gradients of each variable are averaged next to the
    variable, and the optimizer applies the average once.

    Args:
        gpus: a number of towers, or a list of GPU ids.
        ps_device: where the variables live: ``'cpu'`` (the CPU) or ``'gpu'`` (spread
            over the towers' devices, each new variable on the device holding the
            fewest bytes so far). None chooses ``'cpu'`` for up to 2 towers and
            ``'gpu'`` beyond; this default may change.

    Raises:
        TypeError, ValueError: bad arguments.
    """

    def __init__(self, gpus: int | Sequence[int], ps_device: str | None = None) -> None:
        super().__init__(gpus)
        if ps_device is None:
            ps_device = "cpu" if self.num_towers <= 2 else "gpu"
        if ps_device not in ("cpu", "gpu"):
            msg = f"'ps_device' must be 'cpu', 'gpu' or None; got {ps_device!r}"
            raise ValueError(msg)
        self._ps_device = ps_device

    @property
    def ps_device(self) -> str:
        """Where the variables live: ``'cpu'`` or ``'gpu'`` (spread over the towers' devices)."""
        return self._ps_device

    def _setters(self) -> list[_DeviceSetter]:
        ps = ["/cpu:0"] if self._ps_device == "cpu" else list(self._devices)
        loads = [0] * len(ps)
        return [_DeviceSetter(d, ps, loads) for d in self._devices]

    def _shared_tower_grads(
        self, input: Any, get_cost_fn: TowerFunc, get_opt_fn: Callable[[], Any]
    ) -> list[list[tuple[Any, Any]]]:
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        tower_grads = build_towers(self._setters(), get_grads, [""] * self.num_towers)
        return align_tower_grads(tower_grads)

    def _setup_graph(
        self, input: Any, get_cost_fn: TowerFunc, get_opt_fn: Callable[[], Any]
    ) -> list[Callback]:
        rows = self._shared_tower_grads(input, get_cost_fn, get_opt_fn)
        n = self.num_towers
        averaged = []
        with tf1.name_scope("average_gradients"):
            for row in rows:
                var = row[0][1]
                with tf1.device(var.device):
                    total = sum_gradients([g for g, _ in row])
                    averaged.append((scale_gradient(total, 1.0 / n), var))
        opt = get_opt_fn()
        self.train_op = opt.apply_gradients(averaged, name="train_op")
        return []


class AsyncMultiGPUTrainer(SyncMultiGPUTrainerParameterServer):
    """Data-parallel training with shared variables and no synchronization between towers.

    The towers share one copy of the variables, as in
    `SyncMultiGPUTrainerParameterServer`, but each tower's gradients are applied by
    their own optimizer update, with no averaging: one step applies as many updates as
    there are towers, and a tower may read variables another tower is updating.

    Args:
        gpus: a number of towers, or a list of GPU ids.
        scale_gradient: multiply each tower's gradients by ``1 / number of towers``.

    Raises:
        TypeError, ValueError: bad arguments.
    """

    def __init__(self, gpus: int | Sequence[int], scale_gradient: bool = True) -> None:
        super().__init__(gpus, ps_device=None)
        self._scale = _check_bool("scale_gradient", scale_gradient)

    @property
    def scale_gradient(self) -> bool:
        """Whether each tower's gradients are scaled by ``1 / number of towers``."""
        return self._scale

    def _setup_graph(
        self, input: Any, get_cost_fn: TowerFunc, get_opt_fn: Callable[[], Any]
    ) -> list[Callback]:
        rows = self._shared_tower_grads(input, get_cost_fn, get_opt_fn)
        n = self.num_towers
        factor = 1.0 / n if self._scale else 1.0
        opt = get_opt_fn()
        applies = []
        for t, device in enumerate(self._devices):
            with tf1.device(device), tf1.name_scope(f"tower{t}_apply"):
                grads = [(scale_gradient(row[t][0], factor), row[t][1]) for row in rows]
                applies.append(opt.apply_gradients(grads, name=f"apply_grad_{t}"))
        with tf1.name_scope(None):
            self.train_op = tf.group(*applies, name="train_op")
        return []


def SyncMultiGPUTrainer(gpus: int | Sequence[int]) -> SingleCostTrainer:
    """A synchronous multi-device trainer with default settings.

    `SyncMultiGPUTrainerParameterServer` with variables on the CPU for up to 2
    towers, `SyncMultiGPUTrainerReplicated` beyond. It may not be the fastest
    choice for a given model and machine.

    Args:
        gpus: a number of towers, or a list of GPU ids.
    """
    n = len(resolve_devices(gpus))
    if n <= 2:
        return SyncMultiGPUTrainerParameterServer(gpus, ps_device="cpu")
    return SyncMultiGPUTrainerReplicated(gpus)
