"""Data-parallel graph building: towers on devices, gradient aggregation, replica sync.

The multi-device, distributed and horovod trainers are built from these pieces,
and so are custom multi-device trainers (see "Write a multi-device trainer" in the
lib's README).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers import TowerContext, resolve_devices, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers._allreduce import allreduce, nccl_available, scale_gradient, sum_gradients
from towerkit.trainers._dataparallel import (
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

__all__ = [
    "VARIABLE_OP_TYPES",
    "ChiefOwnsLogdir",
    "DataParallelBuilder",
    "GradsAndVars",
    "LeastLoadedDeviceSetter",
    "RunOpEachEpoch",
    "SessionInitThenRun",
    "aggregate_grads",
    "align_tower_grads",
    "allreduce_grads",
    "build_towers",
    "copy_masters_op",
    "make_replicas_local",
    "session_creator_for_devices",
    "sync_replicas_op",
    "warn_missing_devices",
]

logger = logging.getLogger("towerkit.trainers")

VARIABLE_OP_TYPES = frozenset(
    {"Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable", "_VarHandlesOp"}
)
"""Op types that hold a variable's state: what a parameter-server placement moves."""

GradsAndVars = list[tuple[Any, Any]]
"""One tower's ``(gradient, variable)`` pairs."""

Device = str | Callable[[Any], str]
"""A device string, or a device function (op -> device string) such as `LeastLoadedDeviceSetter`."""


# -- towers ----------------------------------------------------------------------------------


def _describe(device: Any) -> str:
    return device if isinstance(device, str) else str(getattr(device, "description", device))


def build_towers(
    devices: Sequence[Any],
    func: Callable[[], Any],
    vs_names: Sequence[str],
    ns_names: Sequence[str] | None = None,
) -> list[Any]:
    """Call `func` once per device, each call in its own training tower; return the results.

    Tower ``k`` (0-based) is built under ``TowerContext(ns_names[k], is_training=True,
    vs_name=vs_names[k], index=k, total=n)`` in ``tf.device(devices[k])`` (a device
    string or a device function). The default name scopes are ``tower<k>``.
    """
    n = len(devices)
    if len(vs_names) != n or (ns_names is not None and len(ns_names) != n):
        msg = (
            f"one variable scope (and name scope) per tower: {n} devices, "
            f"{len(vs_names)} vs_names, {None if ns_names is None else len(ns_names)} ns_names"
        )
        raise ValueError(msg)
    ns_names = ns_names or [f"tower{k}" for k in range(n)]
    out = []
    for k, (device, vs, ns) in enumerate(zip(devices, vs_names, ns_names)):
        with (
            tf1.device(device),
            TowerContext(ns, is_training=True, vs_name=vs, index=k, total=n),
        ):
            logger.info("building tower %d of %d on %s", k, n, _describe(device))
            out.append(func())
    return out


def _check_flags(name: str, flags: Sequence[Any] | None, n: int) -> list[bool]:
    if flags is None:
        return [False] * n
    if isinstance(flags, (str, bytes)) or not isinstance(flags, Sequence):
        msg = f"{name!r} must be a list of {n} bools (one per tower); got {type(flags).__name__}"
        raise TypeError(msg)
    if len(flags) != n:
        msg = f"{name!r} must hold one bool per tower ({n}); got {len(flags)}: {list(flags)!r}"
        raise ValueError(msg)
    wrong = [f"{i}: {f!r}" for i, f in enumerate(flags) if not isinstance(f, (bool, int))]
    if wrong:
        msg = f"{name!r} must hold bools; entries at fault: {', '.join(wrong)}"
        raise TypeError(msg)
    return [bool(f) for f in flags]


