"""LayerNorm, InstanceNorm and BNReLU with tensorpack 0.11's arguments and variable names."""

from __future__ import annotations

import logging
from typing import Any

from towerkit.layers._args import tf_data_format, tflayer_args
from towerkit.layers._batchnorm import BatchNorm
from towerkit.layers._norm_rules import checked_shape, static_shape
from towerkit.layers._registry import attach_variables, layer_register
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.layers")


def _affine(
    channels: int, new_shape: list[int], center: bool, scale: bool, gamma_init: Any
) -> tuple[Any, Any, Any, Any]:
    """The ``beta`` and ``gamma`` shaped to broadcast (None when left out), and the variables.

    tensorpack multiplies by a constant one and adds a constant zero of shape
    ``[1, 1, 1, 1]`` instead of leaving them out; the result is the same, without
    the two extra broadcasting ops.
    """
    beta = gamma = beta_var = gamma_var = None
    if center:
        beta_var = tf1.get_variable("beta", [channels], initializer=tf1.zeros_initializer())
        beta = tf1.reshape(beta_var, new_shape)
    if scale:
        init = gamma_init if gamma_init is not None else tf1.ones_initializer()
        gamma_var = tf1.get_variable("gamma", [channels], initializer=init)
        gamma = tf1.reshape(gamma_var, new_shape)
    return beta, gamma, beta_var, gamma_var


@layer_register()
@tflayer_args(
    positional=(),
    aliases={
        "use_bias": "center",
        "use_scale": "scale",
        "gamma_init": "gamma_initializer",
    },
)
def LayerNorm(
    x: Any,
    epsilon: float = 1e-5,
    *,
    center: bool = True,
    scale: bool = True,
    gamma_initializer: Any = None,
    data_format: str = "channels_last",
) -> Any:
    """Layer normalization over every axis but the batch, with a per-channel affine.

    Args:
        x: a 2-D or 4-D tensor (4-D in `data_format`).
        epsilon: added to the variance.
        center: learn ``beta`` (alias ``use_bias``).
        scale: learn ``gamma`` (alias ``use_scale``).
        gamma_initializer: ones by default (alias ``gamma_init``).
        data_format: ``channels_last``/``NHWC`` or ``channels_first``/``NCHW``.

    Returns:
        The normalized tensor (op scope ``output``), with ``.variables``.

    Variables: ``beta``, ``gamma``.
    """
    fmt = tf_data_format(data_format)
    shape = checked_shape("LayerNorm", static_shape(x), (2, 4))
    ndims = len(shape)
    mean, var = tf1.nn.moments(x, list(range(1, ndims)), keep_dims=True)
    chan = shape[1] if fmt == "NCHW" else shape[-1]
    if chan is None:
        msg = f"LayerNorm: the channel count of the input must be known; got shape {shape}"
        raise ValueError(msg)
    new_shape = [1, chan] if ndims == 2 else ([1, chan, 1, 1] if fmt == "NCHW" else [1, 1, 1, chan])
    beta, gamma, beta_var, gamma_var = _affine(chan, new_shape, center, scale, gamma_initializer)
    ret = tf1.nn.batch_normalization(x, mean, var, beta, gamma, epsilon, name="output")
    return attach_variables(ret, gamma=gamma_var, beta=beta_var)


@layer_register()
@tflayer_args(positional=(), aliases={"gamma_init": "gamma_initializer"})
def InstanceNorm(
    x: Any,
    epsilon: float = 1e-5,
    *,
    center: bool = True,
    scale: bool = True,
    gamma_initializer: Any = None,
    data_format: str = "channels_last",
    use_affine: bool | None = None,
) -> Any:
    """Instance normalization: each sample's channels normalized over their spatial axes.

    Args:
        x: a 4-D tensor in `data_format` with a known channel count.
        epsilon: added to the variance.
        center: learn ``beta``.
        scale: learn ``gamma``.
        gamma_initializer: ones by default (alias ``gamma_init``).
        data_format: ``channels_last``/``NHWC`` or ``channels_first``/``NCHW``.
        use_affine: deprecated; sets both `center` and `scale`.

    Returns:
        The normalized tensor (op scope ``output``), with ``.variables``.

    Variables: ``beta``, ``gamma``.
    """
    fmt = tf_data_format(data_format)
    shape = checked_shape("InstanceNorm", static_shape(x), (4,))
    if use_affine is not None:
        _log.warning("InstanceNorm(use_affine=) is deprecated; use center= and scale=")
        center = scale = bool(use_affine)
    axes, ch = ([1, 2], shape[3]) if fmt == "NHWC" else ([2, 3], shape[1])
    if ch is None:
        msg = f"InstanceNorm: the channel count of the input must be known; got shape {shape}"
        raise ValueError(msg)
    new_shape = [1, 1, 1, ch] if fmt == "NHWC" else [1, ch, 1, 1]
    mean, var = tf1.nn.moments(x, axes, keep_dims=True)
    beta, gamma, beta_var, gamma_var = _affine(ch, new_shape, center, scale, gamma_initializer)
    ret = tf1.nn.batch_normalization(x, mean, var, beta, gamma, epsilon, name="output")
    return attach_variables(ret, gamma=gamma_var, beta=beta_var)


@layer_register(use_scope=None)
def BNReLU(x: Any, name: str | None = None) -> Any:
    """``BatchNorm('bn', x)`` then ReLU (with a scope name: ``BNReLU('name', x)``).

    Args:
        x: the input.
        name: the ReLU op's name (deprecated in tensorpack; use the scope name).
    """
    if name is not None:
        _log.warning("BNReLU(name=...) is deprecated; the output is the ReLU op")
    return tf1.nn.relu(BatchNorm("bn", x), name=name)
