"""XLA for the training towers: the switch's values, which one applies, and the check at setup.

The towers are compiled with ``tf.xla.experimental.compile``: the cost and its gradients
become one explicit XLA cluster, which TensorFlow 2.21's graph mode compiles on CPU and
GPU with no flag. The other two ways were measured and not taken: a
``tf.compat.v1.xla.experimental.jit_scope`` compiles on CPU too but leaves the clustering
to TensorFlow's pass (which may split the step into several clusters), and the
graph-level ``global_jit_level`` (``tf.config.optimizer.set_jit``) compiles nothing on
CPU unless ``TF_XLA_FLAGS=--tf_xla_cpu_global_jit`` is set before TensorFlow loads.

XLA compiles a cluster at its first run, for the shapes it is given: a dimension the
input leaves unknown is compiled once per distinct size seen (a last, smaller batch
costs one more compilation). Ops XLA has no kernel for (``py_func``,
``numpy_function``, string ops, summaries, ops whose output shape depends on values such
as ``tf.unique``) make the compilation fail; `probe_xla` finds out at setup.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "XLA_VALUES",
    "check_xla",
    "compile_cluster",
    "probe_xla",
    "unsupported_ops",
    "xla_in_effect",
]

logger = logging.getLogger("towerkit.trainers")

XLA_VALUES: tuple[bool | str, ...] = (False, True, "auto")
"""The values of ``TrainConfig(xla=...)`` and ``setup_graph(xla=...)`` (None: not given)."""

_UNSUPPORTED = re.compile(r"No registered '([^']+)' OpKernel for XLA_\w+_JIT")
_NODE = re.compile(r"\{\{node ([^}]+)\}\}")


def check_xla(value: Any) -> bool | str | None:
    """`value` if it is an XLA switch value (False, True, ``"auto"``) or None (not given).

    Examples:
        >>> check_xla("auto"), check_xla(True), check_xla(None)
        ('auto', True, None)
        >>> check_xla("yes")
        Traceback (most recent call last):
        ...
        ValueError: 'xla' must be False, True or 'auto' (or None: the trainer's XLA_COMPILE); got 'yes'

    Raises:
        ValueError: any other value (``1``, ``"true"``, ``"yes"``).
    """
    # bool first: 1 == True and 0 == False, but an int is not a switch value
    if value is None or isinstance(value, bool) or (isinstance(value, str) and value == "auto"):
        return value
    msg = f"'xla' must be False, True or 'auto' (or None: the trainer's XLA_COMPILE); got {value!r}"
    raise ValueError(msg)


def xla_in_effect(given: bool | str | None, class_default: bool) -> bool | str:
    """The XLA switch a trainer builds with: `given` when given, else its ``XLA_COMPILE``.

    Examples:
        >>> xla_in_effect(None, True), xla_in_effect(False, True), xla_in_effect("auto", False)
        (True, False, 'auto')
    """
    checked = check_xla(given)
    return bool(class_default) if checked is None else checked


def unsupported_ops(message: str) -> tuple[tuple[str, str], ...]:
    """The ``(op type, node name)`` pairs an XLA compilation error names as having no kernel.

    In the order the message names them, each pair once; the node name is ``""`` where
    the message names none.

    Examples:
        >>> unsupported_ops(
        ...     "Detected unsupported operations when trying to compile graph c on "
        ...     "XLA_CPU_JIT: PyFunc (No registered 'PyFunc' OpKernel for XLA_CPU_JIT "
        ...     "devices compatible with node {{node tower/PyFunc}}){{node tower/PyFunc}}"
        ... )
        (('PyFunc', 'tower/PyFunc'),)
        >>> unsupported_ops("some other error")
        ()
    """
    found: list[tuple[str, str]] = []
    for match in _UNSUPPORTED.finditer(message):
        node = _NODE.search(message, match.end())
        pair = (match.group(1), node.group(1) if node else "")
        if pair not in found:
            found.append(pair)
    return tuple(found)


def compile_cluster(fn: Callable[..., list[Any]], inputs: Sequence[Any]) -> list[Any]:
    """``tf.xla.experimental.compile(fn, inputs)``, without its deprecation message.

    TensorFlow marks it deprecated in favour of ``tf.function(jit_compile=True)``, which
    compiles functions, not a graph-mode tower; its notice would be the user's second
    warning line under ``xla="auto"``.
    """
    import tensorflow as tf
    from tensorflow.python.util import deprecation

    with deprecation.silence():
        outs: list[Any] = tf.xla.experimental.compile(fn, list(inputs))
    return outs


def _reason(err: BaseException) -> tuple[str, bool]:
    """One line saying why the probe failed, and whether XLA is what failed."""
    text = str(getattr(err, "message", None) or err)
    ops = unsupported_ops(text)
    if ops:
        named = ", ".join(f"{op} ({node})" if node else op for op, node in ops)
        return f"XLA has no kernel for {named}", True
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    xla_lines = [line for line in lines if "XLA" in line or "xla" in line]
    if xla_lines:
        return f"XLA cannot compile the tower: {xla_lines[0][:300]}", True
    first = lines[0][:300] if lines else ""
    return f"{type(err).__name__}: {first}", False


def probe_xla(
    build_cost: Callable[..., Any], input_signature: Sequence[Any], *, batch_size: int = 2
) -> tuple[str, bool] | None:
    """Build and run the cost and its gradients as one XLA cluster in a scratch graph.

    The tower is built once more, in a graph of its own (under a training
    `TowerContext`), from placeholders fed with zeros: a dimension the signature leaves
    unknown is given `batch_size` (the first) or 2 (the others). It costs one
    compilation of the step.

    Args:
        build_cost: input tensors -> the float32 scalar cost, as the trainer builds it.
        input_signature: the tower function's named ``tf.TensorSpec``s.
        batch_size: the size given to an unknown first dimension.

    Returns:
        None when the cluster compiled and ran; else one line saying why not, and
        whether XLA is what failed (False: the tower failed on zeros for another reason,
        which says nothing about XLA).
    """
    import tensorflow as tf

    from towerkit.towers import TowerContext, build_placeholders
    from towerkit.towers.compat import tf1

    graph = tf.Graph()
    with graph.as_default():
        placeholders = build_placeholders(input_signature)

        def compiled(*xs: Any) -> list[Any]:
            cost = build_cost(*xs)
            variables = tf1.trainable_variables()
            grads = [g for g in tf1.gradients(cost, variables) if g is not None]
            return [cost, *grads]

        try:
            with TowerContext("", is_training=True):
                outs = compile_cluster(compiled, placeholders)
            init = tf1.global_variables_initializer()
        except Exception as err:
            return _reason(err)
        feeds = {p: _zeros(p, batch_size) for p in placeholders}
        try:
            with tf1.Session(graph=graph) as sess:
                sess.run(init)
                sess.run(outs, feeds)
        except tf.errors.OpError as err:
            return _reason(err)
    return None


def _zeros(placeholder: Any, batch_size: int) -> Any:
    dims = placeholder.shape.as_list() if placeholder.shape.rank is not None else []
    shape = [d if d is not None else (batch_size if i == 0 else 2) for i, d in enumerate(dims)]
    if placeholder.dtype.name == "string":
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=placeholder.dtype.as_numpy_dtype)
