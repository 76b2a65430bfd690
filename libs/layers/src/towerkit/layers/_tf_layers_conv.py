"""TensorFlow 1's ``tf.layers`` convolutions and dense layer on plain ops: ``kernel``, ``bias``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towerkit.layers._args import keras_data_format, tf_padding, transpose_output_size
from towerkit.layers._conv import add_activity_regularizer
from towerkit.layers._tf_layers_rules import layer_scope, positive_int, size_tuple
from towerkit.towers.compat import tf1

Regularizer = Callable[[Any], Any] | None


def _variable(
    name: str,
    shape: list[int],
    dtype: Any,
    initializer: Any,
    regularizer: Regularizer,
    constraint: Any,
    trainable: bool,
) -> Any:
    # get_variable adds the regularizer's loss to REGULARIZATION_LOSSES once, when it
    # creates the variable (a reusing call adds nothing), as TensorFlow 1's layers did
    return tf1.get_variable(
        name,
        shape,
        dtype=dtype,
        initializer=initializer,
        regularizer=regularizer,
        constraint=constraint,
        trainable=trainable,
    )


def _bias(
    use_bias: bool,
    units: int,
    dtype: Any,
    initializer: Any,
    regularizer: Regularizer,
    constraint: Any,
    trainable: bool,
) -> Any:
    """The layer's ``bias`` of `units` (zeros unless `initializer` says), or None without one."""
    if not use_bias:
        return None
    if initializer is None:
        initializer = tf1.zeros_initializer()
    return _variable("bias", [units], dtype, initializer, regularizer, constraint, trainable)


def _input(inputs: Any, rank: int, layer: str) -> Any:
    x = tf1.convert_to_tensor(inputs)
    if x.shape.rank != rank:
        msg = f"{layer}: the input must be a {rank}-D tensor; got shape {x.shape}"
        raise ValueError(msg)
    return x


def _channels(x: Any, axis: int, layer: str) -> int:
    depth = x.shape[axis]
    if depth is None:
        msg = f"{layer}: the channel axis ({axis}) of the input must be known; got shape {x.shape}"
        raise ValueError(msg)
    return int(depth)


def _finish(out: Any, bias: Any, fmt: str, activation: Any, activity_regularizer: Any) -> Any:
    if bias is not None:
        out = tf1.nn.bias_add(out, bias, data_format=fmt)
    if activation is not None:
        out = activation(out)
    add_activity_regularizer(out, activity_regularizer)
    return out


def _tf_format(data_format: str, rank: int) -> tuple[str, int]:
    """The tf.nn data format of a `rank`-D convolution and its channel axis."""
    last = keras_data_format(data_format) == "channels_last"
    spatial = {1: "W", 2: "HW", 3: "DHW"}[rank]
    return (f"N{spatial}C", rank + 1) if last else (f"NC{spatial}", 1)


def _conv(
    rank: int,
    layer: str,
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any,
    padding: str,
    data_format: str,
    dilation_rate: Any,
    options: dict[str, Any],
) -> Any:
    x = _input(inputs, rank + 2, layer)
    filters = positive_int(filters, "filters")
    kernel = size_tuple(kernel_size, rank, "kernel_size")
    stride = size_tuple(strides, rank, "strides")
    dilation = size_tuple(dilation_rate, rank, "dilation_rate")
    pad = tf_padding(padding)
    fmt, axis = _tf_format(data_format, rank)
    depth = _channels(x, axis, layer)
    dtype = x.dtype.base_dtype
    with layer_scope(options["name"], layer, options["reuse"]):
        w = _variable(
            "kernel",
            [*kernel, depth, filters],
            dtype,
            options["kernel_initializer"],
            options["kernel_regularizer"],
            options["kernel_constraint"],
            options["trainable"],
        )
        b = _bias(
            options["use_bias"],
            filters,
            dtype,
            options["bias_initializer"],
            options["bias_regularizer"],
            options["bias_constraint"],
            options["trainable"],
        )
        out = tf1.nn.convolution(
            x,
            w,
            strides=list(stride),
            padding=pad,
            dilations=list(dilation),
            data_format=fmt,
            name=f"Conv{rank}D",
        )
        return _finish(out, b, fmt, options["activation"], options["activity_regularizer"])


def _options(**kwargs: Any) -> dict[str, Any]:
    if kwargs.get("bias_initializer") is None:
        kwargs["bias_initializer"] = tf1.zeros_initializer()
    return kwargs


