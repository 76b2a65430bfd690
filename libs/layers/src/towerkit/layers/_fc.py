"""FullyConnected: tensorpack's dense layer (flattens its input), variables ``W`` and ``b``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from towerkit.layers._args import tflayer_args
from towerkit.layers._conv import add_activity_regularizer, kernel_and_bias
from towerkit.layers._registry import attach_variables, layer_register
from towerkit.towers.compat import tf1


def batch_flatten(x: Any) -> Any:
    """`x` reshaped to ``[batch, -1]`` (a static width when the non-batch shape is known)."""
    rest = x.shape.as_list()[1:] if x.shape.rank is not None else [None]
    if None not in rest:
        return tf1.reshape(x, [-1, int(math.prod(rest))])
    return tf1.reshape(x, tf1.stack([tf1.shape(x)[0], -1]))


@layer_register(log_shape=True)
@tflayer_args(positional=("units",), aliases={"out_dim": "units"})
def FullyConnected(
    inputs: Any,
    units: int,
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Callable[..., Any] | None = None,
    bias_regularizer: Callable[..., Any] | None = None,
    activity_regularizer: Callable[..., Any] | None = None,
) -> Any:
    """A dense layer as tensorpack's ``FullyConnected``: ``FullyConnected('fc', x, units)``.

    The input is flattened to ``[batch, -1]`` first. The kernel is initialized by
    variance scaling 2.0 (fan-in, normal). Aliases: ``out_dim``, ``nl``, ``W_init``,
    ``b_init``.

    Variables: ``W`` of shape ``[in_dim, units]`` and ``b`` (``[units]``). The
    output is named ``output``.
    """
    if isinstance(units, bool) or not isinstance(units, int) or units <= 0:
        msg = f"FullyConnected: 'units' must be a positive int; got {units!r}"
        raise ValueError(msg)
    if inputs.shape.rank is None or inputs.shape.rank < 2:
        msg = f"FullyConnected: the input must have a batch axis and more; got shape {inputs.shape}"
        raise ValueError(msg)
    flat = batch_flatten(inputs)
    in_dim = flat.shape[1]
    if in_dim is None:
        msg = (
            f"FullyConnected: the input's size per example must be known; got shape {inputs.shape}"
        )
        raise ValueError(msg)
    dtype = inputs.dtype.base_dtype
    W, b = kernel_and_bias(
        [int(in_dim), units],
        units,
        dtype,
        use_bias=use_bias,
        initializers=(kernel_initializer, bias_initializer),
        regularizers=(kernel_regularizer, bias_regularizer),
    )
    ret = tf1.matmul(flat, W)
    if b is not None:
        ret = tf1.nn.bias_add(ret, b)
    if activation is not None:
        ret = activation(ret)
    add_activity_regularizer(ret, activity_regularizer)
    ret = tf1.identity(ret, name="output")
    return attach_variables(ret, W=W, b=b)
