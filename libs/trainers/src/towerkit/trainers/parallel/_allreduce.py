"""Graph ops that combine the gradients of several towers: sums, means and all-reduces."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from towerkit.towers.compat import tf1
from towerkit.trainers.parallel._dataparallel import hierarchical_groups

__all__ = [
    "allreduce",
    "average_rows",
    "copy_gradient",
    "nccl_available",
    "scale_gradient",
    "sum_gradients",
]

logger = logging.getLogger("towerkit.trainers")


def nccl_available() -> bool:
    """Whether this TensorFlow has NCCL kernels and GPUs to run them on."""
    info = tf.sysconfig.get_build_info()
    if not info.get("is_cuda_build", False):
        return False
    return bool(tf.config.list_physical_devices("GPU"))


def _is_sparse(g: Any) -> bool:
    return isinstance(g, tf.IndexedSlices)


def sum_gradients(grads: Sequence[Any]) -> Any:
    """The sum of one variable's gradients from several towers, in the current device scope.

    Dense gradients are added; sparse ones (``tf.IndexedSlices``, e.g. of an
    embedding lookup) are concatenated, which sums them without densifying. A mix is
    densified first.
    """
    grads = list(grads)
    if len(grads) == 1:
        return grads[0]
    if all(_is_sparse(g) for g in grads):
        return tf.IndexedSlices(
            tf.concat([g.values for g in grads], axis=0),
            tf.concat([g.indices for g in grads], axis=0),
            grads[0].dense_shape,
        )
    dense = [tf.convert_to_tensor(g) for g in grads]
    return tf.add_n(dense)


def scale_gradient(grad: Any, factor: float) -> Any:
    """`grad` times `factor` (a Python number), dense or sparse; `grad` itself for 1."""
    if factor == 1.0:
        return grad
    if _is_sparse(grad):
        values = grad.values * tf.cast(factor, grad.values.dtype)
        return tf.IndexedSlices(values, grad.indices, grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


def average_rows(rows: Sequence[Sequence[tuple[Any, Any]]], device: str) -> list[Any]:
    """The mean of each row's gradients (``(gradient, variable)`` pairs), made on `device`."""
    out = []
    with tf1.device(device), tf1.name_scope("average_gradients"):
        for row in rows:
            out.append(scale_gradient(sum_gradients([g for g, _ in row]), 1.0 / len(row)))
    return out


def copy_gradient(grad: Any) -> Any:
    """A copy of `grad` made in the current device scope (so each tower reads a local copy)."""
    if _is_sparse(grad):
        return tf.IndexedSlices(
            tf.identity(grad.values), tf.identity(grad.indices), grad.dense_shape
        )
    return tf.identity(grad)


def _reduce_cpu(
    column: Sequence[Any], devices: Sequence[str], factor: float, cpu: str
) -> list[Any]:
    with tf.device(cpu):
        total = scale_gradient(sum_gradients(column), factor)
    out = []
    for dev in devices:
        with tf.device(dev):
            out.append(copy_gradient(total))
    return out


def _reduce_hierarchical(column: Sequence[Any], devices: Sequence[str], factor: float) -> list[Any]:
    groups = hierarchical_groups(len(devices))
    partials = []
    for group in groups:
        with tf.device(devices[group[0]]):
            partials.append(sum_gradients([column[i] for i in group]))
    with tf.device(devices[groups[0][0]]):
        total = scale_gradient(sum_gradients(partials), factor)
    out: list[Any] = [None] * len(devices)
    for group in groups:
        with tf.device(devices[group[0]]):
            at_leader = copy_gradient(total)
        for i in group:
            with tf.device(devices[i]):
                out[i] = copy_gradient(at_leader)
    return out


def _reduce_nccl(
    column: Sequence[Any], devices: Sequence[str], factor: float, shared_name: str
) -> list[Any]:
    dense = []
    for g, dev in zip(column, devices):
        with tf.device(dev):
            dense.append(tf.convert_to_tensor(g))
    out = []
    for g, dev in zip(dense, devices):
        with tf.device(dev):
            reduced = tf.raw_ops.NcclAllReduce(
                input=g, reduction="sum", num_devices=len(devices), shared_name=shared_name
            )
            out.append(scale_gradient(reduced, factor))
    return out


def allreduce(
    columns: Sequence[Sequence[Any]],
    devices: Sequence[str],
    mode: str,
    average: bool,
    cpu_device: str = "/cpu:0",
) -> list[list[Any]]:
    """All-reduce gradients across towers: every tower gets the sum (or mean) of all.

    Args:
        columns: one row per variable; each row holds that variable's gradient in
            every tower, in tower order.
        devices: the towers' devices, in tower order.
        mode: ``'cpu'`` (sum on the CPU, copy to each tower), ``'hierarchical'`` (sum
            within groups of towers, then across the groups' leaders, then back), or
            ``'nccl'`` (NCCL all-reduce between GPUs).
        average: divide the sum by the number of towers.
        cpu_device: where mode ``'cpu'`` sums.

    Returns:
        One row per variable, holding the reduced gradient for each tower.
    """
    n = len(devices)
    factor = 1.0 / n if average else 1.0
    graph = tf1.get_default_graph()
    out = []
    with tf1.name_scope("allreduce"):
        for column in columns:
            if len(column) != n:
                msg = f"each gradient row needs one entry per tower ({n}); got {len(column)}"
                raise ValueError(msg)
            if mode == "cpu":
                out.append(_reduce_cpu(column, devices, factor, cpu_device))
            elif mode == "hierarchical":
                out.append(_reduce_hierarchical(column, devices, factor))
            elif mode == "nccl":
                shared = graph.unique_name("nccl_allreduce", mark_as_used=True)
                out.append(_reduce_nccl(column, devices, factor, shared))
            else:
                msg = f"'mode' must be one of 'cpu', 'hierarchical', 'nccl'; got {mode!r}"
                raise ValueError(msg)
    return out
