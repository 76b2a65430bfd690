"""Small TensorFlow utilities: the default session config, the global step, the TF version."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from towerkit.towers.compat import parse_tf_version, tf1

__all__ = [
    "check_mem_fraction",
    "get_default_sess_config",
    "get_global_step_value",
    "get_global_step_var",
    "get_tf_version_tuple",
]


def check_mem_fraction(mem_fraction: float) -> float:
    """Return `mem_fraction` as a float after checking it is in (0, 1].

    Examples:
        >>> check_mem_fraction(0.5)
        0.5
        >>> check_mem_fraction(0)
        Traceback (most recent call last):
        ...
        ValueError: 'mem_fraction' must be in (0, 1]; got 0
    """
    if isinstance(mem_fraction, bool) or not isinstance(mem_fraction, (int, float)):
        msg = f"'mem_fraction' must be a number in (0, 1]; got {type(mem_fraction).__name__}"
        raise TypeError(msg)
    if not 0.0 < mem_fraction <= 1.0:
        msg = f"'mem_fraction' must be in (0, 1]; got {mem_fraction}"
        raise ValueError(msg)
    return float(mem_fraction)


def get_default_sess_config(mem_fraction: float = 0.99) -> Any:
    """A new ``tf.compat.v1.ConfigProto`` for training sessions; change it as you need.

    It sets:

    * ``allow_soft_placement``: ops without a kernel on the requested device run on one
      that has it (e.g. integer ops of a GPU tower on the CPU);
    * ``gpu_options.allow_growth``: GPU memory is taken as needed, not all at start;
    * ``gpu_options.per_process_gpu_memory_fraction = mem_fraction``: the cap on the
      fraction of each GPU's memory the process may take.

    Thread pools (``intra_op_parallelism_threads``, ``inter_op_parallelism_threads``) are
    left at 0, TensorFlow's default (one thread per core).

    Args:
        mem_fraction: fraction of each GPU's memory the process may use, in (0, 1].

    Raises:
        TypeError: `mem_fraction` is not a number.
        ValueError: `mem_fraction` is outside (0, 1].
    """
    fraction = check_mem_fraction(mem_fraction)
    config = tf1.ConfigProto()
    config.allow_soft_placement = True
    config.gpu_options.allow_growth = True
    config.gpu_options.per_process_gpu_memory_fraction = fraction
    return config


def get_global_step_var() -> Any:
    """The global-step variable of the default graph, created when it has none.

    It is the graph's ``GLOBAL_STEP`` variable (what ``tf.compat.v1.train.get_global_step``
    finds): an int64 scalar named ``global_step``, non-trainable, in ``GLOBAL_VARIABLES``,
    created at the top level whatever name or variable scope is open. Trainers
    increment it once per ``hooked_sess.run``; applying gradients never does.
    """
    graph = tf1.get_default_graph()
    found = tf1.train.get_global_step(graph)
    if found is not None:
        return found
    root = tf1.VariableScope(reuse=tf1.AUTO_REUSE, name="")
    with (
        tf1.variable_scope(root, auxiliary_name_scope=False),
        tf1.name_scope(None),
        tf1.control_dependencies(None),
    ):
        return tf1.train.get_or_create_global_step(graph)


def get_global_step_value() -> int:
    """The value of the global step in the default session.

    Raises:
        RuntimeError: no default session, or its graph has no global-step variable.
    """
    sess = tf1.get_default_session()
    if sess is None:
        msg = (
            "get_global_step_value needs a default session: call it inside "
            "'with sess.as_default():' (callbacks run under the trainer's session)"
        )
        raise RuntimeError(msg)
    var = tf1.train.get_global_step(sess.graph)
    if var is None:
        msg = (
            "the default session's graph has no global-step variable: create it with "
            "get_global_step_var() while building the graph"
        )
        raise RuntimeError(msg)
    return int(tf1.train.global_step(sess, var))


def get_tf_version_tuple() -> tuple[int, int]:
    """The (major, minor) version of the TensorFlow in use, for comparisons.

    Examples:
        >>> get_tf_version_tuple() >= (2, 16)
        True
    """
    return parse_tf_version(tf.__version__)
