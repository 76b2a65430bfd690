"""Non-linearities with state or shape changes: PReLU (variable ``alpha``) and Maxout."""

from __future__ import annotations

import logging
from typing import Any

from towerkit.layers._registry import attach_variables, layer_register
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.layers")


@layer_register(use_scope=None)
def Maxout(x: Any, num_unit: int) -> Any:
    """Maxout: the max over groups of `num_unit` channels of an ``NHWC`` or ``NC`` tensor.

    The channel count must be known and divisible by `num_unit`; the output has
    ``C / num_unit`` channels and is named ``output``.
    """
    shape = x.shape.as_list() if x.shape.rank is not None else None
    if shape is None or len(shape) not in (2, 4):
        msg = f"Maxout: the input must be a 2-D or 4-D tensor; got shape {x.shape}"
        raise ValueError(msg)
    if isinstance(num_unit, bool) or not isinstance(num_unit, int) or num_unit <= 0:
        msg = f"Maxout: 'num_unit' must be a positive int; got {num_unit!r}"
        raise ValueError(msg)
    ch = shape[-1]
    if ch is None or ch % num_unit:
        msg = f"Maxout: the channel count ({ch}) must be known and divisible by 'num_unit' ({num_unit})"
        raise ValueError(msg)
    if len(shape) == 4:
        dyn = tf1.shape(x)
        x = tf1.reshape(x, tf1.stack([-1, dyn[1], dyn[2], ch // num_unit, num_unit]))
        x.set_shape([shape[0], shape[1], shape[2], ch // num_unit, num_unit])
    else:
        x = tf1.reshape(x, [-1, ch // num_unit, num_unit])
    return tf1.reduce_max(x, len(shape), name="output")


@layer_register()
def PReLU(x: Any, init: float = 0.001, name: str | None = None) -> Any:
    """Parametric ReLU: ``0.5 * ((1 + alpha) * x + (1 - alpha) * |x|)``, with a learned scalar ``alpha``.

    Args:
        x: the input.
        init: the initial value of ``alpha``.
        name: the output's op name (deprecated in tensorpack, kept for old code).

    Variables: ``alpha`` (a scalar).
    """
    if name is not None:
        _log.warning("PReLU(name=...) is deprecated; use the layer's scope name instead")
    alpha = tf1.get_variable(
        "alpha", [], dtype=x.dtype.base_dtype, initializer=tf1.constant_initializer(init)
    )
    y = (1 + alpha) * x + (1 - alpha) * tf1.abs(x)
    ret = tf1.multiply(y, 0.5, name=name)
    return attach_variables(ret, alpha=alpha)
