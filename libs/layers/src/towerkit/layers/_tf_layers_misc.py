"""TensorFlow 1's ``tf.layers`` pooling, flatten, dropout and batch normalization on plain ops."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from towerkit.layers._args import keras_data_format, tf_padding
from towerkit.layers._batchnorm import moving_average_update
from towerkit.layers._tf_layers_conv import Regularizer, _input, _variable
from towerkit.layers._tf_layers_rules import (
    layer_scope,
    normalize_axis,
    size_tuple,
    static_training,
)
from towerkit.towers.compat import tf1


def _pool(
    kind: str,
    rank: int,
    inputs: Any,
    pool_size: Any,
    strides: Any,
    padding: str,
    data_format: str,
    name: str | None,
) -> Any:
    layer = f"{kind}_pooling{rank}d"
    x = _input(inputs, rank + 2, layer)
    size = size_tuple(pool_size, rank, "pool_size")
    step = size_tuple(strides, rank, "strides")
    pad = tf_padding(padding)
    last = keras_data_format(data_format) == "channels_last"
    fmt = {1: "NWC", 2: "NHWC"}[rank] if last else {1: "NCW", 2: "NCHW"}[rank]
    op = tf1.nn.max_pool if kind == "max" else tf1.nn.avg_pool
    with layer_scope(name, layer, None):
        if rank == 1:
            # as TensorFlow 1: a 2-D pooling over a height of 1
            axis = 1 if last else 2
            x2 = tf1.expand_dims(x, axis)
            window = [1, 1, size[0], 1] if last else [1, 1, 1, size[0]]
            move = [1, 1, step[0], 1] if last else [1, 1, 1, step[0]]
            out = op(x2, window, move, pad, data_format="NHWC" if last else "NCHW")
            return tf1.squeeze(out, [axis])
        window = [1, *size, 1] if last else [1, 1, *size]
        move = [1, *step, 1] if last else [1, 1, *step]
        return op(x, window, move, pad, data_format=fmt)


def max_pooling1d(
    inputs: Any,
    pool_size: Any,
    strides: Any,
    padding: str = "valid",
    data_format: str = "channels_last",
    name: str | None = None,
) -> Any:
    """Max pooling over the width of a 3-D input, as ``tf.compat.v1.layers.max_pooling1d``."""
    return _pool("max", 1, inputs, pool_size, strides, padding, data_format, name)


def average_pooling1d(
    inputs: Any,
    pool_size: Any,
    strides: Any,
    padding: str = "valid",
    data_format: str = "channels_last",
    name: str | None = None,
) -> Any:
    """Average pooling over the width of a 3-D input, as ``tf.compat.v1.layers.average_pooling1d``."""
    return _pool("average", 1, inputs, pool_size, strides, padding, data_format, name)


def max_pooling2d(
    inputs: Any,
    pool_size: Any,
    strides: Any,
    padding: str = "valid",
    data_format: str = "channels_last",
    name: str | None = None,
) -> Any:
    """2-D max pooling, as ``tf.compat.v1.layers.max_pooling2d`` (`strides` is required)."""
    return _pool("max", 2, inputs, pool_size, strides, padding, data_format, name)


def average_pooling2d(
    inputs: Any,
    pool_size: Any,
    strides: Any,
    padding: str = "valid",
    data_format: str = "channels_last",
    name: str | None = None,
) -> Any:
    """2-D average pooling, as ``tf.compat.v1.layers.average_pooling2d`` (`strides` is required)."""
    return _pool("average", 2, inputs, pool_size, strides, padding, data_format, name)


def flatten(inputs: Any, name: str | None = None, data_format: str = "channels_last") -> Any:
    """``[batch, ...]`` reshaped to ``[batch, -1]``, as ``tf.compat.v1.layers.flatten``.

    With ``channels_first`` the channels are moved last first, so the order of the
    features is that of a ``channels_last`` input. A 1-D input becomes ``[batch, 1]``.
    """
    x = tf1.convert_to_tensor(inputs)
    if x.shape.rank is None:
        msg = f"flatten: the input's rank must be known; got shape {x.shape}"
        raise ValueError(msg)
    last = keras_data_format(data_format) == "channels_last"
    with layer_scope(name, "flatten", None):
        rank = x.shape.rank
        if not last and rank > 2:
            x = tf1.transpose(x, [0, *range(2, rank), 1])
        if rank == 1:
            return tf1.expand_dims(x, 1)
        rest = x.shape.as_list()[1:]
        if None not in rest:
            return tf1.reshape(x, [-1, int(math.prod(rest))])
        return tf1.reshape(x, tf1.stack([tf1.shape(x)[0], -1]))


def _smart_cond(training: Any, when_true: Callable[[], Any], when_false: Callable[[], Any]) -> Any:
    known = static_training(training)
    if known is None:
        return tf1.cond(tf1.cast(training, tf1.bool), when_true, when_false)
    return when_true() if known else when_false()


def dropout(
    inputs: Any,
    rate: float = 0.5,
    noise_shape: Any = None,
    seed: int | None = None,
    training: Any = False,
    name: str | None = None,
) -> Any:
    """Dropout, as ``tf.compat.v1.layers.dropout``: drops only when `training` is true.

    `training` is a Python bool or a boolean tensor (then both branches are built);
    the default, False, passes the input through. `rate` is the fraction dropped.
    """
    number = isinstance(rate, (int, float)) and not isinstance(rate, bool)
    if not (number and 0 <= rate < 1) and not (not number and hasattr(rate, "dtype")):
        msg = f"dropout: 'rate' must be a number in [0, 1) or a tensor; got {rate!r}"
        raise ValueError(msg)
    x = tf1.convert_to_tensor(inputs)
    with layer_scope(name, "dropout", None):
        return _smart_cond(
            training,
            lambda: tf1.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed),
            lambda: tf1.identity(x),
        )


def _bn_checked(
    x: Any, axis: Any, fused: Any, unsupported: dict[str, Any]
) -> tuple[int, int, bool]:
    """The channel axis, the channel count and whether the fused op runs."""
    given = [k for k, v in unsupported.items() if v not in (None, False)]
    if given:
        msg = (
            f"batch_normalization: {', '.join(map(repr, given))} not supported by "
            "towerkit.layers.tf_layers (renormalization, virtual batches and adjustments "
            "are left out); use towerkit.layers.BatchRenorm or BatchNorm(virtual_batch_size=...)"
        )
        raise ValueError(msg)
    ndims = x.shape.rank
    if ndims is None:
        msg = f"batch_normalization: the input's rank must be known; got shape {x.shape}"
        raise ValueError(msg)
    axis = normalize_axis(axis, ndims, "batch_normalization")
    channels = x.shape[axis]
    if channels is None:
        msg = f"batch_normalization: the channel axis ({axis}) must be known; got shape {x.shape}"
        raise ValueError(msg)
    can_fuse = (
        ndims == 4
        and axis in (1, 3)
        and x.dtype.base_dtype
        in (
            tf1.float16,
            tf1.bfloat16,
            tf1.float32,
        )
    )
    if fused and not can_fuse:
        msg = (
            "batch_normalization: fused=True needs a 4-D float input normalized over axis 1 "
            f"or 3; got shape {x.shape}, axis {axis}, dtype {x.dtype.name}"
        )
        raise ValueError(msg)
    return axis, int(channels), can_fuse if fused is None else bool(fused)


def _bn_apply(x: Any, axis: int, fused: bool, params: Any, training: bool, epsilon: float) -> Any:
    """Normalized output and the batch mean and variance (None when not training)."""
    gamma, beta, moving_mean, moving_var = params
    ndims = x.shape.rank
    if fused:
        fmt = "NCHW" if axis == 1 else "NHWC"
        if training:
            # the fused op returns the sample (Bessel-corrected) variance, which the
            # moving average follows, as in TensorFlow 1's layer
            return tf1.nn.fused_batch_norm(
                x, gamma, beta, epsilon=epsilon, data_format=fmt, is_training=True
            )
        y, _, _ = tf1.nn.fused_batch_norm(
            x,
            gamma,
            beta,
            mean=moving_mean,
            variance=moving_var,
            epsilon=epsilon,
            data_format=fmt,
            is_training=False,
        )
        return y, None, None
    shape = [1] * ndims
    shape[axis] = int(x.shape[axis])
    last = axis == ndims - 1

    def bcast(v: Any) -> Any:
        return v if v is None or last else tf1.reshape(v, shape)

    xf = tf1.cast(x, gamma.dtype) if gamma is not None else x
    if training:
        axes = [a for a in range(ndims) if a != axis]
        mean, var = tf1.nn.moments(xf, axes, keepdims=not last)
        y = tf1.nn.batch_normalization(xf, mean, var, bcast(beta), bcast(gamma), epsilon)
        if not last:
            mean, var = tf1.squeeze(mean, axes), tf1.squeeze(var, axes)
        return tf1.cast(y, x.dtype), mean, var
    y = tf1.nn.batch_normalization(
        xf, bcast(moving_mean), bcast(moving_var), bcast(beta), bcast(gamma), epsilon
    )
    return tf1.cast(y, x.dtype), None, None


def batch_normalization(
    inputs: Any,
    axis: Any = -1,
    momentum: float = 0.99,
    epsilon: float = 1e-3,
    center: bool = True,
    scale: bool = True,
    beta_initializer: Any = None,
    gamma_initializer: Any = None,
    moving_mean_initializer: Any = None,
    moving_variance_initializer: Any = None,
    beta_regularizer: Regularizer = None,
    gamma_regularizer: Regularizer = None,
    beta_constraint: Any = None,
    gamma_constraint: Any = None,
    training: Any = False,
    trainable: bool = True,
    name: str | None = None,
    reuse: Any = None,
    renorm: bool = False,
    renorm_clipping: Any = None,
    renorm_momentum: float = 0.99,
    fused: bool | None = None,
    virtual_batch_size: int | None = None,
    adjustment: Any = None,
) -> Any:
    """Batch normalization, as ``tf.compat.v1.layers.batch_normalization``.

    Variables in ``batch_normalization`` (``batch_normalization_1``, ... or `name`):
    ``gamma`` (ones), ``beta`` (zeros), ``moving_mean`` (zeros) and
    ``moving_variance`` (ones), the last two not trainable. With `training` true (a
    Python bool or a boolean tensor; False by default) the batch statistics
    normalize and the moving averages' updates go to ``UPDATE_OPS`` (run them with
    the train op); otherwise the moving averages normalize. A 4-D input over axis
    1 or 3 uses the fused op (`fused`). `renorm`, `virtual_batch_size` and
    `adjustment` are not supported (a ValueError).
    """
    del renorm_momentum
    x = tf1.convert_to_tensor(inputs)
    axis, channels, use_fused = _bn_checked(
        x,
        axis,
        fused,
        {
            "renorm": renorm,
            "renorm_clipping": renorm_clipping,
            "virtual_batch_size": virtual_batch_size,
            "adjustment": adjustment,
        },
    )
    dtype = x.dtype.base_dtype
    if dtype in (tf1.float16, tf1.bfloat16):
        dtype = tf1.float32

    def init(given: Any, default: Callable[[], Any]) -> Any:
        return given if given is not None else default()

    with layer_scope(name, "batch_normalization", reuse):
        gamma = beta = None
        if scale:
            gamma = _variable(
                "gamma",
                [channels],
                dtype,
                init(gamma_initializer, tf1.ones_initializer),
                gamma_regularizer,
                gamma_constraint,
                trainable,
            )
        if center:
            beta = _variable(
                "beta",
                [channels],
                dtype,
                init(beta_initializer, tf1.zeros_initializer),
                beta_regularizer,
                beta_constraint,
                trainable,
            )
        moving = [
            tf1.get_variable(
                which,
                [channels],
                dtype=dtype,
                initializer=init(given, default),
                trainable=False,
            )
            for which, given, default in (
                ("moving_mean", moving_mean_initializer, tf1.zeros_initializer),
                ("moving_variance", moving_variance_initializer, tf1.ones_initializer),
            )
        ]
        if use_fused:
            gamma_t = gamma if gamma is not None else tf1.constant(1.0, dtype, [channels])
            beta_t = beta if beta is not None else tf1.constant(0.0, dtype, [channels])
        else:
            gamma_t, beta_t = gamma, beta
        params = (gamma_t, beta_t, *moving)
        known = static_training(training)
        if known is False:
            return _bn_apply(x, axis, use_fused, params, False, epsilon)[0]
        if known:
            y, mean, var = _bn_apply(x, axis, use_fused, params, True, epsilon)
            decay: Any = momentum
        else:
            flag = tf1.cast(training, tf1.bool)
            y, mean, var = tf1.cond(
                flag,
                lambda: _bn_apply(x, axis, use_fused, params, True, epsilon),
                lambda: (
                    _bn_apply(x, axis, use_fused, params, False, epsilon)[0],
                    *(tf1.identity(v) for v in moving),
                ),
            )
            decay = tf1.cond(flag, lambda: tf1.constant(float(momentum)), lambda: tf1.constant(1.0))
        for variable, value, op in (
            (moving[0], mean, "AssignMovingAvg"),
            (moving[1], var, "AssignMovingAvg_1"),
        ):
            update = moving_average_update(variable, value, decay, op)
            tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, getattr(update, "op", update))
        return y