def conv1d(
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any = 1,
    padding: str = "valid",
    data_format: str = "channels_last",
    dilation_rate: Any = 1,
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Regularizer = None,
    bias_regularizer: Regularizer = None,
    activity_regularizer: Regularizer = None,
    kernel_constraint: Any = None,
    bias_constraint: Any = None,
    trainable: bool = True,
    name: str | None = None,
    reuse: Any = None,
) -> Any:
    """A 1-D convolution of a ``[batch, width, channels]`` input, as ``tf.compat.v1.layers.conv1d``.

    Variables in ``conv1d`` (``conv1d_1``, ... or `name`): ``kernel``
    ``[k, in, filters]`` (Glorot uniform by default) and ``bias`` (zeros).
    """
    opts = _options(**{k: v for k, v in locals().items() if k not in _CONV_POSITIONAL})
    return _conv(
        1,
        "conv1d",
        inputs,
        filters,
        kernel_size,
        strides,
        padding,
        data_format,
        dilation_rate,
        opts,
    )


def conv2d(
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any = (1, 1),
    padding: str = "valid",
    data_format: str = "channels_last",
    dilation_rate: Any = (1, 1),
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Regularizer = None,
    bias_regularizer: Regularizer = None,
    activity_regularizer: Regularizer = None,
    kernel_constraint: Any = None,
    bias_constraint: Any = None,
    trainable: bool = True,
    name: str | None = None,
    reuse: Any = None,
) -> Any:
    """A 2-D convolution, as ``tf.compat.v1.layers.conv2d``.

    Variables in ``conv2d`` (``conv2d_1``, ... or `name`): ``kernel``
    ``[kh, kw, in, filters]`` (Glorot uniform by default) and ``bias`` (zeros).
    Padding is ``valid`` by default; `data_format` ``channels_last`` or
    ``channels_first``.
    """
    opts = _options(**{k: v for k, v in locals().items() if k not in _CONV_POSITIONAL})
    return _conv(
        2,
        "conv2d",
        inputs,
        filters,
        kernel_size,
        strides,
        padding,
        data_format,
        dilation_rate,
        opts,
    )


def conv3d(
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any = (1, 1, 1),
    padding: str = "valid",
    data_format: str = "channels_last",
    dilation_rate: Any = (1, 1, 1),
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Regularizer = None,
    bias_regularizer: Regularizer = None,
    activity_regularizer: Regularizer = None,
    kernel_constraint: Any = None,
    bias_constraint: Any = None,
    trainable: bool = True,
    name: str | None = None,
    reuse: Any = None,
) -> Any:
    """A 3-D convolution, as ``tf.compat.v1.layers.conv3d``.

    Variables in ``conv3d`` (or `name`): ``kernel`` ``[kd, kh, kw, in, filters]`` and
    ``bias``.
    """
    opts = _options(**{k: v for k, v in locals().items() if k not in _CONV_POSITIONAL})
    return _conv(
        3,
        "conv3d",
        inputs,
        filters,
        kernel_size,
        strides,
        padding,
        data_format,
        dilation_rate,
        opts,
    )


_CONV_POSITIONAL = frozenset(
    {"inputs", "filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate"}
)


def conv2d_transpose(
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any = (1, 1),
    padding: str = "valid",
    data_format: str = "channels_last",
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Regularizer = None,
    bias_regularizer: Regularizer = None,
    activity_regularizer: Regularizer = None,
    kernel_constraint: Any = None,
    bias_constraint: Any = None,
    trainable: bool = True,
    name: str | None = None,
    reuse: Any = None,
) -> Any:
    """A transposed 2-D convolution, as ``tf.compat.v1.layers.conv2d_transpose``.

    Variables in ``conv2d_transpose`` (or `name`): ``kernel`` ``[kh, kw, filters, in]``
    and ``bias``. The output is ``stride`` times the input (``same``), plus
    ``max(kernel - stride, 0)`` (``valid``).
    """
    layer = "conv2d_transpose"
    x = _input(inputs, 4, layer)
    filters = positive_int(filters, "filters")
    kernel = size_tuple(kernel_size, 2, "kernel_size")
    stride = size_tuple(strides, 2, "strides")
    pad = tf_padding(padding)
    fmt, axis = _tf_format(data_format, 2)
    depth = _channels(x, axis, layer)
    spatial = (1, 2) if fmt == "NHWC" else (2, 3)
    static = x.shape.as_list()
    dynamic = tf1.shape(x)
    sizes = [
        dynamic[a] * s + (max(k - s, 0) if pad == "VALID" else 0)
        for a, k, s in zip(spatial, kernel, stride, strict=True)
    ]
    known = [
        transpose_output_size(static[a], k, s, pad)
        for a, k, s in zip(spatial, kernel, stride, strict=True)
    ]
    if fmt == "NHWC":
        out_shape, static_out = [dynamic[0], *sizes, filters], [static[0], *known, filters]
    else:
        out_shape, static_out = [dynamic[0], filters, *sizes], [static[0], filters, *known]
    dtype = x.dtype.base_dtype
    with layer_scope(name, layer, reuse):
        w = _variable(
            "kernel",
            [*kernel, filters, depth],
            dtype,
            kernel_initializer,
            kernel_regularizer,
            kernel_constraint,
            trainable,
        )
        b = _bias(
            use_bias, filters, dtype, bias_initializer, bias_regularizer, bias_constraint, trainable
        )
        full = [1, *stride, 1] if fmt == "NHWC" else [1, 1, *stride]
        out = tf1.nn.conv2d_transpose(
            x, w, tf1.stack(out_shape), full, padding=pad, data_format=fmt
        )
        out.set_shape(static_out)
        return _finish(out, b, fmt, activation, activity_regularizer)


