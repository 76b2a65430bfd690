"""Exponential moving averages of the weights, updated inside each training step: EMAOptimizer."""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from towerkit.sessinit import EMA_SUFFIX
from towerkit.towers.compat import tf1
from towerkit.trainers._optimizer import ProxyOptimizer

__all__ = ["EMAOptimizer", "ema_decay"]

WARMUP_OFFSET = 10.0
"""The warm-up's decay after n updates is ``min(decay, (1 + n) / (WARMUP_OFFSET + n))``,
as ``tf.compat.v1.train.ExponentialMovingAverage`` with ``num_updates``."""


def _check_decay(decay: Any) -> float:
    if isinstance(decay, bool) or not isinstance(decay, (int, float)):
        msg = f"'decay' must be a number in [0, 1); got {type(decay).__name__} {decay!r}"
        raise TypeError(msg)
    if not (math.isfinite(decay) and 0.0 <= decay < 1.0):
        msg = f"'decay' must be a number in [0, 1); got {decay!r}"
        raise ValueError(msg)
    return float(decay)


def ema_decay(decay: float, num_updates: int, *, warmup: bool) -> float:
    """The decay of the update after `num_updates` earlier ones: the rule `EMAOptimizer` builds.

    ``shadow <- decay_n * shadow + (1 - decay_n) * weight``, with ``decay_n`` `decay`, or
    with `warmup` ``min(decay, (1 + n) / (10 + n))`` (the first updates follow the
    weights closely).

    Examples:
        >>> ema_decay(0.999, 0, warmup=False), ema_decay(0.999, 0, warmup=True)
        (0.999, 0.1)
        >>> ema_decay(0.5, 90, warmup=True)
        0.5
    """
    d = _check_decay(decay)
    if not warmup:
        return d
    n = float(num_updates)
    return min(d, (1.0 + n) / (WARMUP_OFFSET + n))