class DataParallelBuilder:
    """Builds one training tower per device: the first step of every data-parallel trainer.

    The devices come from `towerkit.towers.resolve_devices`: ``/gpu:k`` for the
    GPUs asked for, or the logical CPU devices ``/cpu:0..n-1`` on a machine
    without GPUs (a session made with `session_creator_for_devices` has them), so
    the same trainer runs on both.

    Args:
        towers: a number of towers (>= 1), or a list of GPU ids, as the ``gpus``
            argument of the multi-GPU trainers.

    Raises:
        TypeError, ValueError: `towers` as for ``resolve_devices``.

    Examples:
        >>> DataParallelBuilder([0, 1]).num_towers
        2
    """

    def __init__(self, towers: int | Sequence[int]) -> None:
        self._towers = towers
        self._devices = resolve_devices(towers)
        if len(self._devices) > 1:
            logger.info("data-parallel: %d towers on %s", len(self._devices), list(self._devices))

    @property
    def devices(self) -> tuple[str, ...]:
        """The towers' devices, in tower order."""
        return self._devices

    @property
    def num_towers(self) -> int:
        """How many towers."""
        return len(self._devices)

    def __repr__(self) -> str:
        return f"DataParallelBuilder(devices={list(self._devices)})"

    @staticmethod
    def call_for_each_tower(
        towers: int | Sequence[int],
        func: Callable[[], Any],
        devices: Sequence[Device] | None = None,
        use_vs: Sequence[bool] | None = None,
    ) -> list[Any]:
        """Call `func` in each training tower and return what each call returned.

        Tower ``k`` (0-based) is built under name scope ``tower<k>`` in
        ``tf.device(devices[k])``, in a training ``TowerContext`` with ``index=k``
        and ``total=n``. A tower with ``use_vs[k]`` True opens variable scope
        ``tower<k>`` and creates its own copy of the model's variables (replicated
        training); the others create nothing after the first tower and share its
        variables (every ``tf.compat.v1.get_variable`` reuses them). Batch-norm
        updates, moving summaries and other "first tower only" work follow
        `towerkit.towers.is_main_training_tower`.

        Args:
            towers: a number of towers, or a list of GPU ids (see `DataParallelBuilder`).
            func: called with no argument once per tower, e.g. a `TowerFunc`
                applied to ``input.get_input_tensors()``.
            devices: one device (string or device function, e.g. a
                `LeastLoadedDeviceSetter`) per tower; default ``resolve_devices(towers)``.
            use_vs: one bool per tower; default all False (variables shared).

        Returns:
            The return values of `func`, in tower order.

        Raises:
            TypeError, ValueError: `devices` or `use_vs` does not give one entry per tower.
        """
        n = len(resolve_devices(towers))
        devs = list(resolve_devices(towers) if devices is None else devices)
        if isinstance(devices, (str, bytes)) or len(devs) != n:
            msg = f"'devices' must hold one device per tower ({n}); got {devices!r}"
            raise ValueError(msg)
        flags = _check_flags("use_vs", use_vs, n)
        return build_towers(devs, func, [f"tower{k}" if f else "" for k, f in enumerate(flags)])

    @staticmethod
    def build_on_towers(
        towers: int | Sequence[int],
        func: Callable[[], Any],
        devices: Sequence[Device] | None = None,
        use_vs: Sequence[bool] | None = None,
    ) -> list[Any]:
        """The same as `call_for_each_tower` (its older name)."""
        return DataParallelBuilder.call_for_each_tower(towers, func, devices, use_vs)


def _variable_bytes(op: Any) -> int:
    """Bytes of the variable an op creates (1 when unknown)."""
    try:
        shape = tf.TensorShape(op.get_attr("shape"))
        dtype = tf.as_dtype(op.get_attr("dtype"))
    except (ValueError, TypeError):
        return 1
    n = shape.num_elements() if shape.is_fully_defined() else 1
    return max(1, n * max(dtype.size, 1))


