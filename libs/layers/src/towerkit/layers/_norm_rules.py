"""Pure rules of the normalization layers: axes, EMA-update plans and statistics-sync keys."""

from __future__ import annotations

import re
from typing import Any

import attrs

EMA_UPDATES = ("default", "collection", "internal", "skip")
"""The values of BatchNorm's ``ema_update``, as tensorpack 0.11 accepts them."""

SYNC_STATISTICS = (None, "nccl", "horovod")
"""The values of BatchNorm's ``sync_statistics`` (strings in any case)."""

_TOWER_PREFIX = re.compile(r"tower[0-9]+/")


def check_ndims(layer: str, shape: Any, allowed: tuple[int, ...]) -> int:
    """The rank of a static `shape` (a list, None for unknown), checked against `allowed`.

    Examples:
        >>> check_ndims("BatchNorm", [None, 4], (2, 4))
        2
        >>> check_ndims("BatchNorm", [2, 3, 4], (2, 4))
        Traceback (most recent call last):
        ...
        ValueError: BatchNorm: the input must be 2-D or 4-D; got shape [2, 3, 4] (3-D)
    """
    if shape is None:
        msg = f"{layer}: the input must have a known rank ({' or '.join(map(str, allowed))})"
        raise ValueError(msg)
    ndims = len(shape)
    if ndims not in allowed:
        want = " or ".join(f"{n}-D" for n in allowed)
        msg = f"{layer}: the input must be {want}; got shape {list(shape)} ({ndims}-D)"
        raise ValueError(msg)
    return ndims


def static_shape(tensor: Any) -> list[Any] | None:
    """The static shape of `tensor` as a list (None for an unknown rank)."""
    return tensor.shape.as_list() if tensor.shape.rank is not None else None


def checked_shape(layer: str, shape: Any, allowed: tuple[int, ...]) -> list[Any]:
    """The static `shape` as a list, after `check_ndims`.

    Examples:
        >>> checked_shape("LayerNorm", (None, 3), (2, 4))
        [None, 3]
    """
    check_ndims(layer, shape, allowed)
    return list(shape)


def bn_axis(ndims: int, data_format: str, axis: int | None) -> int:
    """The channel axis BatchNorm normalizes over, as tensorpack picks it.

    `data_format` is ``"NHWC"`` or ``"NCHW"``; it is ignored for 2-D inputs (axis 1).
    An explicit `axis` must be 1 or 3.

    Examples:
        >>> bn_axis(4, "NHWC", None), bn_axis(4, "NCHW", None), bn_axis(2, "NCHW", None)
        (3, 1, 1)
        >>> bn_axis(4, "NHWC", 2)
        Traceback (most recent call last):
        ...
        ValueError: BatchNorm: 'axis' must be 1 or 3 (or None); got 2
    """
    if axis is None:
        if ndims == 2:
            return 1
        return 1 if data_format == "NCHW" else 3
    if isinstance(axis, bool) or axis not in (1, 3) or axis >= ndims:
        msg = f"BatchNorm: 'axis' must be 1 or 3 (or None); got {axis!r}"
        if axis in (1, 3):
            msg += f" for a {ndims}-D input"
        raise ValueError(msg)
    return int(axis)


def reduction_axes(ndims: int, axis: int) -> list[int]:
    """The axes the batch statistics are taken over: every axis but `axis`.

    Examples:
        >>> reduction_axes(4, 3), reduction_axes(4, 1), reduction_axes(2, 1)
        ([0, 1, 2], [0, 2, 3], [0])
    """
    return [i for i in range(ndims) if i != axis]


def broadcast_shape(ndims: int, axis: int, channels: int) -> list[int]:
    """The shape a per-channel vector takes to broadcast against the input.

    Examples:
        >>> broadcast_shape(4, 1, 8), broadcast_shape(4, 3, 8), broadcast_shape(2, 1, 8)
        ([1, 8, 1, 1], [1, 1, 1, 8], [1, 8])
    """
    shape = [1] * ndims
    shape[axis] = channels
    return shape


def check_ema_update(value: Any) -> str:
    """`value` as one of `EMA_UPDATES`, ``"default"`` read as ``"collection"``.

    Examples:
        >>> check_ema_update("default"), check_ema_update("internal")
        ('collection', 'internal')
        >>> check_ema_update("always")
        Traceback (most recent call last):
        ...
        ValueError: BatchNorm: 'ema_update' must be one of 'default', 'collection', 'internal', 'skip'; got 'always'
    """
    if not isinstance(value, str) or value not in EMA_UPDATES:
        choices = ", ".join(repr(x) for x in EMA_UPDATES)
        msg = f"BatchNorm: 'ema_update' must be one of {choices}; got {value!r}"
        raise ValueError(msg)
    return "collection" if value == "default" else value


