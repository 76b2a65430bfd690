"""Build the inference tower of a PredictConfig in a graph of its own, and open a session on it."""

from __future__ import annotations

from typing import Any

import attrs

from towerkit.export._config import PredictConfig
from towerkit.export._errors import UnknownTensorError
from towerkit.export._names import render_unknown
from towerkit.towers import TowerContext, TowerTensorHandle, build_placeholders, precision_scope
from towerkit.towers.compat import tf1


@attrs.frozen(kw_only=True)
class InferenceGraph:
    """A built inference tower: its graph, its placeholders and the tensors to feed and fetch.

    Attributes:
        graph: the graph holding only the inference tower (and what `session_init` added).
        handle: the tower's handle.
        placeholders: one placeholder per spec of the input signature, named as the spec.
        inputs: the tensors of the config's `input_names`, in call order: placeholders of
            the signature, or any tensor of the tower named so.
        outputs: the tensors of the config's `output_names`, in output order.
    """

    graph: Any
    handle: TowerTensorHandle
    placeholders: tuple[Any, ...] = attrs.field(converter=tuple)
    inputs: tuple[Any, ...] = attrs.field(converter=tuple)
    outputs: tuple[Any, ...] = attrs.field(converter=tuple)


def _candidate_names(graph: Any, ns_name: str) -> list[str]:
    """Names a user may have meant: op names and tensor names, without the tower prefix."""
    prefix = f"{ns_name}/" if ns_name else ""
    names = []
    for op in graph.get_operations():
        name = op.name.removeprefix(prefix)
        names.append(name)
        names += [t.name.removeprefix(prefix) for t in op.outputs[1:]]
    return names


def resolve_outputs(handle: TowerTensorHandle, output_names: tuple[str, ...]) -> list[Any]:
    """The tower's tensors named by `output_names`.

    Raises:
        UnknownTensorError: some names name no tensor of the tower; every one is listed,
            with close names of the graph as suggestions.
        TypeError: a name resolves to a variable or a variable handle, not a value.
    """
    found, missing = [], []
    for name in output_names:
        try:
            found.append(handle.get_tensor(name))
        except KeyError:
            missing.append(name)
    if missing:
        candidates = _candidate_names(handle.graph, handle.ns_name)
        raise UnknownTensorError(render_unknown(missing, candidates))
    handles = [
        n
        for n, t in zip(output_names, found)
        if not isinstance(t, tf1.Tensor) or t.dtype in (tf1.resource, tf1.variant)
    ]
    if handles:
        msg = (
            "'output_names' must name tensors holding values, not variables or their "
            f"handles; at fault: {', '.join(map(repr, handles))} (return "
            "`tf.identity(var, name=...)` from the tower and name that instead)"
        )
        raise TypeError(msg)
    return found


def resolve_inputs(handle: TowerTensorHandle, input_names: tuple[str, ...]) -> list[Any]:
    """The tensors fed for `input_names`: inputs of the signature, or any tensor of the tower.

    Raises:
        UnknownTensorError: some names name neither an input nor a tensor of the tower;
            every one is listed, with close names of the graph as suggestions.
        TypeError: a name resolves to a variable, a variable handle or an operation's
            reference, which cannot be fed.
    """
    found, missing = [], []
    for name in input_names:
        try:
            found.append(handle.get_tensor(name))
        except KeyError:
            missing.append(name)
    if missing:
        signature = [s.name for s in handle.input_signature]
        candidates = [*signature, *_candidate_names(handle.graph, handle.ns_name)]
        raise UnknownTensorError(
            render_unknown(
                missing,
                candidates,
                scope="the input signature or of the inference tower",
                what="input_names",
            )
        )
    bad = [
        n
        for n, t in zip(input_names, found)
        if not isinstance(t, tf1.Tensor) or t.dtype in (tf1.resource, tf1.variant)
    ]
    if bad:
        msg = (
            "'input_names' must name tensors that can be fed, not variables or their "
            f"handles; at fault: {', '.join(map(repr, bad))}"
        )
        raise TypeError(msg)
    return found


def build_inference_graph(config: PredictConfig, *, setup_restore: bool = True) -> InferenceGraph:
    """Build `config`'s tower for inference in a new graph, on placeholders.

    The tower is built under ``TowerContext('', is_training=False)``, in the config's
    precision (`towerkit.towers.precision_scope`). With
    `setup_restore`, ``config.session_init.setup_graph()`` then builds its restore
    ops in the graph (a faster restore); without, the graph holds the tower only and
    the restore feeds values through the variables' initializers. The graph is left
    unfinalized, so callers may add what they need (a saver) before finalizing.

    Raises:
        UnknownTensorError: an input name names no input and no tensor of the tower, or
            an output name names no tensor of the tower.
    """
    graph = tf1.Graph()
    with graph.as_default():
        placeholders = build_placeholders(config.input_signature)
        tower_func = config.tower_func
        with TowerContext("", is_training=False), precision_scope(config.precision):
            tower_func(*placeholders)
        handle = tower_func.towers[0]
        inputs = resolve_inputs(handle, config.input_names)
        outputs = resolve_outputs(handle, config.output_names)
        if setup_restore:
            config.session_init.setup_graph(graph)
    return InferenceGraph(
        graph=graph,
        handle=handle,
        placeholders=placeholders,
        inputs=inputs,
        outputs=outputs,
    )


def open_session(config: PredictConfig, graph: Any, session_config: Any = None) -> Any:
    """A session on `graph` with the variables initialized, then loaded by `session_init`.

    With ``config.session_creator`` set, it creates the session (under the graph as
    default) and is responsible for initializing variables; otherwise a plain
    ``tf.compat.v1.Session`` (with `session_config`) is opened and every variable's
    initializer is run (fetched as existing ops, so the graph may be finalized).
    """
    with graph.as_default():
        if config.session_creator is None:
            sess = tf1.Session(graph=graph, config=session_config)
            variables = tf1.global_variables() + tf1.local_variables()
            if variables:
                sess.run([v.initializer for v in variables])
        else:
            sess = config.session_creator.create_session()
            if sess.graph is not graph:
                sess.close()
                msg = (
                    "'session_creator' must create its session on the default graph "
                    "(the predictor's graph); it returned a session on another graph"
                )
                raise ValueError(msg)
    try:
        config.session_init.init(sess)
    except BaseException:
        sess.close()
        raise
    return sess
