"""Pooling and unpooling: MaxPooling, AvgPooling, GlobalAvgPooling, FixedUnPooling, BilinearUpSample."""

from __future__ import annotations

from typing import Any

import numpy as np

from towerkit.layers._args import (
    keras_data_format,
    shape2d,
    shape4d,
    tf_data_format,
    tf_padding,
    tflayer_args,
)
from towerkit.layers._conv import check_rank, static_dim
from towerkit.layers._registry import layer_register
from towerkit.towers.compat import tf1

_POOL_ALIASES = {"shape": "pool_size", "stride": "strides"}


def _pool(
    op: Any, layer: str, inputs: Any, pool_size: Any, strides: Any, padding: str, data_format: str
) -> Any:
    check_rank(inputs, 4, layer)
    fmt = tf_data_format(data_format)
    size = shape4d(pool_size, fmt, "pool_size")
    step = shape4d(pool_size if strides is None else strides, fmt, "strides")
    ret = op(inputs, size, step, tf_padding(padding), data_format=fmt)
    return tf1.identity(ret, name="output")


@layer_register(log_shape=True)
@tflayer_args(positional=("pool_size", "strides"), aliases=_POOL_ALIASES)
def MaxPooling(
    inputs: Any,
    pool_size: Any,
    strides: Any = None,
    padding: str = "valid",
    data_format: str = "channels_last",
) -> Any:
    """2-D max pooling as tensorpack's ``MaxPooling``; `strides` defaults to `pool_size`.

    Aliases: ``shape`` (pool_size), ``stride``. The output is named ``output``.
    """
    return _pool(tf1.nn.max_pool2d, "MaxPooling", inputs, pool_size, strides, padding, data_format)


@layer_register(log_shape=True)
@tflayer_args(positional=("pool_size", "strides"), aliases=_POOL_ALIASES)
def AvgPooling(
    inputs: Any,
    pool_size: Any,
    strides: Any = None,
    padding: str = "valid",
    data_format: str = "channels_last",
) -> Any:
    """2-D average pooling as tensorpack's ``AvgPooling``; `strides` defaults to `pool_size`.

    With ``same`` padding the average is over the window's part inside the input.
    Aliases: ``shape`` (pool_size), ``stride``. The output is named ``output``.
    """
    return _pool(tf1.nn.avg_pool2d, "AvgPooling", inputs, pool_size, strides, padding, data_format)


@layer_register(log_shape=True)
def GlobalAvgPooling(x: Any, data_format: str = "channels_last") -> Any:
    """The mean over the spatial axes of a 4-D tensor: an ``[N, C]`` tensor named ``output``."""
    check_rank(x, 4, "GlobalAvgPooling")
    axes = [1, 2] if keras_data_format(data_format) == "channels_last" else [2, 3]
    return tf1.reduce_mean(x, axes, name="output")


