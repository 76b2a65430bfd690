"""Batch statistics averaged across the towers of one graph or the ranks of a horovod job."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from towerkit.layers._norm_rules import sync_key
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.layers")

_LOCK = threading.Lock()
_Gradient = Callable[[Any], Any]
"""A gradient function: the upstream gradient ``dy`` in, the gradient of the input out."""


def _custom_gradient(f: Callable[[Any], tuple[Any, _Gradient]]) -> Callable[[Any], Any]:
    """`tf.custom_gradient`, typed: `f` returns its output and its gradient function."""
    wrapped: Callable[[Any], Any] = tf.custom_gradient(f)
    return wrapped


_REGISTRIES: weakref.WeakKeyDictionary[Any, _Registry] = weakref.WeakKeyDictionary()


class _Registry:
    """One graph's collective keys: a group per tower count, an instance per synced layer."""

    def __init__(self) -> None:
        self.groups: dict[int, int] = {}
        self.instances: dict[str, int] = {}
        self.seen: dict[str, dict[int, str]] = {}

    def group_key(self, size: int) -> int:
        return self.groups.setdefault(size, len(self.groups) + 1)

    def instance_key(self, name: str) -> int:
        return self.instances.setdefault(name, len(self.instances) + 1)

    def claim(self, name: str, index: int, device: str) -> None:
        """Record that tower `index` on `device` all-reduces `name`; refuse what would hang."""
        towers = self.seen.setdefault(name, {})
        if index in towers:
            msg = (
                f"BatchNorm(sync_statistics=...): layer {name!r} is called twice in tower "
                f"{index}; a layer with synchronized statistics runs once per tower"
            )
            raise ValueError(msg)
        clash = [k for k, d in towers.items() if d == device]
        if clash:
            msg = (
                f"BatchNorm(sync_statistics=...): layer {name!r} of towers {clash[0]} and {index} "
                f"are both on device {device or '(none)'!r}; each tower must be on its own device "
                "(build the towers with a multi-device trainer, or under tf.device per tower)"
            )
            raise ValueError(msg)
        towers[index] = device


def _registry(graph: Any) -> _Registry:
    with _LOCK:
        reg = _REGISTRIES.get(graph)
        if reg is None:
            reg = _REGISTRIES[graph] = _Registry()
        return reg


def _all_sum(x: Any, size: int, group: int, instance: int) -> Any:
    return tf.raw_ops.CollectiveReduceV2(
        input=x,
        group_size=tf.constant(size),
        group_key=tf.constant(group),
        instance_key=tf.constant(instance),
        ordering_token=[],
        merge_op="Add",
        final_op="Id",
        communication_hint="auto",
    )


def tower_all_mean(x: Any, name: str, index: int, total: int) -> Any:
    """The mean of `x` over the `total` towers of the current graph (this one is `index`).

    Each tower must call it with the same `name` (tower prefixes are stripped by
    `sync_key`) from its own device; a collective all-reduce pairs the calls when the
    graph runs, on CPUs and GPUs alike. The gradient is the mean of the towers'
    gradients, all-reduced the same way.

    Raises:
        ValueError: two towers on one device, or one layer twice in a tower (either
            would hang the session).
    """
    graph = tf1.get_default_graph()
    reg = _registry(graph)
    key = sync_key(name)
    device = tf.identity(x).op.device
    reg.claim(key, index, device)
    group = reg.group_key(total)
    fwd, bwd = reg.instance_key(key), reg.instance_key(key + "/grad")
    scale = 1.0 / total

    @_custom_gradient
    def reduce(t: Any) -> tuple[Any, _Gradient]:
        def grad(dy: Any) -> Any:
            with tf1.device(device):
                return _all_sum(dy, total, group, bwd) * scale

        return _all_sum(t, total, group, fwd) * scale, grad

    return reduce(x)


def horovod_all_mean(x: Any) -> tuple[Any, int]:
    """The mean of `x` over the ranks of the horovod job, and the job's size.

    Horovod is imported here, at the first use, so the lib never needs it.

    Raises:
        ImportError: horovod is not installed.
    """
    try:
        import horovod.tensorflow as hvd
    except ImportError as err:
        msg = (
            "BatchNorm(sync_statistics='horovod') needs horovod (horovod.tensorflow), "
            f"which cannot be imported: {err}"
        )
        raise ImportError(msg) from err
    size = int(hvd.size())
    if size == 1:
        return x, size
    average = getattr(hvd, "Average", None)
    if average is not None:
        return hvd.allreduce(x, op=average), size
    return hvd.allreduce(x, average=True), size
