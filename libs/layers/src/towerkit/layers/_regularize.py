"""Regularization costs (regularize_cost, l2/l1 regularizers) and Dropout."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import attrs

from towerkit.layers._registry import layer_register
from towerkit.towers import get_current_tower_context
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.layers")


def _non_negative(_inst: Any, attr: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:
        msg = f"{attr.name!r} must be a non-negative number; got {value!r}"
        raise ValueError(msg)


@attrs.frozen
class L2Regularizer:
    """``scale * sum(w ** 2)`` of a weight; `l2_regularizer` makes one.

    Examples:
        >>> L2Regularizer(0.5)
        L2Regularizer(scale=0.5)
    """

    scale: float = attrs.field(converter=float, validator=_non_negative)

    def __call__(self, weight: Any) -> Any:
        """The scalar cost of `weight`."""
        with tf1.name_scope("l2_regularizer"):
            w = tf1.convert_to_tensor(weight)
            return tf1.multiply(
                tf1.cast(self.scale, w.dtype.base_dtype),
                tf1.reduce_sum(tf1.square(w)),
                name="value",
            )


@attrs.frozen
class L1Regularizer:
    """``scale * sum(|w|)`` of a weight; `l1_regularizer` makes one.

    Examples:
        >>> L1Regularizer(1e-3)
        L1Regularizer(scale=0.001)
    """

    scale: float = attrs.field(converter=float, validator=_non_negative)

    def __call__(self, weight: Any) -> Any:
        """The scalar cost of `weight`."""
        with tf1.name_scope("l1_regularizer"):
            w = tf1.convert_to_tensor(weight)
            return tf1.multiply(
                tf1.cast(self.scale, w.dtype.base_dtype), tf1.reduce_sum(tf1.abs(w)), name="value"
            )


def l2_regularizer(scale: float) -> L2Regularizer:
    """A regularizer ``scale * sum(w ** 2) / 2`` (``scale * tf.nn.l2_loss(w)``), as tensorpack's.

    Examples:
        >>> l2_regularizer(1e-4)
        L2Regularizer(scale=5e-05)
    """
    return L2Regularizer(float(scale) * 0.5)


def l1_regularizer(scale: float) -> L1Regularizer:
    """A regularizer ``scale * sum(|w|)``, as tensorpack's.

    Examples:
        >>> l1_regularizer(0.01)
        L1Regularizer(scale=0.01)
    """
    return L1Regularizer(scale)


def _as_float32(loss: Any, what: str) -> Any:
    if not loss.dtype.is_floating:
        msg = f"{what} must be a floating-point scalar; got {loss.dtype.name} {loss.name}"
        raise TypeError(msg)
    return loss if loss.dtype == tf1.float32 else tf1.cast(loss, tf1.float32)


def _zero(name: str) -> Any:
    return tf1.constant(0, dtype=tf1.float32, name=f"empty_{name}")


def regularize_cost(regex: str, func: Callable[[Any], Any], name: str = "regularize_cost") -> Any:
    """The sum of `func` over the trainable variables whose names match `regex`.

    In a tower with its own variables (replicated training) only that tower's
    variables count; in an inference tower the cost is a zero constant. Outside
    any tower every trainable variable counts.

    Args:
        regex: searched (``re.search``) in each variable's op name, e.g. ``"conv.*/W"``.
        func: the cost of one variable, e.g. ``l2_regularizer(1e-4)`` or ``tf.nn.l2_loss``.
        name: the name of the returned scalar.

    Returns:
        A float32 scalar (``empty_<name>`` when nothing matches).

    Raises:
        ValueError: `regex` is empty or not a valid regular expression.
    """
    if not isinstance(regex, str) or not regex:
        msg = f"regularize_cost: 'regex' must be a non-empty regular expression; got {regex!r}"
        raise ValueError(msg)
    try:
        pattern = re.compile(regex)
    except re.error as err:
        msg = f"regularize_cost: 'regex' {regex!r} is not a valid regular expression: {err}"
        raise ValueError(msg) from None
    ctx = get_current_tower_context()
    if ctx is not None and not ctx.is_training:
        return _zero(name)
    key = tf1.GraphKeys.TRAINABLE_VARIABLES
    params = (
        ctx.get_collection_in_tower(key)
        if ctx is not None and ctx.has_own_variables
        else tf1.get_collection(key)
    )
    costs = []
    names = []
    with tf1.name_scope(f"{name}_internals"):
        for param in params:
            if pattern.search(param.op.name):
                costs.append(_as_float32(func(param), f"the cost of {param.op.name}"))
                names.append(param.op.name)
    if not costs:
        return _zero(name)
    prefix = f"{ctx.vs_name}/" if ctx is not None and ctx.vs_name else ""
    shown = [n[len(prefix) :] if prefix and n.startswith(prefix) else n for n in names]
    _log.info("regularize_cost() regularizes %d variables: %s", len(shown), ", ".join(shown))
    return tf1.add_n(costs, name=name)


def regularize_cost_from_collection(name: str = "regularize_cost") -> Any:
    """The sum of the losses in ``REGULARIZATION_LOSSES`` (those of the layers' regularizers).

    In a tower with its own variables only the losses added in that tower count;
    in an inference tower the cost is a zero constant.

    Returns:
        A float32 scalar (``empty_<name>`` when the collection is empty).
    """
    ctx = get_current_tower_context()
    if ctx is not None and not ctx.is_training:
        return _zero(name)
    key = tf1.GraphKeys.REGULARIZATION_LOSSES
    losses = (
        ctx.get_collection_in_tower(key)
        if ctx is not None and ctx.has_own_variables
        else tf1.get_collection(key)
    )
    if not losses:
        return _zero(name)
    _log.info("regularize_cost_from_collection() found %d regularization losses", len(losses))
    return tf1.add_n([_as_float32(loss, "a regularization loss") for loss in losses], name=name)


def dropout_rate(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The drop rate of a ``Dropout`` call and its other keyword arguments (pure).

    The first positional argument is the probability to *keep* (as in tensorpack);
    ``keep_prob=`` too; ``rate=`` is the probability to drop; the default rate is 0.5.
    ``is_training`` is an alias of ``training``.

    Examples:
        >>> dropout_rate((0.8,), {})
        (0.19999999999999996, {})
        >>> dropout_rate((), {"rate": 0.3, "is_training": True})
        (0.3, {'training': True})
    """
    rest = dict(kwargs)
    if "is_training" in rest:
        if "training" in rest:
            msg = "Dropout: give one of 'training' and 'is_training'"
            raise TypeError(msg)
        rest["training"] = rest.pop("is_training")
    given = [k for k in ("keep_prob", "rate") if k in rest]
    if len(args) > 1:
        msg = f"Dropout takes one positional argument after the input (keep_prob); got {len(args)}"
        raise TypeError(msg)
    if (args and given) or len(given) > 1:
        msg = f"Dropout: give one of a positional keep_prob, 'keep_prob' and 'rate'; got {given}"
        raise TypeError(msg)
    if args:
        keep = args[0]
        if isinstance(keep, (int, float)) and keep != 0.5:
            _log.warning(
                "Dropout's first positional argument is the probability to keep (%s), "
                "not to drop; use rate= to give the drop probability",
                keep,
            )
        rate = 1 - keep
    elif "keep_prob" in rest:
        rate = 1 - rest.pop("keep_prob")
    else:
        rate = rest.pop("rate", 0.5)
    if isinstance(rate, (int, float)) and not 0 <= rate < 1:
        msg = f"Dropout: the drop rate must be in [0, 1); got {rate!r}"
        raise ValueError(msg)
    return rate, rest


@layer_register(use_scope=None)
def Dropout(x: Any, *args: Any, **kwargs: Any) -> Any:
    """Dropout as tensorpack's: ``Dropout(x, keep_prob)`` or ``Dropout(x, rate=...)``.

    The first positional argument is the probability to keep, ``rate=`` the
    probability to drop (default 0.5). Dropout applies while training: ``training=``
    (alias ``is_training``, a bool or a boolean tensor) or else the current
    `TowerContext`'s ``is_training``. ``noise_shape`` and ``seed`` go to ``tf.nn.dropout``.

    Raises:
        ValueError: no ``training`` given and no tower context.
    """
    rate, rest = dropout_rate(args, kwargs)
    training = rest.pop("training", None)
    noise_shape = rest.pop("noise_shape", None)
    seed = rest.pop("seed", None)
    if rest:
        msg = f"Dropout takes no arguments {sorted(rest)}"
        raise TypeError(msg)
    if training is None:
        ctx = get_current_tower_context()
        if ctx is None:
            msg = (
                "Dropout: no 'training' argument and no TowerContext to read is_training from; "
                "build it inside a TowerContext or give training="
            )
            raise ValueError(msg)
        training = ctx.is_training
    if isinstance(training, (bool, int)):
        rate = rate if training else 0.0
    else:
        rate = tf1.where(
            training, tf1.cast(rate, x.dtype.base_dtype), tf1.zeros([], x.dtype.base_dtype)
        )
    return tf1.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)
