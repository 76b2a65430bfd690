"""GraphDef surgery for the compact export: fold variables into constants, prune, optimize."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from towerkit.export._errors import InferenceOptimizationError

logger = logging.getLogger("towerkit.export")

STATEFUL_OPS = frozenset(
    {
        "Variable",
        "VariableV2",
        "VarHandleOp",
        "ReadVariableOp",
        "ResourceGather",
        "VarIsInitializedOp",
        "Assign",
        "AssignAdd",
        "AssignSub",
        "AssignVariableOp",
        "AssignAddVariableOp",
        "AssignSubVariableOp",
        "SaveV2",
        "RestoreV2",
    }
)
"""Ops that read, write or hold variables, or touch checkpoints: none may stay in a compact graph."""


def input_node(name: str) -> str:
    """The node a NodeDef input string refers to (``"^a"`` and ``"a:1"`` give ``"a"``).

    Examples:
        >>> input_node("conv/W:0"), input_node("^init"), input_node("split:1"), input_node("x")
        ('conv/W', 'init', 'split', 'x')
    """
    name = name.removeprefix("^")
    op, sep, port = name.rpartition(":")
    return op if sep and port.isdigit() else name


def reachable(edges: Mapping[str, Sequence[str]], roots: Iterable[str]) -> set[str]:
    """The nodes that `roots` depend on (themselves included), following `edges` to inputs.

    Args:
        edges: each node's inputs, as NodeDef input strings (``"^ctrl"``, ``"op:1"`` allowed).
        roots: the nodes to start from.

    Examples:
        >>> edges = {"prob": ["logits"], "logits": ["x", "^init"], "x": [], "y": [], "init": []}
        >>> sorted(reachable(edges, ["prob"]))
        ['init', 'logits', 'prob', 'x']
    """
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(input_node(i) for i in edges.get(node, ()))
    return seen


def unused_inputs(
    edges: Mapping[str, Sequence[str]], input_nodes: Sequence[str], output_nodes: Sequence[str]
) -> list[str]:
    """The input nodes that no output depends on, in input order.

    Examples:
        >>> edges = {"prob": ["x"], "x": [], "label": []}
        >>> unused_inputs(edges, ["x", "label"], ["prob"])
        ['label']
    """
    needed = reachable(edges, output_nodes)
    return [n for n in input_nodes if n not in needed]


def stateful_nodes(nodes: Iterable[tuple[str, str]]) -> list[str]:
    """The names of the ``(name, op)`` pairs whose op holds, reads or writes a variable.

    Examples:
        >>> stateful_nodes([("fc/W", "Const"), ("bn/mean", "VarHandleOp"), ("prob", "Softmax")])
        ['bn/mean']
    """
    return [name for name, op in nodes if op in STATEFUL_OPS]


def graph_edges(graph_def: Any) -> dict[str, list[str]]:
    """Each node of `graph_def` mapped to its input strings."""
    return {node.name: list(node.input) for node in graph_def.node}


def freeze_session_graph(sess: Any, input_nodes: Sequence[str], output_nodes: Sequence[str]) -> Any:
    """The part of `sess.graph` that the outputs need, variables folded into constants.

    The input placeholders are kept even when no output needs them, so the frozen
    graph accepts every input it was given. Identity nodes and other training-only
    nodes (``CheckNumerics``) are removed, except the inputs and outputs themselves.

    Args:
        sess: a session holding the variables' values.
        input_nodes: names of the input placeholders.
        output_nodes: names of the output operations.

    Returns:
        A ``GraphDef`` with no variable left.

    Raises:
        RuntimeError: a variable op is still in the frozen graph.
    """
    from tensorflow.python.framework import convert_to_constants, graph_util_impl
    from tensorflow.python.util import deprecation

    keep = list(dict.fromkeys([*output_nodes, *input_nodes]))
    with deprecation.silence():
        frozen = convert_to_constants.convert_variables_to_constants_from_session_graph(
            sess, sess.graph.as_graph_def(), keep
        )
        pruned = with_library(
            graph_util_impl.remove_training_nodes(frozen, protected_nodes=keep), frozen
        )
    nodes = [(n.name, n.op) for n in pruned.node]
    for function in pruned.library.function:  # a while loop's body and condition
        nodes += [(f"{function.signature.name}/{n.name}", n.op) for n in function.node_def]
    left = stateful_nodes(nodes)
    if left:
        msg = f"the frozen graph still holds variable ops: {left}; they could not be folded"
        raise RuntimeError(msg)
    return pruned


def with_library(graph_def: Any, source: Any) -> Any:
    """`graph_def` given `source`'s function library and versions, which it lacks.

    TensorFlow's graph rewrites used here (``remove_training_nodes``, optimize-for-
    inference) copy nodes into a new ``GraphDef`` and drop the library, where the bodies
    of functional control flow live: a while loop (``tf.compat.v1.while_loop``, the
    recurrent loops) would name a function the written graph no longer holds.
    """
    if not graph_def.library.function and source.library.function:
        graph_def.library.CopyFrom(source.library)
    if not graph_def.HasField("versions") and source.HasField("versions"):
        graph_def.versions.CopyFrom(source.versions)
    return graph_def


def renamed_ops(nodes: Iterable[tuple[str, str]], old: str, new: str) -> dict[str, str]:
    """The op of each ``(name, op)`` pair whose op is `old`, renamed to `new`: ``{name: new}``.

    Examples:
        >>> renamed_ops([("bn/add", "AddV2"), ("fc/mul", "Mul"), ("x", "AddV2")], "AddV2", "Add")
        {'bn/add': 'Add', 'x': 'Add'}
    """
    return {name: new for name, op in nodes if op == old}


def _set_ops(graph_def: Any, ops: Mapping[str, str], only_if: str | None = None) -> Any:
    """A copy of `graph_def` with the ops of the nodes named in `ops` changed.

    With `only_if`, a node changes only when its op is `only_if` now.
    """
    result = type(graph_def)()
    result.CopyFrom(graph_def)
    for node in result.node:
        if node.name in ops and (only_if is None or node.op == only_if):
            node.op = ops[node.name]
    return result


def _reason(err: BaseException) -> str:
    """A readable one-line reason from an exception whose args may be a tuple of parts."""
    parts = [a if isinstance(a, str) else repr(a) for a in err.args]
    return f"{type(err).__name__}: {' '.join(parts).strip() or 'no message'}"


def optimize_graph_def(
    graph_def: Any,
    input_nodes: Sequence[str],
    output_nodes: Sequence[str],
    input_dtypes: Sequence[Any],
    toco_compatible: bool = False,
) -> Any:
    """Run TensorFlow's optimize-for-inference on a frozen graph.

    Args:
        graph_def: a frozen ``GraphDef`` (no variables).
        input_nodes: the input placeholders, kept as placeholders.
        output_nodes: the output operations.
        input_dtypes: the ``tf.DType`` of each input.
        toco_compatible: only apply transformations whose results TOCO (the
            TensorFlow Lite converter) supports.

    TensorFlow's optimizer only recognizes batch normalizations written with the
    ``Add`` op, while graphs built today use ``AddV2`` (the same addition for numbers):
    they are presented to it as ``Add``, so that batch normalizations after
    convolutions are folded into the convolution weights, and the ``AddV2`` nodes it
    leaves are given back their op.

    Returns:
        The optimized ``GraphDef``.

    Raises:
        InferenceOptimizationError: the graph cannot be optimized; the message says why.
    """
    from tensorflow.python.tools import optimize_for_inference_lib
    from tensorflow.python.util import deprecation

    unused = unused_inputs(graph_edges(graph_def), input_nodes, output_nodes)
    if unused:
        msg = (
            f"no output depends on the inputs {unused}, and optimize-for-inference removes "
            "unused inputs: the optimized graph could not be fed them"
        )
        raise InferenceOptimizationError(msg)
    adds = renamed_ops(((n.name, n.op) for n in graph_def.node), "AddV2", "Add")
    try:
        with deprecation.silence():
            optimized = optimize_for_inference_lib.optimize_for_inference(
                _set_ops(graph_def, adds),
                list(input_nodes),
                list(output_nodes),
                [dtype.as_datatype_enum for dtype in input_dtypes],
                toco_compatible=bool(toco_compatible),
            )
    except (ValueError, KeyError, TypeError, IndexError) as err:
        msg = f"TensorFlow's optimize-for-inference failed on this graph: {_reason(err)}"
        raise InferenceOptimizationError(msg) from err
    restored = _set_ops(optimized, dict.fromkeys(adds, "AddV2"), only_if="Add")
    return with_library(restored, graph_def)
