"""Summaries that respect towers: only the main training tower (or no tower) writes them."""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Sequence
from typing import Any

import tensorflow as tf

from towerkit.towers._context import get_current_tower_context
from towerkit.towers._names import join_scope, strip_port, strip_tower_prefix
from towerkit.towers._scope import cached_name_scope
from towerkit.towers.compat import tf1

MOVING_SUMMARY_OPS_KEY = "MOVING_SUMMARY_OPS"
"""The collection `add_moving_summary` puts its EMA-update ops into by default."""

SUMMARY_TYPES = ("scalar", "histogram", "sparsity", "mean", "rms")
"""The summary types `add_tensor_summary` knows."""

_SUFFIX = {
    "scalar": "",
    "histogram": "-histogram",
    "sparsity": "-sparsity",
    "mean": "-mean",
    "rms": "-rms",
}


def check_summary_types(types: Iterable[str]) -> tuple[str, ...]:
    """Validate summary type names and return them as a tuple.

    Raises:
        TypeError: `types` is a single string rather than a list.
        ValueError: unknown types (all of them are listed).

    Examples:
        >>> check_summary_types(["rms", "histogram"])
        ('rms', 'histogram')
        >>> check_summary_types(["rms", "max"])
        Traceback (most recent call last):
        ...
        ValueError: unknown summary types ['max']: expected some of ('scalar', 'histogram', 'sparsity', 'mean', 'rms')
    """
    if isinstance(types, str):
        msg = f"'types' must be a list of summary types, not the string {types!r}; use [{types!r}]"
        raise TypeError(msg)
    out = tuple(types)
    bad = [t for t in out if t not in SUMMARY_TYPES]
    if bad:
        msg = f"unknown summary types {bad}: expected some of {SUMMARY_TYPES}"
        raise ValueError(msg)
    return out


def summary_tag(name: str, kind: str) -> str:
    """The summary name for `kind` of the tensor named `name`.

    Examples:
        >>> summary_tag("tower0/fc/out:0", "rms")
        'tower0/fc/out-rms'
        >>> summary_tag("cost", "scalar")
        'cost'
    """
    return strip_port(name) + _SUFFIX[kind]


def _skip_here(main_tower_only: bool = True) -> bool:
    ctx = get_current_tower_context()
    return main_tower_only and ctx is not None and not ctx.is_main_training_tower


def _tower_free_name(name: str) -> str:
    ctx = get_current_tower_context()
    name = strip_port(name) if name else ""
    if ctx is not None and ctx.ns_name and name == ctx.ns_name:
        return ""
    return strip_tower_prefix(name, ctx.ns_name if ctx is not None else "")


