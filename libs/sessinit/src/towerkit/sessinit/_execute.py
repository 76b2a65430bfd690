"""Executing restore plans in a session: one op group per graph and plan, one run per restore."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.sessinit._compat import tf1
from towerkit.sessinit._plan import Assignment, VarInfo, normalize_name
from towerkit.sessinit._varmanip import corrupt_checkpoint_error

logger = logging.getLogger("towerkit.sessinit")

_SCOPE = "towerkit_restore"


class _GraphCache:
    """Ops this lib built in one graph, reused by every later restore into it.

    Only names are kept (of ops and tensors, looked up again in the graph), never graph
    objects, so the cache holds no reference back to its graph and goes with it.
    """

    def __init__(self) -> None:
        self.checkpoint_ops: dict[tuple[Assignment, ...], tuple[str, str]] = {}
        self.assign_ops: dict[str, tuple[str, str]] = {}
        self.var_infos: tuple[tuple[str, ...], tuple[VarInfo, ...]] = ((), ())


_CACHES: weakref.WeakKeyDictionary[Any, _GraphCache] = weakref.WeakKeyDictionary()


def _cache(graph: Any) -> _GraphCache:
    cache = _CACHES.get(graph)
    if cache is None:
        cache = _CACHES[graph] = _GraphCache()
    return cache


def graph_variables(graph: Any) -> dict[str, Any]:
    """The variables a restore may fill: global and model variables, by name without ``:0``."""
    found: dict[str, Any] = {}
    for key in (tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES):
        for var in graph.get_collection(key):
            found.setdefault(normalize_name(var.name), var)
    return found


def variable_info(var: Any) -> VarInfo:
    """Describe a graph variable (unknown rank reads as a scalar of unknown size)."""
    shape = var.shape
    dims = shape.as_list() if shape.rank is not None else []
    return VarInfo(name=var.name, shape=dims, dtype=var.dtype.base_dtype.name)


def graph_var_infos(variables: Mapping[str, Any]) -> tuple[VarInfo, ...]:
    """`variable_info` of every variable in a `graph_variables` mapping.

    The result is remembered per graph while it holds the same variable names (a name
    in a graph always denotes the same variable), so repeated restores skip this work.
    """
    if not variables:
        return ()
    names = tuple(variables)
    cache = _cache(next(iter(variables.values())).graph)
    seen, infos = cache.var_infos
    if seen != names:
        infos = tuple(variable_info(v) for v in variables.values())
        cache.var_infos = (names, infos)
    return infos


def _is_resource(var: Any) -> bool:
    return bool(var.op.type == "VarHandleOp")


def _assign(var: Any, value: Any) -> Any:
    if _is_resource(var):
        return var.assign(value, read_value=False)
    return tf1.assign(var, value).op


def _build_checkpoint_op(
    graph: Any, pairs: Sequence[Assignment], variables: Mapping[str, Any]
) -> tuple[Any, Any]:
    """RestoreV2 for all `pairs`, converted where needed, assigned, grouped: one op."""
    with graph.as_default(), tf1.name_scope(_SCOPE):
        with tf1.device("/device:CPU:0"):
            prefix = tf1.placeholder(tf.string, shape=[], name="prefix")
            values = tf.raw_ops.RestoreV2(
                prefix=prefix,
                tensor_names=[p.source.name for p in pairs],
                shape_and_slices=[""] * len(pairs),
                dtypes=[tf.as_dtype(p.source.dtype) for p in pairs],
            )
        assigns = []
        for pair, value in zip(pairs, values):
            var = variables[pair.target.name]
            with tf1.device(var.device):
                if pair.cast:
                    value = tf.cast(value, var.dtype.base_dtype)
                if pair.reshape:
                    value = tf.reshape(value, pair.target.shape)
                assigns.append(_assign(var, value))
        op = tf.group(*assigns, name="restore_all")
    return prefix, op


def checkpoint_restore_op(
    graph: Any, pairs: Sequence[Assignment], variables: Mapping[str, Any]
) -> tuple[Any, Any] | None:
    """The cached ``(prefix placeholder, op)`` restoring `pairs`, built now if the graph allows.

    Returns None when the graph is finalized and no such op was built before it was.
    """
    cache = _cache(graph)
    key = tuple(pairs)
    names = cache.checkpoint_ops.get(key)
    if names is None:
        if graph.finalized:
            return None
        prefix, op = _build_checkpoint_op(graph, pairs, variables)
        cache.checkpoint_ops[key] = (prefix.name, op.name)
        return prefix, op
    return graph.get_tensor_by_name(names[0]), graph.get_operation_by_name(names[1])


def _feed_target(var: Any, shape: Any) -> tuple[Any, Any] | None:
    """``(op, tensor)``: running `op` with `tensor` fed assigns the fed value to `var`.

    A variable's initializer assigns its initial value, so feeding that value reuses an
    op the graph already has (and works in a finalized graph).
    """
    init = getattr(var, "initializer", None)
    if init is None or init.type not in ("Assign", "AssignVariableOp") or len(init.inputs) != 2:
        return None
    value = init.inputs[1]
    if not var.graph.is_feedable(value) or not value.shape.is_compatible_with(shape):
        return None
    if value.dtype.base_dtype != var.dtype.base_dtype:
        return None
    return init, value


def _placeholder_assign(var: Any) -> tuple[Any, Any] | None:
    graph = var.graph
    cache = _cache(graph)
    name = normalize_name(var.name)
    names = cache.assign_ops.get(name)
    if names is None:
        if graph.finalized:
            return None
        with graph.as_default(), tf1.name_scope(_SCOPE), tf1.device(var.device):
            ph = tf1.placeholder(var.dtype.base_dtype, shape=var.shape, name="value")
            op = _assign(var, ph)
        cache.assign_ops[name] = (op.name, ph.name)
        return op, ph
    return graph.get_operation_by_name(names[0]), graph.get_tensor_by_name(names[1])


def prepare_value_restore(variables: Sequence[Any]) -> None:
    """Build assign ops for variables whose initializer cannot take a fed value (graph not finalized)."""
    for var in variables:
        if _feed_target(var, var.shape) is None:
            _placeholder_assign(var)


def convert_value(pair: Assignment, value: Any, np_dtype: Any) -> np.ndarray:
    """The source value converted as `pair` needs: upcast and/or reshape, else as it is."""
    array = np.asarray(value)
    if pair.cast:
        array = array.astype(np_dtype)
    if pair.reshape:
        array = array.reshape(tuple(int(d or 0) for d in pair.target.shape))
    return array


def run_value_restore(
    sess: Any,
    pairs: Sequence[Assignment],
    variables: Mapping[str, Any],
    get_value: Callable[[Assignment], Any],
) -> None:
    """Assign values to variables by feeding: no new op where initializers can take them.

    All assignments go into one ``session.run``, except when two variables share one
    initial-value tensor; then a few runs (one per variable sharing it) are needed.
    """
    rounds: list[tuple[list[Any], dict[Any, Any]]] = [([], {})]
    for pair in pairs:
        var = variables[pair.target.name]
        value = convert_value(pair, get_value(pair), var.dtype.base_dtype.as_numpy_dtype)
        target = _feed_target(var, value.shape) or _placeholder_assign(var)
        if target is None:
            msg = (
                f"cannot assign variable {pair.target.name!r} in a finalized graph: its "
                "initializer does not take a fed value; call setup_graph() on the "
                "SessionInit before the graph is finalized"
            )
            raise RuntimeError(msg)
        op, tensor = target
        free = [r for r in rounds if tensor not in r[1]]
        if not free:
            rounds.append(([], {}))
            free = rounds[-1:]
        free[0][0].append(op)
        free[0][1][tensor] = value
    for ops, feed in rounds:
        if ops:
            sess.run(ops, feed_dict=feed)


def run_checkpoint_restore(
    sess: Any,
    checkpoint: str,
    pairs: Sequence[Assignment],
    variables: Mapping[str, Any],
    *,
    build_ops: bool = True,
    read_from: Mapping[str, str] | None = None,
) -> None:
    """Restore `pairs` from a checkpoint prefix in one ``session.run``.

    With `build_ops`, a cached RestoreV2 op group (built on first use while the graph is
    not finalized) does the work. Otherwise, or in a finalized graph without such an op,
    or when `read_from` names entries to read in place of others (``{source name:
    entry read}``, the moving averages of `ema_sources`), the values are read with a
    checkpoint reader and fed (`run_value_restore`).
    """
    if not pairs:
        return
    read_from = read_from or {}
    build_ops = build_ops and not read_from
    found = checkpoint_restore_op(sess.graph, pairs, variables) if build_ops else None
    if found is not None:
        prefix, op = found
        try:
            sess.run(op, feed_dict={prefix: checkpoint})
        except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.NotFoundError) as err:
            raise corrupt_checkpoint_error(checkpoint, [p.source.name for p in pairs], err) from err
        return
    if build_ops:
        logger.debug("graph is finalized without a restore op for this plan: feeding values")
    reader = tf1.train.NewCheckpointReader(checkpoint)

    def read(pair: Assignment) -> Any:
        try:
            return reader.get_tensor(read_from.get(pair.source.name, pair.source.name))
        except (tf.errors.OpError, IndexError, EOFError) as err:
            names = [p.source.name for p in pairs]
            raise corrupt_checkpoint_error(checkpoint, names, err) from err

    run_value_restore(sess, pairs, variables, read)
