"""Data-parallel trainers in one process: a tower per device, replicated or shared variables."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers import TowerFunc, resolve_devices
from towerkit.towers.compat import tf1
from towerkit.trainers._seams import OptimizerFactory
from towerkit.trainers._tower import SingleCostTrainer
from towerkit.trainers.parallel._allreduce import nccl_available, scale_gradient
from towerkit.trainers.parallel._builder import (
    LeastLoadedDeviceSetter,
    build_towers,
    session_creator_for_devices,
    warn_missing_devices,
)
from towerkit.trainers.parallel._dataparallel import (
    check_allreduce_mode,
    choose_allreduce_mode,
    device_key,
)
from towerkit.trainers.parallel._grad_sync import (
    aggregate_grads,
    align_tower_grads,
    allreduce_grads,
    copy_masters_op,
    make_replicas_local,
)
from towerkit.trainers.parallel._trainer_parts import RunOpEachEpoch, SessionInitThenRun

if TYPE_CHECKING:
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._sesscreate import SessionCreatorLike
    from towerkit.trainers.inputs._base import InputSource

__all__ = [
    "AsyncMultiGPUTrainer",
    "SyncMultiGPUTrainer",
    "SyncMultiGPUTrainerParameterServer",
    "SyncMultiGPUTrainerReplicated",
]

logger = logging.getLogger("towerkit.trainers")


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

    def initialize(
        self, session_creator: SessionCreatorLike, session_init: SessionInit | None
    ) -> None:
        """As `Trainer.initialize`, with a session that has every tower's device."""
        super().initialize(
            session_creator_for_devices(session_creator, self._devices),
            self._wrap_session_init(session_init),
        )
        warn_missing_devices(self.sess, self._devices)

    def _wrap_session_init(self, session_init: SessionInit | None) -> SessionInit | None:
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
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
    ) -> list[Callback]:
        n = self.num_towers
        choice = choose_allreduce_mode(self._mode_arg, n, self._gpu_towers(), nccl_available())
        (logger.warning if choice.fallback else logger.info)("all-reduce: %s", choice.reason)
        self._mode = choice.mode
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        vs_names = [""] + [f"tower{k}" for k in range(1, n)]
        tower_grads = build_towers(self._devices, get_grads, vs_names)
        reduced = allreduce_grads(tower_grads, self._devices, self._average, choice.mode)
        pairs = [pair for tower in reduced for pair in tower]
        opt = get_opt_fn()
        self.train_op = opt.apply_gradients(pairs, name="train_op")
        return []

    def _finish_graph(self) -> list[Callback]:
        n = self.num_towers
        self._replicas = make_replicas_local(self._graph, n)
        masters = tf1.global_variables()
        self._sync_op = copy_masters_op(masters, self._replicas, "sync_replicas")
        cbs: list[Callback] = []
        if self.BROADCAST_EVERY_EPOCH and n > 1:
            cbs.append(RunOpEachEpoch(self._sync_op, "copy tower 0's variables to the others"))
        return cbs

    def _wrap_session_init(self, session_init: SessionInit | None) -> SessionInit | None:
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

    def _setters(self) -> list[LeastLoadedDeviceSetter]:
        ps = ["/cpu:0"] if self._ps_device == "cpu" else list(self._devices)
        loads = [0] * len(ps)
        return [LeastLoadedDeviceSetter(d, ps, loads) for d in self._devices]

    def _shared_tower_grads(
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
    ) -> list[list[tuple[Any, Any]]]:
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        tower_grads = build_towers(self._setters(), get_grads, [""] * self.num_towers)
        return align_tower_grads(tower_grads)

    def _setup_graph(
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
    ) -> list[Callback]:
        get_grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)
        tower_grads = build_towers(self._setters(), get_grads, [""] * self.num_towers)
        averaged = aggregate_grads(tower_grads, colocation=True, average=True)
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
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
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