def check_sync_statistics(value: Any) -> str | None:
    """`value` as None, ``"nccl"`` or ``"horovod"`` (strings in any case).

    Examples:
        >>> check_sync_statistics("NCCL"), check_sync_statistics(None)
        ('nccl', None)
        >>> check_sync_statistics("gloo")
        Traceback (most recent call last):
        ...
        ValueError: BatchNorm: 'sync_statistics' must be None, 'nccl' or 'horovod'; got 'gloo'
    """
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in ("nccl", "horovod"):
        return value.lower()
    msg = f"BatchNorm: 'sync_statistics' must be None, 'nccl' or 'horovod'; got {value!r}"
    raise ValueError(msg)


def check_virtual_batch_size(value: Any, batch: int | None) -> int | None:
    """`value` as a positive int dividing the static `batch` size (when known), or None.

    Examples:
        >>> check_virtual_batch_size(2, 8), check_virtual_batch_size(None, 3)
        (2, None)
        >>> check_virtual_batch_size(3, 8)
        Traceback (most recent call last):
        ...
        ValueError: BatchNorm: 'virtual_batch_size' (3) must divide the batch size (8)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        msg = f"BatchNorm: 'virtual_batch_size' must be a positive int or None; got {value!r}"
        raise ValueError(msg)
    if batch is not None and batch % value != 0:
        msg = f"BatchNorm: 'virtual_batch_size' ({value}) must divide the batch size ({batch})"
        raise ValueError(msg)
    return value


@attrs.frozen(kw_only=True)
class EmaPlan:
    """How a BatchNorm call treats its moving averages.

    Attributes:
        update: whether this call updates ``mean/EMA`` and ``variance/EMA``.
        internal: the update runs with the layer's output (control dependencies)
            instead of through the ``UPDATE_OPS`` collection.
        model_variables: the moving averages go to the ``MODEL_VARIABLES`` collection.
    """

    update: bool
    internal: bool
    model_variables: bool


def ema_plan(
    *,
    training: bool,
    in_tower: bool,
    tower_training: bool,
    main_training_tower: bool,
    ema_update: str,
    own_statistics: bool,
) -> EmaPlan:
    """The EMA plan of one BatchNorm call, as tensorpack 0.11 decides it.

    The averages move only when batch statistics are used (`training`), in the main
    training tower, outside every tower, or in an inference tower (which cannot know
    whether another tower updates them) when the update is internal (an inference
    tower leaves ``UPDATE_OPS`` as it was), and never with ``ema_update="skip"``. The
    layer's own statistics code (`own_statistics`: synchronized or virtual-batch
    statistics) always updates internally, as tensorpack does.

    Args:
        training: the layer normalizes with batch statistics.
        in_tower: the layer is built inside a tower context.
        tower_training: the tower is a training tower.
        main_training_tower: the tower is the main (first) training tower.
        ema_update: a value checked by `check_ema_update`.
        own_statistics: the statistics are computed by the layer itself.

    Examples:
        >>> ema_plan(training=True, in_tower=True, tower_training=True,
        ...          main_training_tower=False, ema_update="collection", own_statistics=False)
        EmaPlan(update=False, internal=False, model_variables=False)
        >>> ema_plan(training=True, in_tower=True, tower_training=False,
        ...          main_training_tower=False, ema_update="internal", own_statistics=False)
        EmaPlan(update=True, internal=True, model_variables=False)
        >>> ema_plan(training=True, in_tower=True, tower_training=False,
        ...          main_training_tower=False, ema_update="default", own_statistics=False)
        EmaPlan(update=False, internal=False, model_variables=False)
    """
    mode = check_ema_update(ema_update)
    main = main_training_tower or not in_tower
    update = training and (main or not tower_training) and mode != "skip"
    if in_tower and not tower_training and mode == "collection" and not own_statistics:
        # an inference tower keeps UPDATE_OPS as it was (tensorpack freezes it there)
        update = False
    internal = update and (own_statistics or mode == "internal")
    return EmaPlan(update=update, internal=internal, model_variables=main)


def sync_key(scope_name: str) -> str:
    """The name that pairs one BatchNorm layer's statistics across towers.

    The ``tower<k>/`` prefixes a replicated trainer puts in variable scopes are
    removed, so the same layer in every tower gets the same key.

    Examples:
        >>> sync_key("tower1/res2/bn"), sync_key("res2/bn")
        ('res2/bn', 'res2/bn')
    """
    return _TOWER_PREFIX.sub("", scope_name)
