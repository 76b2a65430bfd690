"""BatchNorm and BatchRenorm with tensorpack 0.11's arguments, variables and EMA updates."""

from __future__ import annotations

import logging
from typing import Any

from towerkit.layers._args import tf_data_format, tflayer_args
from towerkit.layers._norm_rules import (
    EmaPlan,
    bn_axis,
    broadcast_shape,
    check_sync_statistics,
    check_virtual_batch_size,
    checked_shape,
    ema_plan,
    reduction_axes,
    static_shape,
)
from towerkit.layers._registry import attach_variables, layer_register
from towerkit.layers._sync import horovod_all_mean, tower_all_mean
from towerkit.towers import get_current_tower_context
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.layers")
_WARNED: set[str] = set()

_BN_ALIASES = {
    "use_bias": "center",
    "use_scale": "scale",
    "gamma_init": "gamma_initializer",
    "decay": "momentum",
    "use_local_stat": "training",
}
_RENORM_ALIASES = {
    "use_bias": "center",
    "use_scale": "scale",
    "gamma_init": "gamma_initializer",
    "decay": "momentum",
}


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        _log.warning(message, *args)


def _param_dtype(inputs: Any) -> Any:
    dtype = inputs.dtype.base_dtype
    return tf1.float32 if dtype in (tf1.float16, tf1.bfloat16) else dtype


def _tower_flags(layer: str, training: Any) -> tuple[bool, Any]:
    """`training` as a bool (read from the tower context when None), and the context."""
    ctx = get_current_tower_context()
    if training is None:
        if ctx is None:
            msg = (
                f"{layer}: no tower context tells training from inference; build it inside "
                "TowerContext(...) (as trainers and predictors do) or give training=True/False"
            )
            raise ValueError(msg)
        training = ctx.is_training
    return bool(training), ctx


def moving_average_update(variable: Any, value: Any, momentum: Any, name: str) -> Any:
    """``variable -= (variable - value) * (1 - momentum)``, colocated with `variable`."""
    with tf1.name_scope(name) as scope, variable.graph.colocate_with(variable):
        decay = tf1.cast(tf1.convert_to_tensor(1.0 - momentum), variable.dtype.base_dtype)
        delta = (variable - tf1.cast(value, variable.dtype.base_dtype)) * decay
        return tf1.assign_sub(variable, delta, name=scope)


def _stat_variables(
    channels: int, dtype: Any, main: bool, *, order: str, center: bool, scale: bool, inits: Any
) -> tuple[Any, Any, Any, Any]:
    """beta, gamma (variables, or None when left out) and the two moving averages."""
    beta_init, gamma_init = inits
    made: dict[str, Any] = {"beta": None, "gamma": None}
    for which in ("gamma", "beta") if order == "gamma" else ("beta", "gamma"):
        if which == "gamma" and scale:
            made["gamma"] = tf1.get_variable("gamma", [channels], dtype, initializer=gamma_init)
        if which == "beta" and center:
            made["beta"] = tf1.get_variable("beta", [channels], dtype, initializer=beta_init)
    mean = tf1.get_variable(
        "mean/EMA", [channels], dtype, initializer=tf1.zeros_initializer(), trainable=False
    )
    var = tf1.get_variable(
        "variance/EMA", [channels], dtype, initializer=tf1.ones_initializer(), trainable=False
    )
    if main:
        for v in (mean, var):
            tf1.add_to_collection(tf1.GraphKeys.MODEL_VARIABLES, v)
    return made["beta"], made["gamma"], mean, var


def _fused_or_moments(
    inputs: Any,
    axis: int,
    ndims: int,
    beta: Any,
    gamma: Any,
    epsilon: float,
    training: bool,
    moving: tuple[Any, Any],
) -> tuple[Any, Any, Any]:
    """The normalized output and the batch mean and (biased) variance, None at inference."""
    dtype = _param_dtype(inputs)
    channels = inputs.shape[axis]
    offset = beta if beta is not None else tf1.constant(0.0, dtype, [channels])
    factor = gamma if gamma is not None else tf1.constant(1.0, dtype, [channels])
    if ndims == 4:
        fmt = "NCHW" if axis == 1 else "NHWC"
        if training:
            y, mean, var = tf1.nn.fused_batch_norm(
                inputs, factor, offset, epsilon=epsilon, data_format=fmt, is_training=True
            )
            # the fused op returns the sample (Bessel-corrected) variance, which the
            # moving average follows, as in tensorpack 0.11
            return y, mean, var
        y, _, _ = tf1.nn.fused_batch_norm(
            inputs,
            factor,
            offset,
            mean=moving[0],
            variance=moving[1],
            epsilon=epsilon,
            data_format=fmt,
            is_training=False,
        )
        return y, None, None
    x = tf1.cast(inputs, dtype)
    if training:
        mean, var = tf1.nn.moments(x, [0])
        y = tf1.nn.batch_normalization(x, mean, var, beta, gamma, epsilon)
    else:
        mean = var = None
        y = tf1.nn.batch_normalization(x, moving[0], moving[1], beta, gamma, epsilon)
    return tf1.cast(y, inputs.dtype), mean, var