class LeastLoadedDeviceSetter:
    """A device function: variables on the parameter device holding the fewest bytes, the rest on a tower's device.

    Use it as the device of a tower (``tf.device(setter)``, or an entry of
    ``devices`` in `DataParallelBuilder.call_for_each_tower`) to spread the shared
    variables over several devices. Ops that already have a device keep it.

    Args:
        worker_device: where the tower's other ops go.
        ps_devices: where variables may go (one or more device strings).
        loads: bytes already placed on each of `ps_devices`, shared (and updated)
            between setters that place variables on the same devices; default a
            fresh list of zeros.

    Raises:
        TypeError, ValueError: empty `ps_devices`, or `loads` of another length.
    """

    def __init__(
        self, worker_device: str, ps_devices: Sequence[str], loads: list[int] | None = None
    ) -> None:
        if not isinstance(worker_device, str):
            msg = f"'worker_device' must be a device string; got {type(worker_device).__name__}"
            raise TypeError(msg)
        if isinstance(ps_devices, str) or not ps_devices:
            msg = f"'ps_devices' must be a non-empty list of device strings; got {ps_devices!r}"
            raise ValueError(msg)
        self.worker_device = worker_device
        self.ps_devices = tuple(ps_devices)
        if loads is None:
            loads = [0] * len(self.ps_devices)
        if len(loads) != len(self.ps_devices):
            msg = f"'loads' needs one entry per ps device ({len(self.ps_devices)}); got {loads!r}"
            raise ValueError(msg)
        self.loads = loads
        self.description = f"{worker_device} (variables on {list(self.ps_devices)})"

    def __call__(self, op: Any) -> str:
        """The device of `op`."""
        if op.device:
            return op.device
        if op.type not in VARIABLE_OP_TYPES:
            return self.worker_device
        i = least_loaded(self.loads) if len(self.ps_devices) > 1 else 0
        self.loads[i] += _variable_bytes(op)
        return self.ps_devices[i]

    def __repr__(self) -> str:
        return (
            f"LeastLoadedDeviceSetter(worker_device={self.worker_device!r}, "
            f"ps_devices={list(self.ps_devices)!r}, loads={self.loads!r})"
        )


# -- gradients -------------------------------------------------------------------------------


def align_tower_grads(tower_grads: Sequence[GradsAndVars]) -> list[list[tuple[Any, Any]]]:
    """One row per variable of tower 0: that variable's (gradient, variable) in every tower.

    Variables pair by name without the ``tower<k>/`` scope, so shared variables
    and replicated copies both pair up.

    Raises:
        TowerVariableMismatchError: the towers trained different variables.
    """
    names = [[v.op.name for _, v in grads] for grads in tower_grads]
    order = match_tower_variables(names)
    return [[tower_grads[t][row[t]] for t in range(len(tower_grads))] for row in order]


def _check_grad_list(all_grads: Any, what: str) -> list[GradsAndVars]:
    if isinstance(all_grads, (str, bytes)) or not isinstance(all_grads, Sequence) or not all_grads:
        msg = (
            f"{what!r} must be a non-empty list with one list of (gradient, variable) pairs "
            f"per tower; got {all_grads!r}"
        )
        raise TypeError(msg)
    return [list(g) for g in all_grads]


def aggregate_grads(
    all_grads: Sequence[GradsAndVars],
    colocation: bool = True,
    devices: Sequence[str] | None = None,
    average: bool = True,
) -> GradsAndVars:
    """Sum or average each shared variable's gradients over the towers (parameter-server style).

    Args:
        all_grads: one list of (gradient, variable) pairs per tower, the towers
            sharing their variables (as `DataParallelBuilder.call_for_each_tower`
            returns them without ``use_vs``); each tower may list them in any order.
        colocation: compute each variable's sum on the variable's device.
        devices: compute the sums on these devices, in turn (variable ``i`` on
            ``devices[i % len(devices)]``); not together with `colocation`.
        average: divide the sum by the number of towers.

    Returns:
        One (gradient, variable) pair per variable, in tower 0's order: what one
        ``optimizer.apply_gradients`` applies.

    Raises:
        TowerVariableMismatchError: the towers have gradients for different variables.
        ValueError: both `colocation` and `devices`.
    """
    grads = _check_grad_list(all_grads, "all_grads")
    if colocation and devices:
        msg = "give 'colocation=True' or 'devices', not both"
        raise ValueError(msg)
    rows = align_tower_grads(grads)
    factor = 1.0 / len(grads) if average else 1.0
    out = []
    with tf1.name_scope("aggregate_grads"):
        for i, row in enumerate(rows):
            var = row[0][1]
            if colocation:
                device: Any = var.device
            elif devices:
                device = devices[i % len(devices)]
            else:
                device = None
            with tf1.device(device):
                total = sum_gradients([g for g, _ in row])
                out.append((scale_gradient(total, factor), var))
    return out


