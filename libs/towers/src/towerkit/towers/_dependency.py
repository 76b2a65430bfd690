"""Whether an op is needed to compute some targets (memoized per graph)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from towerkit.towers.compat import tf1

_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)


def _as_op(x: Any) -> Any:
    if isinstance(x, tf1.Operation):
        return x
    op = getattr(x, "op", None)
    if isinstance(op, tf1.Operation):
        return op
    msg = f"expected a tf.Operation, tf.Tensor or variable; got {type(x).__name__}"
    raise TypeError(msg)


def backward_closure(ops: Iterable[Any]) -> frozenset[str]:
    """Names of `ops` and every op they depend on (data inputs and control inputs)."""
    seen: dict[str, Any] = {}
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return frozenset(seen)


def dependency_of_targets(targets: Iterable[Any], op: Any) -> bool:
    """Whether computing any of `targets` runs `op`.

    The set of ops each target tuple depends on is computed once per graph and
    reused (ops never lose inputs once built).

    Args:
        targets: ops, tensors or variables.
        op: an op, tensor or variable.

    Returns:
        True when `op` is one of `targets` or one of their dependencies.
    """
    op = _as_op(op)
    target_ops = [_as_op(t) for t in targets]
    if not target_ops:
        return False
    graph = target_ops[0].graph
    key = tuple(sorted({t.name for t in target_ops}))
    per_graph = _CACHE.setdefault(graph, {})
    deps = per_graph.get(key)
    if deps is None:
        deps = backward_closure(target_ops)
        per_graph[key] = deps
    return op.graph is graph and op.name in deps


def _flatten_fetches(fetches: Any, graph: Any) -> list[Any]:
    if fetches is None:
        return []
    if isinstance(fetches, (str, bytes)):
        name = fetches.decode() if isinstance(fetches, bytes) else fetches
        return [graph.as_graph_element(name)]
    if isinstance(fetches, Mapping):
        return [x for v in fetches.values() for x in _flatten_fetches(v, graph)]
    if isinstance(fetches, (list, tuple, set, frozenset)):
        return [x for v in fetches for x in _flatten_fetches(v, graph)]
    return [fetches]


def dependency_of_fetches(fetches: Any, op: Any) -> bool:
    """Whether running `fetches` (anything ``sess.run`` accepts, nested) runs `op`.

    Returns:
        True when some fetched element is `op` or depends on it.
    """
    op = _as_op(op)
    targets = _flatten_fetches(fetches, op.graph)
    return dependency_of_targets(targets, op)