def separable_conv2d(
    inputs: Any,
    filters: int,
    kernel_size: Any,
    strides: Any = (1, 1),
    padding: str = "valid",
    data_format: str = "channels_last",
    dilation_rate: Any = (1, 1),
    depth_multiplier: int = 1,
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    depthwise_initializer: Any = None,
    pointwise_initializer: Any = None,
    bias_initializer: Any = None,
    depthwise_regularizer: Regularizer = None,
    pointwise_regularizer: Regularizer = None,
    bias_regularizer: Regularizer = None,
    activity_regularizer: Regularizer = None,
    depthwise_constraint: Any = None,
    pointwise_constraint: Any = None,
    bias_constraint: Any = None,
    trainable: bool = True,
    name: str | None = None,
    reuse: Any = None,
) -> Any:
    """A depthwise then pointwise 2-D convolution, as ``tf.compat.v1.layers.separable_conv2d``.

    Variables in ``separable_conv2d`` (or `name`): ``depthwise_kernel``
    ``[kh, kw, in, depth_multiplier]``, ``pointwise_kernel``
    ``[1, 1, in * depth_multiplier, filters]`` and ``bias``.
    """
    layer = "separable_conv2d"
    x = _input(inputs, 4, layer)
    filters = positive_int(filters, "filters")
    multiplier = positive_int(depth_multiplier, "depth_multiplier")
    kernel = size_tuple(kernel_size, 2, "kernel_size")
    stride = size_tuple(strides, 2, "strides")
    dilation = size_tuple(dilation_rate, 2, "dilation_rate")
    pad = tf_padding(padding)
    fmt, axis = _tf_format(data_format, 2)
    depth = _channels(x, axis, layer)
    dtype = x.dtype.base_dtype
    with layer_scope(name, layer, reuse):
        depthwise = _variable(
            "depthwise_kernel",
            [*kernel, depth, multiplier],
            dtype,
            depthwise_initializer,
            depthwise_regularizer,
            depthwise_constraint,
            trainable,
        )
        pointwise = _variable(
            "pointwise_kernel",
            [1, 1, depth * multiplier, filters],
            dtype,
            pointwise_initializer,
            pointwise_regularizer,
            pointwise_constraint,
            trainable,
        )
        b = _bias(
            use_bias, filters, dtype, bias_initializer, bias_regularizer, bias_constraint, trainable
        )
        full = [1, *stride, 1] if fmt == "NHWC" else [1, 1, *stride]
        out = tf1.nn.separable_conv2d(
            x, depthwise, pointwise, full, pad, rate=list(dilation), data_format=fmt
        )
        return _finish(out, b, fmt, activation, activity_regularizer)


def dense(
    inputs: Any,
    units: int,
    activation: Callable[..., Any] | None = None,
    use_bias: bool = True,
    kernel_initializer: Any = None,
    bias_initializer: Any = None,
    kernel_regularizer: Regularizer = None,
    bias_regularizer: Regularizer = None,
    activity_regularizer: Regularizer = None,
    kernel_constraint: Any = None,
    bias_constraint: Any = None,
    trainable: bool = True,
    name: str | None = None,
    reuse: Any = None,
) -> Any:
    """A dense layer over the last axis, as ``tf.compat.v1.layers.dense``.

    Variables in ``dense`` (``dense_1``, ... or `name`): ``kernel`` ``[in, units]``
    (Glorot uniform by default) and ``bias`` (zeros). An input of rank over 2 is
    multiplied along its last axis (it is not flattened).
    """
    units = positive_int(units, "units")
    x = tf1.convert_to_tensor(inputs)
    rank = x.shape.rank
    if rank is None or rank < 2 or x.shape[-1] is None:
        msg = (
            f"dense: the input must have rank 2 or more and a known last axis; got shape {x.shape}"
        )
        raise ValueError(msg)
    dtype = x.dtype.base_dtype
    with layer_scope(name, "dense", reuse):
        w = _variable(
            "kernel",
            [int(x.shape[-1]), units],
            dtype,
            kernel_initializer,
            kernel_regularizer,
            kernel_constraint,
            trainable,
        )
        b = _bias(
            use_bias, units, dtype, bias_initializer, bias_regularizer, bias_constraint, trainable
        )
        if rank == 2:
            out = tf1.matmul(x, w)
        else:
            out = tf1.tensordot(x, w, [[rank - 1], [0]])
            out.set_shape([*x.shape.as_list()[:-1], units])
        return _finish(out, b, "NHWC", activation, activity_regularizer)