def _op_name(tag: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", tag.rsplit("/", 1)[-1])
    return name if re.match(r"[A-Za-z0-9.]", name) else f"summary{name}"


def _add_summary(kind: str, tag: str, value: Any, collections: Sequence[str] | None) -> Any:
    if kind == "histogram":
        op = tf.raw_ops.HistogramSummary(tag=tag, values=value, name=_op_name(tag))
    else:
        op = tf.raw_ops.ScalarSummary(tags=tag, values=value, name=_op_name(tag))
    for key in collections if collections is not None else [tf1.GraphKeys.SUMMARIES]:
        tf1.add_to_collection(key, op)
    return op


def add_tensor_summary(
    x: Any,
    types: Sequence[str],
    name: str | None = None,
    collections: Sequence[str] | None = None,
    main_tower_only: bool = True,
) -> list[Any]:
    """Summarize tensor `x` in several ways.

    The summary names (tags) are ``<name scope>/<name><suffix>`` with the tower's
    prefix removed from both, and suffixes ``-histogram``, ``-sparsity``,
    ``-mean``, ``-rms`` (none for ``scalar``); so every tower-free name appears
    once in TensorBoard whichever tower wrote it.

    Args:
        x: the tensor.
        types: some of ``scalar`` (`x` must be a scalar), ``histogram``,
            ``sparsity`` (fraction of zeros), ``mean``, ``rms``.
        name: the summary name; defaults to the op name of `x` without the tower prefix.
        collections: collections of the summary ops (``SUMMARIES`` when None).
        main_tower_only: do nothing in towers other than the main training tower.

    Returns:
        The summary ops created (empty when skipped).

    Raises:
        ValueError: unknown types, or ``scalar`` for a tensor that is not a scalar.
    """
    kinds = check_summary_types(types)
    if "scalar" in kinds and x.shape.rank not in (0, None):
        msg = f"summary type 'scalar' needs a scalar tensor; {x.name!r} has shape {x.shape}"
        raise ValueError(msg)
    if _skip_here(main_tower_only):
        return []
    base = _tower_free_name(name or x.op.name)
    scope = _tower_free_name(tf1.get_default_graph().get_name_scope())
    if name is None and scope and (base == scope or base.startswith(scope + "/")):
        scope = ""
    full = join_scope(scope, base)
    ops = []
    for kind in kinds:
        tag = summary_tag(full, kind)
        if kind in ("scalar", "histogram"):
            value = x
        elif kind == "sparsity":
            value = tf.math.zero_fraction(x)
        elif kind == "mean":
            value = tf.reduce_mean(x)
        else:
            value = tf.sqrt(tf.reduce_mean(tf.square(tf.cast(x, tf.float32))))
        ops.append(_add_summary(kind, tag, value, collections))
    return ops


def add_activation_summary(
    x: Any,
    types: Sequence[str] | None = None,
    name: str | None = None,
    collections: Sequence[str] | None = None,
) -> list[Any]:
    """`add_tensor_summary` under the re-entered top-level name scope ``activation-summary``.

    A no-op (returns ``[]``) outside the main training tower. `types` defaults to
    ``["sparsity", "rms", "histogram"]``.
    """
    kinds = check_summary_types(types if types is not None else ["sparsity", "rms", "histogram"])
    if _skip_here():
        return []
    with cached_name_scope("activation-summary"):
        return add_tensor_summary(x, kinds, name=name, collections=collections)


def check_summary_lists(summary_lists: Sequence[Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Validate ``(regex, [types])`` pairs for `add_param_summary`.

    Raises:
        TypeError: an entry is not a ``(str, list)`` pair.
        ValueError: a regex does not compile, or a type is unknown.

    Examples:
        >>> check_summary_lists([(".*/W", ["histogram", "rms"])])
        (('.*/W', ('histogram', 'rms')),)
    """
    out = []
    for i, entry in enumerate(summary_lists):
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str)):
            msg = f"summary list {i} must be a (regex, [types]) pair; got {entry!r}"
            raise TypeError(msg)
        try:
            re.compile(entry[0])
        except re.error as err:
            msg = f"summary list {i} has an invalid regex {entry[0]!r}: {err}"
            raise ValueError(msg) from None
        out.append((entry[0], check_summary_types(entry[1])))
    return tuple(out)


def add_param_summary(*summary_lists: Any, collections: Sequence[str] | None = None) -> list[Any]:
    """Summarize every trainable variable whose name fully matches a regex.

    Args:
        summary_lists: ``(regex, [types])`` pairs; the regex is matched against
            the whole variable name (without ``:0``), types as in `add_tensor_summary`.
        collections: collections of the summary ops.

    Returns:
        The summary ops created, under the re-entered top-level scope ``param-summary``;
        ``[]`` outside the main training tower.
    """
    lists = check_summary_lists(summary_lists)
    if _skip_here():
        return []
    ops: list[Any] = []
    with cached_name_scope("param-summary"):
        for var in tf1.trainable_variables():
            name = var.op.name
            for regex, kinds in lists:
                if re.fullmatch(regex, name):
                    value = tf.convert_to_tensor(var)
                    ops += add_tensor_summary(
                        value, kinds, name=name, collections=collections, main_tower_only=False
                    )
    return ops


def add_moving_summary(
    *tensors: Any,
    decay: float = 0.95,
    collection: str | None = MOVING_SUMMARY_OPS_KEY,
    summary_collections: Sequence[str] | None = None,
) -> list[Any]:
    """Summarize the exponential moving average (EMA) of scalar tensors.

    For each tensor it creates two non-trainable variables under the top-level
    scope ``EMA/`` (the average, and a 0/1 flag telling whether it has started), an update op whose
    first run sets the average to the tensor's value and whose later runs move
    it by ``(1 - decay)`` towards the value, and a scalar summary of the average
    whose name is the tensor's name without the tower prefix. Run the update ops
    once per step (the callbacks' ``MovingAverageSummary`` runs `collection`).
    The summary is of the update's output, as in tensorpack: fetched in the same call
    as the update, it shows the average after that call's update (never a value read
    before it); fetched on its own, it runs the update.

    A no-op returning ``[]`` in any tower but the main training tower.

    Args:
        tensors: scalar tensors (a variable is read as a tensor, as tensorpack did).
        decay: the EMA decay per update, in [0, 1); 0 (as tensorpack took it): the summary
            is the last value.
        collection: the collection to add the update ops to (None: none).
        summary_collections: collections of the summary ops (default: ``SUMMARIES``).

    Returns:
        The update ops' outputs (the new averages), one per tensor.

    Raises:
        ValueError: no tensors, a tensor that is not a scalar, or `decay` outside [0, 1).
        TypeError: an argument is not a tensor.
    """
    if not tensors:
        msg = "add_moving_summary needs at least one scalar tensor"
        raise ValueError(msg)
    if isinstance(decay, bool) or not isinstance(decay, numbers.Real):
        msg = f"'decay' must be a number in [0, 1); got {type(decay).__name__} {decay!r}"
        raise TypeError(msg)
    if not 0.0 <= float(decay) < 1.0:
        msg = f"'decay' must be in [0, 1); got {decay}"
        raise ValueError(msg)
    wrong = [
        f"{i}: {type(t).__name__}"
        for i, t in enumerate(tensors)
        if not isinstance(t, tf.Tensor | tf.Variable)
    ]
    if wrong:
        msg = f"add_moving_summary takes tensors; arguments at fault: {', '.join(wrong)}"
        raise TypeError(msg)
    not_scalar = [f"{t.name} {t.shape}" for t in tensors if t.shape.rank != 0]
    if not_scalar:
        msg = f"add_moving_summary takes scalar tensors; got {', '.join(not_scalar)}"
        raise ValueError(msg)
    if _skip_here():
        return []
    summary_colls = list(summary_collections or [tf1.GraphKeys.SUMMARIES])
    updates = []
    for given in tensors:
        x = given.value() if isinstance(given, tf.Variable) else given
        name = _tower_free_name(given.op.name)
        value = tf.cast(x, tf.float32) if x.dtype != tf.float32 else x
        parent, _, base = name.rpartition("/")
        with tf1.name_scope(join_scope("EMA", parent) + "/"), tf1.name_scope(base):
            average = tf1.Variable(0.0, trainable=False, name="average", dtype=tf.float32)
            started = tf1.Variable(0.0, trainable=False, name="started", dtype=tf.float32)
            moved = average - (average - value) * (1.0 - decay)
            assign = average.assign(tf1.where(started > 0.5, moved, value))
            with tf1.control_dependencies([assign]):
                mark = started.assign(1.0)
            with tf1.control_dependencies([mark]):
                update = tf.identity(assign, name="update")
            # The summary is of the update's result, so it reads the average after the
            # update of the same call (a plain read would race with the assignment).
            summary = tf.raw_ops.ScalarSummary(tags=name, values=update, name="summary")
        for key in summary_colls:
            tf1.add_to_collection(key, summary)
        if collection is not None:
            tf1.add_to_collection(collection, update)
        updates.append(update)
    return updates
