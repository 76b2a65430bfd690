"""Data-parallel graph building: towers on devices, and sessions that have those devices.

The multi-device, distributed and horovod trainers are built from these pieces and
those of ``_grad_sync`` (gradients, replicas) and ``_trainer_parts`` (session
initializers, callbacks, logdirs), and so are custom multi-device trainers (see
"Write a multi-device trainer" in the lib's README).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from towerkit.towers import TowerContext, resolve_devices, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers._sesscreate import NewSessionCreator
from towerkit.trainers.parallel._dataparallel import least_loaded, missing_devices

if TYPE_CHECKING:
    from towerkit.trainers._sesscreate import SessionCreatorLike

__all__ = [
    "VARIABLE_OP_TYPES",
    "DataParallelBuilder",
    "LeastLoadedDeviceSetter",
    "build_towers",
    "session_creator_for_devices",
    "warn_missing_devices",
]

logger = logging.getLogger("towerkit.trainers")

VARIABLE_OP_TYPES = frozenset(
    {"Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable", "_VarHandlesOp"}
)
"""Op types that hold a variable's state: what a parameter-server placement moves."""

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
    size: int = max(1, n * max(dtype.size, 1))
    return size


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
            device: str = op.device
            return device
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


# -- sessions on the towers' devices --------------------------------------------------------


def session_creator_for_devices(
    session_creator: SessionCreatorLike, devices: Sequence[str]
) -> SessionCreatorLike:
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
