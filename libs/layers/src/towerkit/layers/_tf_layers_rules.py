"""Pure argument rules of `tf_layers`: n-D sizes, axes and the TensorFlow 1 layer scope."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from towerkit.towers.compat import tf1


def size_tuple(value: Any, rank: int, what: str) -> tuple[int, ...]:
    """An int or a sequence of `rank` ints as a tuple of `rank` positive ints.

    Args:
        value: the size as given to a layer (``3`` or ``(3, 2)``).
        rank: how many spatial axes the layer has (1, 2 or 3).
        what: the argument's name, for the error message.

    Raises:
        ValueError: `value` is not a positive int nor a sequence of `rank` of them.

    Examples:
        >>> size_tuple(3, 2, "kernel_size")
        (3, 3)
        >>> size_tuple([2, 1, 4], 3, "strides")
        (2, 1, 4)
    """

    def positive(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    if positive(value):
        return (int(value),) * rank
    if isinstance(value, (list, tuple)) and len(value) == rank and all(map(positive, value)):
        return tuple(int(v) for v in value)
    msg = f"{what!r} must be a positive int or a sequence of {rank} positive ints; got {value!r}"
    raise ValueError(msg)


def positive_int(value: Any, what: str) -> int:
    """`value` when it is a positive int (not a bool).

    Examples:
        >>> positive_int(8, "filters")
        8
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        msg = f"{what!r} must be a positive int; got {value!r}"
        raise ValueError(msg)
    return value


def normalize_axis(axis: Any, ndims: int, layer: str) -> int:
    """`axis` (negative counts from the end) as an index in ``[1, ndims)``.

    The batch axis 0 cannot be normalized over; a list of one axis is accepted.

    Examples:
        >>> normalize_axis(-1, 4, "batch_normalization")
        3
        >>> normalize_axis([1], 4, "batch_normalization")
        1
    """
    if isinstance(axis, (list, tuple)) and len(axis) == 1:
        axis = axis[0]
    if isinstance(axis, bool) or not isinstance(axis, int) or not -ndims <= axis < ndims:
        msg = f"{layer}: 'axis' must be one int in [{-ndims}, {ndims}) for a {ndims}-D input; got {axis!r}"
        raise ValueError(msg)
    result = axis % ndims
    if result == 0:
        msg = f"{layer}: 'axis' cannot be the batch axis 0; got {axis!r}"
        raise ValueError(msg)
    return result


def static_training(training: Any) -> bool | None:
    """`training` as a bool when known when the graph is built, None for a run-time tensor.

    Examples:
        >>> static_training(True), static_training(0)
        (True, False)
    """
    if isinstance(training, (bool, int)):
        return bool(training)
    value = tf1.get_static_value(training)
    return None if value is None else bool(value)


@contextlib.contextmanager
def layer_scope(name: str | None, base: str, reuse: Any) -> Iterator[Any]:
    """The variable and name scope a ``tf.compat.v1.layers`` function builds in.

    As TensorFlow 1's functional layers: with `name`, the variable scope `name` in
    the current one (reusing as the current scope does, or when `reuse`); without,
    a fresh scope named `base` made unique (``conv2d``, ``conv2d_1``), or `base`
    itself when `reuse`. Ops go to the scope's first name scope.
    """
    if name is not None:
        with tf1.variable_scope(name) as captured:
            pass
    elif reuse:
        with tf1.variable_scope(base) as captured:
            pass
    else:
        with tf1.variable_scope(None, default_name=base) as captured:
            pass
    with (
        tf1.variable_scope(captured, reuse=reuse or None, auxiliary_name_scope=False) as scope,
        tf1.name_scope(captured.original_name_scope),
    ):
        yield scope