def _synced_moments(inputs: Any, red: list[int], mode: str, ctx: Any) -> tuple[Any, Any]:
    """E[x] and Var[x] per channel, averaged over the towers or horovod ranks."""
    mean = tf1.reduce_mean(inputs, axis=red)
    mean_sq = tf1.reduce_mean(tf1.square(inputs), axis=red)
    both = tf1.concat([mean, mean_sq], axis=0)
    if mode == "nccl":
        total = ctx.total if ctx is not None else 1
        if total == 1:
            _warn_once("sync1", "BatchNorm(sync_statistics='nccl') is used with only one tower")
        else:
            name = tf1.get_variable_scope().name
            both = tower_all_mean(both, name, ctx.index, total)
    else:
        both, size = horovod_all_mean(both)
        if size == 1:
            _warn_once("synchvd", "BatchNorm(sync_statistics='horovod') runs in one process only")
    mean, mean_sq = tf1.split(both, 2, axis=0)
    return mean, mean_sq - tf1.square(mean)


def _own_statistics(
    inputs: Any,
    axis: int,
    ndims: int,
    params: tuple[Any, Any],
    epsilon: float,
    sync: str | None,
    virtual: int | None,
    ctx: Any,
) -> tuple[Any, Any, Any]:
    """Synchronized or virtual-batch statistics: output and the vectors the EMA follows."""
    beta, gamma = params
    channels = inputs.shape[axis]
    red = reduction_axes(ndims, axis)
    if sync is not None:
        mean, var = _synced_moments(inputs, red, sync, ctx)
        if ndims == 4 and axis == 1:
            shape = broadcast_shape(4, 1, channels)
            y = tf1.nn.batch_normalization(
                inputs,
                tf1.reshape(mean, shape),
                tf1.reshape(var, shape),
                None if beta is None else tf1.reshape(beta, shape),
                None if gamma is None else tf1.reshape(gamma, shape),
                epsilon,
            )
        else:
            y = tf1.nn.batch_normalization(inputs, mean, var, beta, gamma, epsilon)
        return y, mean, var
    orig = tf1.shape(inputs)
    x = tf1.reshape(inputs, tf1.concat([[-1, virtual], orig[1:]], axis=0))
    shape = broadcast_shape(ndims + 1, axis + 1, channels)
    mean, var = tf1.nn.moments(x, [a + 1 for a in red], keepdims=True)
    y = tf1.nn.batch_normalization(
        x,
        mean,
        var,
        None if beta is None else tf1.reshape(beta, shape),
        None if gamma is None else tf1.reshape(gamma, shape),
        epsilon,
    )
    # the moving averages follow the first virtual batch, as one tower's BatchNorm would
    return (
        tf1.reshape(y, orig),
        tf1.reshape(mean[0], [channels]),
        tf1.reshape(var[0], [channels]),
    )


