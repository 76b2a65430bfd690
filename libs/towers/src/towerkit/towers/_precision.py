"""Mixed precision: a policy record, and the scope in which a tower computes in it.

A policy names the dtype a tower computes in; variables are always stored in
float32. Under `precision_scope` the variable scope's default dtype is the compute
dtype, and a custom getter turns every request for a variable in that dtype into a
float32 variable read through a cast. So `towerkit.layers` (whose weights follow the
input's dtype) and plain ``tf.compat.v1.get_variable`` code (default dtype) both
compute in the low precision once the tower's float inputs are cast (`cast_inputs`),
while checkpoints, optimizer slots and gradients stay float32. Variables asked for
in float32 explicitly (BatchNorm's statistics, a user's counters) are left alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import tensorflow as tf

from towerkit.towers._seams import TowerFn
from towerkit.towers.compat import tf1

__all__ = [
    "FLOAT32",
    "POLICIES",
    "Precision",
    "cast_inputs",
    "current_precision",
    "low_precision_variables",
    "precision_policy",
    "precision_scope",
    "with_precision",
]

#: The policy names, as Keras spells them, and the dtype each computes in.
POLICIES: dict[str, str] = {
    "float32": "float32",
    "mixed_bfloat16": "bfloat16",
    "mixed_float16": "float16",
}

_FLOATS = ("float16", "bfloat16", "float32", "float64")


@attrs.frozen
class Precision:
    """A mixed-precision policy: the dtype towers compute in (variables stay float32).

    Attributes:
        name: the policy's name, one of `POLICIES`.
        compute_dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
    """

    name: str
    compute_dtype: str

    @property
    def mixed(self) -> bool:
        """Whether towers compute in a dtype other than float32."""
        return self.compute_dtype != "float32"

    @property
    def loss_scaling(self) -> bool:
        """Whether the gradients need a loss scale (float16's range is narrow; bfloat16's is not)."""
        return self.compute_dtype == "float16"


def precision_policy(value: str | Precision) -> Precision:
    """The `Precision` named `value` (a policy passes through).

    Raises:
        ValueError: an unknown name; the message lists the valid ones.
        TypeError: neither a name nor a `Precision`.

    >>> precision_policy("mixed_bfloat16")
    Precision(name='mixed_bfloat16', compute_dtype='bfloat16')
    """
    if isinstance(value, Precision):
        return value
    if not isinstance(value, str):
        msg = f"'precision' must be a policy name (str); got {type(value).__name__}"
        raise TypeError(msg)
    if value not in POLICIES:
        valid = ", ".join(repr(k) for k in POLICIES)
        msg = f"unknown precision policy {value!r}; valid: {valid}"
        raise ValueError(msg)
    return Precision(value, POLICIES[value])


FLOAT32 = precision_policy("float32")
"""The default policy: towers compute in float32 (what every trainer builds unless told).

.. versionadded:: 0.2
"""

_ACTIVE = threading.local()


def current_precision() -> Precision:
    """The policy of the innermost `precision_scope` of this thread (float32 outside any)."""
    stack: list[Precision] = getattr(_ACTIVE, "stack", [])
    return stack[-1] if stack else FLOAT32


def _float32_storage(compute: Any) -> Callable[..., Any]:
    """A custom getter: a variable requested in `compute` is made float32 and read cast."""

    def getter(getter: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
        dtype = kwargs.get("dtype")
        if dtype is None or tf.as_dtype(dtype).base_dtype != compute:
            return getter(name, *args, **kwargs)
        kwargs["dtype"] = tf.float32
        variable = getter(name, *args, **kwargs)
        if variable.dtype.base_dtype != tf.float32 or not kwargs.get("trainable", True):
            # a non-trainable state (a counter, a statistic) stays a float32 variable
            # the model can assign to; it casts where it mixes it in
            return variable
        return tf.cast(variable, compute)

    return getter


@contextlib.contextmanager
def precision_scope(policy: str | Precision) -> Iterator[Precision]:
    """Build under `policy`: towers compute in its dtype, variables stay float32.

    A `TowerFunc` called inside casts its floating inputs to the compute dtype. The
    current variable scope is re-opened with the compute dtype as its default dtype
    and the float32-storage getter (composed with any enclosing getter); the name
    scope is unchanged. ``precision_scope("float32")`` inside a mixed one marks a part
    of the model to compute in float32: variables made there are float32 and read
    uncast (cast its inputs with ``tf.cast(x, tf.float32)``).

    Yields:
        The policy.
    """
    policy = precision_policy(policy)
    stack: list[Precision] = getattr(_ACTIVE, "stack", None) or []
    _ACTIVE.stack = [*stack, policy]
    try:
        scope = tf1.get_variable_scope()
        if not policy.mixed:
            # inside a mixed scope: float32 again (what a model marks as sensitive)
            with tf1.variable_scope(scope, dtype=tf.float32, auxiliary_name_scope=False):
                yield policy
            return
        compute = tf.as_dtype(policy.compute_dtype)
        with tf1.variable_scope(
            scope,
            custom_getter=_float32_storage(compute),
            dtype=compute,
            auxiliary_name_scope=False,
        ):
            yield policy
    finally:
        _ACTIVE.stack = stack


def cast_inputs(inputs: Sequence[Any], policy: str | Precision) -> list[Any]:
    """`inputs` with every floating tensor cast to the policy's compute dtype (others kept)."""
    policy = precision_policy(policy)
    compute = tf.as_dtype(policy.compute_dtype)
    out = []
    for x in inputs:
        dtype = getattr(x, "dtype", None)
        if policy.mixed and dtype is not None and dtype.base_dtype.name in _FLOATS:
            x = tf.cast(x, compute)
        out.append(x)
    return out


def with_precision(fn: TowerFn, policy: str | Precision) -> TowerFn:
    """`fn` (a plain function of input tensors) computing under `policy`.

    Its floating inputs are cast to the compute dtype and it runs in `precision_scope`.
    The outputs are `fn`'s, in whatever dtype it computed them: cast a cost to float32
    before differentiating it. (A `TowerFunc` needs only the scope: it casts itself.)
    """
    policy = precision_policy(policy)
    if not policy.mixed:
        return fn

    def tower(*inputs: Any) -> Any:
        with precision_scope(policy):
            return fn(*cast_inputs(inputs, policy))

    tower.__name__ = getattr(fn, "__name__", "tower")
    tower.__doc__ = getattr(fn, "__doc__", None)
    return tower


def low_precision_variables(variables: Sequence[Any] | None = None) -> list[str]:
    """The names of the variables (default: all global ones) stored in float16 or bfloat16.

    Under a mixed policy every variable made through ``get_variable`` is float32; one
    stored in low precision was made by hand (``tf.Variable``), and trains poorly.
    """
    found = tf1.global_variables() if variables is None else variables
    low = (tf.float16, tf.bfloat16)
    return [v.op.name for v in found if v.dtype.base_dtype in low]