def allreduce_grads(
    all_grads: Sequence[GradsAndVars],
    devices: Sequence[str],
    average: bool = True,
    mode: str | None = None,
) -> list[GradsAndVars]:
    """All-reduce the gradients of replicated towers: every tower gets the sum (or mean) of all.

    Args:
        all_grads: one list of (gradient, variable) pairs per tower, each tower
            holding its own copy of the variables (as
            `DataParallelBuilder.call_for_each_tower` with ``use_vs`` returns them).
        devices: the towers' devices, in tower order.
        average: divide the sums by the number of towers.
        mode: ``'cpu'``, ``'hierarchical'``, ``'nccl'`` or None for the automatic
            choice (as `SyncMultiGPUTrainerReplicated`'s ``mode``; NCCL where it
            cannot run falls back to ``'cpu'`` with a warning).

    Returns:
        One list per tower of (reduced gradient, that tower's variable), in tower 0's
        variable order, each gradient on its tower's device: apply tower ``k``'s list
        to tower ``k``'s copy (one ``apply_gradients`` over all lists keeps the copies equal).

    Raises:
        TowerVariableMismatchError: the towers have gradients for different variables.
        ValueError: not one device per tower, or an unknown mode.
    """
    grads = _check_grad_list(all_grads, "all_grads")
    n = len(grads)
    if isinstance(devices, str) or len(devices) != n:
        msg = f"'devices' must hold one device per tower ({n}); got {devices!r}"
        raise ValueError(msg)
    gpu_towers = sum(1 for d in devices if device_key(d)[2] == "GPU")
    choice = choose_allreduce_mode(mode, n, gpu_towers, nccl_available())
    if choice.fallback:
        logger.warning("all-reduce: %s", choice.reason)
    else:
        (logger.info if mode is None else logger.debug)("all-reduce: %s", choice.reason)
    rows = align_tower_grads(grads)
    reduced = allreduce([[g for g, _ in row] for row in rows], list(devices), choice.mode, average)
    return [[(reduced[i][t], rows[i][t][1]) for i in range(len(rows))] for t in range(n)]


# -- replicated variables --------------------------------------------------------------------


def make_replicas_local(graph: Any, num_towers: int, first: int = 1) -> list[Any]:
    """Move the variables of towers ``first..num_towers-1`` into ``LOCAL_VARIABLES`` only.

    After it, the global, trainable and model-variable collections hold one copy of
    the model (as a single tower's graph does), so savers, restores and summaries
    see the master copy only; the replicas (``tower<k>/...``, their optimizer slots
    included) are still initialized with the local variables. Call it after the
    optimizer's ``apply_gradients``, which creates the slots.

    Args:
        graph: the graph (e.g. ``trainer.graph``).
        num_towers: how many towers were built.
        first: the first tower whose variables move.

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


def sync_replicas_op(name: str = "sync_replicas", graph: Any = None) -> Any:
    """An op copying tower 0's variables into every replica (``tower<k>/...``, k >= 1).

    Run it once after the variables are initialized or restored, so the copies
    start equal, and (optionally) after each epoch, so rounding differences do not
    accumulate: e.g. ``RunOp(op, run_before=True, run_as_trigger=True)``. The
    replicas are paired with the global variables by name without the ``tower<k>/``
    scope, optimizer slots included.

    Args:
        name: the op's name.
        graph: the graph; default the current default graph.
    """
    graph = graph or tf1.get_default_graph()
    with graph.as_default():
        everything = graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES) + graph.get_collection(
            tf1.GraphKeys.LOCAL_VARIABLES
        )
        masters: list[Any] = []
        replicas: list[Any] = []
        seen: set[int] = set()
        for v in everything:
            if id(v) in seen:
                continue
            seen.add(id(v))
            k = replica_index(v.op.name)
            (replicas if k is not None and k >= 1 else masters).append(v)
        return copy_masters_op(masters, replicas, name)


# -- sessions, callbacks, logdirs -------------------------------------------------------------


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
    A custom multi-device trainer calls it in its ``initialize``.
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