@layer_register(log_shape=True)
def FixedUnPooling(
    x: Any, shape: Any, unpool_mat: Any = None, data_format: str = "channels_last"
) -> Any:
    """Unpool each pixel into a ``shape`` block: the Kronecker product with `unpool_mat`.

    Args:
        x: a 4-D tensor.
        shape: the block size, an int or ``(h, w)``.
        unpool_mat: a 2-D tensor or array of size `shape`; None puts the pixel at
            the block's top-left corner and zeros elsewhere.
        data_format: ``channels_last`` (``NHWC``) or ``channels_first`` (``NCHW``).
    """
    check_rank(x, 4, "FixedUnPooling")
    fmt = tf_data_format(data_format)
    block = shape2d(shape, "shape")
    static = x.shape.as_list()
    dynamic = tf1.shape(x)
    h_axis, w_axis = (1, 2) if fmt == "NHWC" else (2, 3)
    out_static = list(static)
    out_static[h_axis] = None if static[h_axis] is None else static[h_axis] * block[0]
    out_static[w_axis] = None if static[w_axis] is None else static[w_axis] * block[1]
    if block == [2, 2] and unpool_mat is None and fmt == "NHWC":
        channels = static_dim(x, 3, "FixedUnPooling", "channel count")
        out = tf1.concat([x, tf1.zeros_like(x)], 3)
        out = tf1.concat([out, tf1.zeros_like(out)], 2)
        ret = tf1.reshape(out, tf1.stack([-1, dynamic[1] * 2, dynamic[2] * 2, channels]))
    else:
        if unpool_mat is None:
            mat = np.zeros(block, dtype="float32")
            mat[0][0] = 1
            unpool_mat = tf1.constant(mat, name="unpool_mat")
        elif isinstance(unpool_mat, np.ndarray):
            unpool_mat = tf1.constant(unpool_mat, name="unpool_mat")
        if unpool_mat.shape.as_list() != block:
            msg = (
                f"FixedUnPooling: 'unpool_mat' must have the shape {block} of 'shape'; "
                f"got {unpool_mat.shape.as_list()}"
            )
            raise ValueError(msg)
        nchw = tf1.transpose(x, [0, 3, 1, 2]) if fmt == "NHWC" else x
        prod = tf1.tensordot(tf1.expand_dims(nchw, -1), tf1.expand_dims(unpool_mat, 0), axes=1)
        # prod: [n, c, h, w, bh, bw]
        perm = [0, 2, 4, 3, 5, 1] if fmt == "NHWC" else [0, 1, 2, 4, 3, 5]
        ret = tf1.transpose(prod, perm)
        sizes = [dynamic[k] for k in range(1, 4)]
        sizes[h_axis - 1] = sizes[h_axis - 1] * block[0]
        sizes[w_axis - 1] = sizes[w_axis - 1] * block[1]
        ret = tf1.reshape(ret, tf1.stack([-1, *sizes]))
    ret.set_shape(out_static)
    return ret


def bilinear_filter(size: int) -> np.ndarray:
    """The ``size x size`` bilinear upsampling kernel (Caffe's bilinear filler).

    Examples:
        >>> bilinear_filter(4)[1]
        array([0.1875, 0.5625, 0.5625, 0.1875], dtype=float32)
    """
    f = np.ceil(size / 2.0)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    ramp = 1 - np.abs(np.arange(size) / f - c)
    return np.outer(ramp, ramp).astype("float32")


@layer_register(log_shape=True)
def BilinearUpSample(x: Any, shape: int) -> Any:
    """Upsample an ``NHWC`` tensor `shape` times by deterministic bilinear interpolation.

    Each channel is upsampled on its own, by a transposed convolution with the
    bilinear kernel of size ``2 * shape`` on the input padded symmetrically
    (the edges are repeated), as older tensorpack releases did.
    """
    check_rank(x, 4, "BilinearUpSample")
    if isinstance(shape, bool) or not isinstance(shape, int) or shape <= 0:
        msg = f"BilinearUpSample: 'shape' (the upsampling factor) must be a positive int; got {shape!r}"
        raise ValueError(msg)
    static = x.shape.as_list()
    channels = static_dim(x, 3, "BilinearUpSample", "channel count")
    if shape == 1:
        return tf1.identity(x, name="output")
    size = 2 * shape
    kernel = bilinear_filter(size)[:, :, None, None] * np.eye(channels, dtype="float32")
    weights = tf1.constant(kernel, dtype=x.dtype.base_dtype, name="bilinear_upsample_filter")
    pad = shape - 1
    padded = tf1.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="SYMMETRIC")
    out_shape = tf1.shape(padded) * tf1.constant([1, shape, shape, 1], tf1.int32)
    deconv = tf1.nn.conv2d_transpose(padded, weights, out_shape, [1, shape, shape, 1], "SAME")
    edge = shape * pad
    ret = deconv[:, edge:-edge, edge:-edge, :]
    ret.set_shape(
        [
            static[0],
            None if static[1] is None else static[1] * shape,
            None if static[2] is None else static[2] * shape,
            channels,
        ]
    )
    return tf1.identity(ret, name="output")