class EMAOptimizer(ProxyOptimizer):
    """An optimizer that keeps an exponential moving average of the weights it updates.

    Each ``apply_gradients`` builds, after the wrapped optimizer's update and in the
    same op, ``shadow <- d * shadow + (1 - d) * weight`` for every floating variable
    with a gradient (`ema_decay` gives ``d``). The update is part of the training step
    itself: it runs once per step in every trainer, inside the in-graph loop of
    ``steps_per_execution`` (K steps, K updates), and under mixed precision only when
    the loss-scaled step is applied. The shadows are non-trainable global variables
    named ``<variable>/ExponentialMovingAverage`` (`EMA_SUFFIX`; local variables for
    local copies, as a replicated trainer's other towers have), created with the
    weights' initial values, so `ModelSaver` saves them and a resumed run continues
    the average exactly; with `warmup` the number of updates is a variable
    ``<name>/num_updates`` saved too. ``SaverRestore(path, ema=True)`` restores the
    averages as the weights (for `OfflinePredictor`, the exporters, or evaluation);
    `SwapEMAWeights` swaps them in around a callback (an `InferenceRunner`).

    Return it from ``ModelDesc.optimizer()``; a gradient processor goes inside it
    (``EMAOptimizer(apply_grad_processors(opt, ...))``). With an `AccumGradOptimizer`
    inside, the average still moves at every step (towards weights that change every
    k-th step): choose the decay per step. An asynchronous trainer, whose towers apply
    their gradients one by one, moves the average once per tower's apply.

    .. versionadded:: 0.2

    Args:
        opt: the wrapped ``tf.compat.v1.train.Optimizer``.
        decay: the decay, in [0, 1) (0.999 averages over about 1000 steps).
        warmup: use ``min(decay, (1 + n) / (10 + n))`` after n updates.
        name: the name scope of its ops and the counter's.

    Raises:
        TypeError: `opt` is not an optimizer, or `decay` not a number.
        ValueError: `decay` is not in [0, 1).
    """

    def __init__(
        self, opt: Any, decay: float = 0.999, warmup: bool = False, name: str = "EMAOptimizer"
    ) -> None:
        super().__init__(opt, name=name)
        self._decay = _check_decay(decay)
        self._warmup = bool(warmup)
        self._shadows: dict[str, Any] = {}
        self._counters: list[Any] = []

    @property
    def decay(self) -> float:
        """The decay."""
        return self._decay

    @property
    def warmup(self) -> bool:
        """Whether the decay warms up."""
        return self._warmup

    @property
    def shadows(self) -> dict[str, Any]:
        """The shadow variable of each averaged variable, by the variable's name (no ``:0``)."""
        return dict(self._shadows)

    def _shadow(self, var: Any) -> Any:
        key = var.op.name
        if key in self._shadows:
            return self._shadows[key]
        # a local copy (a replicated trainer's other towers) gets a local shadow:
        # saved and restored as the copy is
        local = any(v is var for v in var.graph.get_collection(tf1.GraphKeys.LOCAL_VARIABLES))
        where = tf1.GraphKeys.LOCAL_VARIABLES if local else tf1.GraphKeys.GLOBAL_VARIABLES
        # init_scope: created in the outer graph, never inside the K-step loop or the
        # loss scale's cond, from the weight's initial value
        with tf1.init_scope(), tf1.name_scope(None), tf1.device(var.device):
            shadow = tf1.Variable(
                var.initial_value,
                name=f"{key}/{EMA_SUFFIX}",
                trainable=False,
                dtype=var.dtype.base_dtype,
                collections=[where],
            )
        if shadow.op.name != f"{key}/{EMA_SUFFIX}":
            msg = (
                f"EMAOptimizer: the shadow of {key!r} could not be named "
                f"'{key}/{EMA_SUFFIX}' (the graph has that name already); got {shadow.op.name!r}"
            )
            raise ValueError(msg)
        self._shadows[key] = shadow
        return shadow

    def _counter(self) -> Any:
        suffix = f"_{len(self._counters)}" if self._counters else ""
        with tf1.init_scope(), tf1.name_scope(None):
            counter = tf1.Variable(
                0, dtype=tf.int64, name=f"{self._name}/num_updates{suffix}", trainable=False
            )
        self._counters.append(counter)
        return counter

    def apply_gradients(
        self, grads_and_vars: Any, global_step: Any = None, name: Any = None
    ) -> Any:
        pairs = list(grads_and_vars)
        update = self._opt.apply_gradients(pairs, global_step=global_step)
        weights = [v for g, v in pairs if g is not None and v.dtype.base_dtype.is_floating]
        if not weights:
            return tf.group(update, name=name)
        shadows = [self._shadow(v) for v in weights]
        counter = self._counter() if self._warmup else None
        with tf1.control_dependencies([update]), tf1.name_scope(self._name):
            # built under the update's control dependency: every read of a weight is
            # of its value after this step's update
            if counter is None:
                decay: Any = tf.constant(self._decay, tf.float64)
            else:
                n = tf.cast(tf.convert_to_tensor(counter), tf.float64)
                decay = tf.minimum(
                    tf.constant(self._decay, tf.float64), (1.0 + n) / (WARMUP_OFFSET + n)
                )
            ops = []
            for var, shadow in zip(weights, shadows, strict=True):
                with tf1.device(shadow.device):
                    rate = tf.cast(1.0 - decay, shadow.dtype.base_dtype)
                    diff = tf.convert_to_tensor(shadow) - tf.convert_to_tensor(var)
                    ops.append(tf1.assign_sub(shadow, diff * rate).op)
            if counter is not None:
                with tf1.control_dependencies(ops):
                    ops = [tf1.assign_add(counter, 1).op]
        return tf.group(update, *ops, name=name)

    def __repr__(self) -> str:
        return f"EMAOptimizer({self._opt!r}, decay={self._decay}, warmup={self._warmup})"
