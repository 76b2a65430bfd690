"""Conv2D and Conv2DTranspose (Deconv2D): tensorpack's convolutions, variables ``W`` and ``b``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towerkit.layers._args import (
    channel_axis,
    shape2d,
    shape4d,
    tf_data_format,
    tf_padding,
    tflayer_args,
    transpose_output_size,
)
from towerkit.layers._registry import attach_variables, layer_register
from towerkit.towers.compat import tf1

_CONV_ALIASES = {"out_channel": "filters", "kernel_shape": "kernel_size", "stride": "strides"}


def default_kernel_initializer() -> Any:
    """The default kernel initializer of tensorpack: variance scaling 2.0, fan-in, untruncated normal."""
    return tf1.variance_scaling_initializer(
        scale=2.0, mode="fan_in", distribution="untruncated_normal"
    )


def kernel_and_bias(
    kernel_shape: list[int],
    bias_size: int,
    dtype: Any,
    *,
    use_bias: bool,
    initializers: tuple[Any, Any] = (None, None),
    regularizers: tuple[Any, Any] = (None, None),
) -> tuple[Any, Any]:
    """The layer's ``W`` and (when `use_bias`) ``b`` in the current variable scope.

    `initializers` and `regularizers` are (kernel, bias) pairs; None initializers mean
    tensorpack's defaults (variance scaling for ``W``, zeros for ``b``).
    """
    W = tf1.get_variable(
        "W",
        kernel_shape,
        dtype=dtype,
        initializer=initializers[0] or default_kernel_initializer(),
        regularizer=regularizers[0],
    )
    b = None
    if use_bias:
        b = tf1.get_variable(
            "b",
            [bias_size],
            dtype=dtype,
            initializer=initializers[1] or tf1.zeros_initializer(),
            regularizer=regularizers[1],
        )
    return W, b


def static_dim(inputs: Any, axis: int, layer: str, what: str) -> int:
    """The static length of `inputs` along `axis`; an error naming `layer` when unknown."""
    shape = inputs.shape
    if shape.rank is None or shape[axis] is None:
        msg = f"{layer}: the {what} of the input (axis {axis}) must be known; got shape {shape}"
        raise ValueError(msg)
    return int(shape[axis])


def check_rank(inputs: Any, rank: int, layer: str) -> None:
    """Raise unless `inputs` has static rank `rank`."""
    if inputs.shape.rank != rank:
        msg = f"{layer}: the input must be a {rank}-D tensor; got shape {inputs.shape}"
        raise ValueError(msg)


def check_filters(filters: Any, layer: str) -> int:
    """`filters` as a positive int."""
    if isinstance(filters, bool) or not isinstance(filters, int) or filters <= 0:
        msg = f"{layer}: 'filters' must be a positive int; got {filters!r}"
        raise ValueError(msg)
    return filters


def add_activity_regularizer(output: Any, regularizer: Callable[..., Any] | None) -> None:
    """Add ``regularizer(output) / batch size`` to ``REGULARIZATION_LOSSES`` (at every call)."""
    if regularizer is None:
        return
    with tf1.name_scope("ActivityRegularizer"):
        loss = regularizer(output)
        batch = tf1.cast(tf1.shape(output)[0], loss.dtype)
        tf1.add_to_collection(tf1.GraphKeys.REGULARIZATION_LOSSES, tf1.truediv(loss, batch))


@layer_register(log_shape=True)
@tflayer_args(positional=("filters", "kernel_size"), aliases=_CONV_ALIASES)
def Conv2D(
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any = (1, 1),
    padding: str = "same",
    data_format: str = "channels_last",
    dilation_rate: Any = (1, 1),
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Callable[..., Any] | None = None,
    bias_regularizer: Callable[..., Any] | None = None,
    activity_regularizer: Callable[..., Any] | None = None,
    split: int = 1,
) -> Any:
    """A 2-D convolution as tensorpack's ``Conv2D``: ``Conv2D('name', x, filters, kernel_size)``.

    Differences from ``tf.compat.v1.layers.conv2d`` (as in tensorpack): the kernel
    is initialized by variance scaling 2.0 (fan-in, normal), padding is ``same`` by
    default, and ``split > 1`` makes a group convolution. Aliases: ``out_channel``,
    ``kernel_shape``, ``stride``, ``nl``, ``W_init``, ``b_init``; data formats
    ``NHWC``/``NCHW`` too.

    Variables: ``W`` of shape ``[kh, kw, in_channels / split, filters]`` and ``b``
    (``[filters]``). The output is named ``output``.
    """
    check_rank(inputs, 4, "Conv2D")
    filters = check_filters(filters, "Conv2D")
    fmt = tf_data_format(data_format)
    axis = channel_axis(fmt)
    in_channels = static_dim(inputs, axis, "Conv2D", "channel count")
    if not isinstance(split, int) or isinstance(split, bool) or split <= 0:
        msg = f"Conv2D: 'split' must be a positive int; got {split!r}"
        raise ValueError(msg)
    if in_channels % split or filters % split:
        msg = (
            f"Conv2D: 'split'={split} must divide the input channels ({in_channels}) "
            f"and 'filters' ({filters})"
        )
        raise ValueError(msg)
    dilation = shape2d(dilation_rate, "dilation_rate")
    if (split != 1 or dilation != [1, 1]) and (
        kernel_regularizer is not None
        or bias_regularizer is not None
        or activity_regularizer is not None
    ):
        msg = (
            "Conv2D: regularizers are not supported with 'split' > 1 or a dilation "
            "(as in tensorpack); use regularize_cost instead"
        )
        raise ValueError(msg)
    pad = tf_padding(padding)
    kernel = shape2d(kernel_size, "kernel_size")
    stride = shape4d(strides, fmt, "strides")
    dtype = inputs.dtype.base_dtype
    W, b = kernel_and_bias(
        [*kernel, in_channels // split, filters],
        filters,
        dtype,
        use_bias=use_bias,
        initializers=(kernel_initializer, bias_initializer),
        regularizers=(kernel_regularizer, bias_regularizer),
    )
    dilations = shape4d(dilation, fmt, "dilation_rate")
    if split == 1:
        conv = tf1.nn.conv2d(inputs, W, stride, pad, data_format=fmt, dilations=dilations)
    else:
        pieces = zip(tf1.split(inputs, split, axis), tf1.split(W, split, 3))
        conv = tf1.concat(
            [
                tf1.nn.conv2d(i, k, stride, pad, data_format=fmt, dilations=dilations)
                for i, k in pieces
            ],
            axis,
        )
    ret = tf1.nn.bias_add(conv, b, data_format=fmt) if b is not None else conv
    if activation is not None:
        ret = activation(ret)
    add_activity_regularizer(ret, activity_regularizer)
    ret = tf1.identity(ret, name="output")
    return attach_variables(ret, W=W, b=b)


@layer_register(log_shape=True)
@tflayer_args(positional=("filters", "kernel_size", "strides"), aliases=_CONV_ALIASES)
def Conv2DTranspose(
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any = (1, 1),
    padding: str = "same",
    data_format: str = "channels_last",
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Callable[..., Any] | None = None,
    bias_regularizer: Callable[..., Any] | None = None,
    activity_regularizer: Callable[..., Any] | None = None,
) -> Any:
    """A transposed 2-D convolution as tensorpack's ``Conv2DTranspose`` (alias ``Deconv2D``).

    The output is ``stride`` times the input (``same``), plus ``max(kernel - stride, 0)``
    (``valid``). Regularizers are not supported (as in tensorpack on TensorFlow >= 1.13).

    Variables: ``W`` of shape ``[kh, kw, filters, in_channels]`` and ``b`` (``[filters]``).
    The output is named ``output``.
    """
    check_rank(inputs, 4, "Conv2DTranspose")
    filters = check_filters(filters, "Conv2DTranspose")
    if (
        kernel_regularizer is not None
        or bias_regularizer is not None
        or activity_regularizer is not None
    ):
        msg = (
            "Conv2DTranspose: regularizers are not supported (as in tensorpack); "
            "use regularize_cost instead"
        )
        raise ValueError(msg)
    fmt = tf_data_format(data_format)
    pad = tf_padding(padding)
    axis = channel_axis(fmt)
    in_channels = static_dim(inputs, axis, "Conv2DTranspose", "channel count")
    kernel = shape2d(kernel_size, "kernel_size")
    stride2 = shape2d(strides, "strides")
    spatial = (1, 2) if fmt == "NHWC" else (2, 3)
    static = inputs.shape.as_list()
    dynamic = tf1.shape(inputs)
    out_static = [
        transpose_output_size(static[a], k, s, pad)
        for a, k, s in zip(spatial, kernel, stride2, strict=True)
    ]
    out_dynamic = [
        dynamic[a] * s + (max(k - s, 0) if pad == "VALID" else 0)
        for a, k, s in zip(spatial, kernel, stride2, strict=True)
    ]
    if fmt == "NHWC":
        out_shape = tf1.stack([dynamic[0], *out_dynamic, filters])
        static_out = [static[0], *out_static, filters]
    else:
        out_shape = tf1.stack([dynamic[0], filters, *out_dynamic])
        static_out = [static[0], filters, *out_static]
    dtype = inputs.dtype.base_dtype
    W, b = kernel_and_bias(
        [*kernel, filters, in_channels],
        filters,
        dtype,
        use_bias=use_bias,
        initializers=(kernel_initializer, bias_initializer),
    )
    conv = tf1.nn.conv2d_transpose(
        inputs, W, out_shape, shape4d(stride2, fmt), padding=pad, data_format=fmt
    )
    conv.set_shape(static_out)
    ret = tf1.nn.bias_add(conv, b, data_format=fmt) if b is not None else conv
    if activation is not None:
        ret = activation(ret)
    ret = tf1.identity(ret, name="output")
    return attach_variables(ret, W=W, b=b)


Deconv2D = Conv2DTranspose
"""tensorpack's other name of `Conv2DTranspose` (the same function)."""