@layer_register()
@tflayer_args(positional=(), aliases=_BN_ALIASES)
def BatchNorm(
    inputs: Any,
    axis: int | None = None,
    *,
    training: bool | None = None,
    momentum: float = 0.9,
    epsilon: float = 1e-5,
    center: bool = True,
    scale: bool = True,
    beta_initializer: Any = None,
    gamma_initializer: Any = None,
    virtual_batch_size: int | None = None,
    data_format: str = "channels_last",
    ema_update: str = "default",
    sync_statistics: str | None = None,
    internal_update: Any = None,
) -> Any:
    """Batch normalization with tensorpack 0.11's behaviour and variable names.

    Args:
        inputs: a 2-D (``NC``) or 4-D tensor (layout from `data_format`).
        axis: the channel axis (1 or 3); None picks it from `data_format` (1 for 2-D).
        training: normalize with batch statistics; None reads the tower context's
            ``is_training`` (alias ``use_local_stat``).
        momentum: of the moving averages (alias ``decay``).
        epsilon: added to the variance.
        center: learn ``beta`` (alias ``use_bias``).
        scale: learn ``gamma`` (alias ``use_scale``).
        beta_initializer: zeros by default.
        gamma_initializer: ones by default (alias ``gamma_init``).
        virtual_batch_size: normalize groups of this many samples (training only); it
            must divide the batch.
        data_format: ``channels_last``/``NHWC`` or ``channels_first``/``NCHW``.
        ema_update: ``"default"`` (= ``"collection"``: updates in ``UPDATE_OPS`` of the
            main training tower), ``"internal"`` (run with the output), ``"skip"``.
        sync_statistics: None, ``"nccl"`` (mean and variance averaged over the towers of
            a multi-tower trainer, GPUs or logical CPUs) or ``"horovod"`` (over ranks).
            The moving averages are then updated internally.
        internal_update: not in tensorpack 0.11; rejected with the replacement to use.

    Returns:
        The normalized tensor, named ``output``, with ``.variables`` (``gamma``, ``beta``,
        ``mean``/``moving_mean``, ``variance``/``moving_variance``).

    Variables: ``gamma``, ``beta``, ``mean/EMA``, ``variance/EMA``.
    """
    if internal_update is not None:
        msg = (
            "BatchNorm: 'internal_update' is not an argument of tensorpack 0.11's BatchNorm; "
            "use ema_update='internal' (or 'collection')"
        )
        raise TypeError(msg)
    training, ctx = _tower_flags("BatchNorm", training)
    fmt = tf_data_format(data_format)
    shape = checked_shape("BatchNorm", static_shape(inputs), (2, 4))
    ndims = len(shape)
    sync = check_sync_statistics(sync_statistics)
    axis = bn_axis(ndims, fmt, axis)
    channels = shape[axis]
    if channels is None:
        msg = f"BatchNorm: the channel axis ({axis}) of the input must be known; got shape {shape}"
        raise ValueError(msg)
    virtual = check_virtual_batch_size(virtual_batch_size, shape[0]) if training else None
    if sync is not None and virtual is not None:
        msg = "BatchNorm: 'sync_statistics' and 'virtual_batch_size' cannot be used together"
        raise ValueError(msg)
    own = training and (sync is not None or virtual is not None)
    plan: EmaPlan = ema_plan(
        training=training,
        in_tower=ctx is not None,
        tower_training=bool(ctx is not None and ctx.is_training),
        main_training_tower=bool(ctx is not None and ctx.is_main_training_tower),
        ema_update=ema_update,
        own_statistics=own,
    )
    if not training and ctx is not None and ctx.is_training and ctx.is_main_training_tower:
        _warn_once("frozen", "a BatchNorm layer uses its moving averages in a training tower")
    inits = (
        beta_initializer if beta_initializer is not None else tf1.zeros_initializer(),
        gamma_initializer if gamma_initializer is not None else tf1.ones_initializer(),
    )
    dtype = _param_dtype(inputs)
    beta, gamma, moving_mean, moving_var = _stat_variables(
        channels,
        dtype,
        plan.model_variables,
        order="beta" if own else "gamma",
        center=center,
        scale=scale,
        inits=inits,
    )
    if own:
        xn, mean, var = _own_statistics(
            inputs, axis, ndims, (beta, gamma), epsilon, sync, virtual, ctx
        )
    else:
        xn, mean, var = _fused_or_moments(
            inputs, axis, ndims, beta, gamma, epsilon, training, (moving_mean, moving_var)
        )
    if plan.update:
        if own:
            names = ("mean_ema_op", "var_ema_op")
        else:
            names = ("AssignMovingAvg", "AssignMovingAvg_1")
        updates = [
            moving_average_update(moving_mean, mean, momentum, names[0]),
            moving_average_update(moving_var, var, momentum, names[1]),
        ]
        if plan.internal:
            with tf1.control_dependencies(updates):
                ret = tf1.identity(xn, name="output")
        else:
            for op in updates:
                tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, op.op)
            ret = tf1.identity(xn, name="output")
    else:
        ret = tf1.identity(xn, name="output")
    return attach_variables(
        ret,
        moving_mean=moving_mean,
        mean=moving_mean,
        moving_variance=moving_var,
        variance=moving_var,
        gamma=gamma,
        beta=beta,
    )


@layer_register()
@tflayer_args(positional=(), aliases=_RENORM_ALIASES)
def BatchRenorm(
    x: Any,
    rmax: Any,
    dmax: Any,
    *,
    momentum: float = 0.9,
    epsilon: float = 1e-5,
    center: bool = True,
    scale: bool = True,
    gamma_initializer: Any = None,
    data_format: str = "channels_last",
) -> Any:
    """Batch renormalization, with tensorpack 0.11's variables and updates.

    In a training tower the batch statistics are corrected by ``r`` (clipped to
    ``[1/rmax, rmax]``) and ``d`` (clipped to ``[-dmax, dmax]``) taken from the
    renorm averages (momentum 0.99). The renorm and moving averages are updated
    through ``UPDATE_OPS`` in the main training tower.
    An inference tower normalizes with the moving averages.

    Args:
        x: a 2-D (``NC``) or 4-D tensor.
        rmax: the largest ``r`` correction (a number or a scalar tensor).
        dmax: the largest ``d`` correction (a number or a scalar tensor).
        momentum: of the moving averages (alias ``decay``).
        epsilon: added to the variance.
        center: learn ``beta`` (alias ``use_bias``).
        scale: learn ``gamma`` (alias ``use_scale``).
        gamma_initializer: None gives TensorFlow's default for variables (Glorot
            uniform), as in tensorpack 0.11 (alias ``gamma_init``).
        data_format: ``channels_last``/``NHWC`` or ``channels_first``/``NCHW``.

    Returns:
        A tensor named ``output``.

    Variables: ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``,
    ``moving_stddev``, ``renorm_mean``, ``renorm_stddev``.
    """
    training, ctx = _tower_flags("BatchRenorm", None)
    shape = checked_shape("BatchRenorm", static_shape(x), (2, 4))
    ndims = len(shape)
    axis = 1 if ndims == 2 or tf_data_format(data_format) == "NCHW" else 3
    channels = shape[axis]
    if channels is None:
        msg = f"BatchRenorm: the channel axis ({axis}) of the input must be known; got {shape}"
        raise ValueError(msg)
    dtype = _param_dtype(x)
    main = ctx.is_main_training_tower
    gamma = (
        tf1.get_variable("gamma", [channels], dtype, initializer=gamma_initializer)
        if scale
        else None
    )
    beta = (
        tf1.get_variable("beta", [channels], dtype, initializer=tf1.zeros_initializer())
        if center
        else None
    )

    def stat(name: str, value: float) -> Any:
        return tf1.get_variable(
            name, [channels], dtype, initializer=tf1.constant_initializer(value), trainable=False
        )

    moving_mean, moving_var = stat("moving_mean", 0.0), stat("moving_variance", 1.0)
    moving_std, renorm_mean, renorm_std = (
        stat("moving_stddev", 1.0),
        stat("renorm_mean", 0.0),
        stat("renorm_stddev", 1.0),
    )
    if main:
        for v in (moving_mean, moving_var, moving_std, renorm_mean, renorm_std):
            tf1.add_to_collection(tf1.GraphKeys.MODEL_VARIABLES, v)
    bshape = broadcast_shape(ndims, axis, channels)

    def bcast(v: Any) -> Any:
        return v if v is None or axis == ndims - 1 else tf1.reshape(v, bshape)

    xf = tf1.cast(x, dtype)
    if not training:
        y = tf1.nn.batch_normalization(
            xf, bcast(moving_mean), bcast(moving_var), bcast(beta), bcast(gamma), epsilon
        )
        return tf1.identity(tf1.cast(y, x.dtype), name="output")
    mean, var = tf1.nn.moments(xf, reduction_axes(ndims, axis))
    std = tf1.sqrt(var + epsilon)
    floor = tf1.maximum(renorm_std, tf1.sqrt(tf1.cast(epsilon, dtype)))
    r = tf1.clip_by_value(std / floor, 1.0 / rmax, rmax)
    d = tf1.clip_by_value((mean - renorm_mean) / floor, -dmax, dmax)
    # the renorm averages move after r and d have read them, and only with the moving
    # averages (the output does not wait for them), as in tensorpack 0.11
    with tf1.control_dependencies([r, d]):
        new_mean, new_std = tf1.identity(mean), tf1.identity(std)
    renorm_updates = [
        moving_average_update(renorm_mean, new_mean, 0.99, "AssignMovingAvg"),
        moving_average_update(renorm_std, new_std, 0.99, "AssignMovingAvg"),
    ]
    with tf1.control_dependencies(renorm_updates):
        new_mean, new_var = tf1.identity(new_mean), tf1.identity(var)
    r = bcast(tf1.stop_gradient(r, name="renorm_r"))
    d = bcast(tf1.stop_gradient(d, name="renorm_d"))
    gain, shift = (r * bcast(gamma), d * bcast(gamma)) if gamma is not None else (r, d)
    if beta is not None:
        shift = shift + bcast(beta)
    if main:
        moved_std = moving_average_update(
            moving_std, tf1.sqrt(new_var + epsilon), momentum, "AssignMovingAvg"
        )
        updates = [
            moving_average_update(moving_mean, new_mean, momentum, "AssignMovingAvg"),
            tf1.assign(
                moving_var, tf1.nn.relu(moved_std * moved_std - epsilon), name="AssignNewValue"
            ),
        ]
        for op in updates:
            tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, op.op)
    y = tf1.nn.batch_normalization(xf, bcast(mean), bcast(var), shift, gain, epsilon)
    return attach_variables(
        tf1.identity(tf1.cast(y, x.dtype), name="output"), gamma=gamma, beta=beta
    )
