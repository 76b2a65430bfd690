"""Several training steps in one session call: the in-graph loop and the checks around it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers import MOVING_SUMMARY_OPS_KEY
from towerkit.towers.compat import tf1

if TYPE_CHECKING:
    from towerkit.trainers.inputs._base import InputSource

STAGING_PUT_OPS_KEY = "towerkit_staging_put_ops"
"""The collection of the ops an input source runs beside every step inside the loop (the
staging areas' puts of `StagingInput`)."""

PER_STEP_COLLECTIONS = (tf1.GraphKeys.UPDATE_OPS, MOVING_SUMMARY_OPS_KEY, STAGING_PUT_OPS_KEY)
"""Collections whose ops run with every step: inside the loop they run in its body."""


def check_k(value: object, what: str = "steps_per_execution") -> int:
    """``value`` as a number of steps per session call: an int >= 1.

    Examples:
        >>> check_k(8)
        8
        >>> check_k(0)
        Traceback (most recent call last):
        ...
        ValueError: 'steps_per_execution' must be an int >= 1; got 0
    """
    if not isinstance(value, int) or isinstance(value, bool):
        msg = f"{what!r} must be an int >= 1; got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if value < 1:
        msg = f"{what!r} must be an int >= 1; got {value}"
        raise ValueError(msg)
    return value


def _in(graph: Any, item: Any) -> bool:
    return getattr(item, "graph", None) is graph


def build_steps_loop(graph: Any, k: int, build_step: Callable[[], Any]) -> Any:
    """An op running ``k`` training steps in one ``tf.while_loop``.

    ``build_step()`` is called once, inside the loop's body, and returns the op of
    one step (it reads its input there, so each iteration takes its own batch). The
    body also runs the ops it added to `PER_STEP_COLLECTIONS` (moving averages,
    batch-norm updates) with every step, and merges the summaries it added: the
    merged summary of the last iteration comes out of the loop and replaces them in
    the ``SUMMARIES`` collection, so a summary fetched with the loop shows the last
    step's values. Everything the body added to the graph's collections is taken
    out of them (it cannot be fetched from outside the loop); variables are created
    in the outer graph and stay.

    Returns:
        The loop's op (run it to make ``k`` steps).
    """
    body_graphs: list[Any] = []

    def body(i: Any, summary: Any) -> tuple[Any, Any]:
        step = build_step()
        inner = tf1.get_default_graph()
        body_graphs.append(inner)
        per_step = [
            x.op if isinstance(x, tf.Tensor) else x
            for key in PER_STEP_COLLECTIONS
            for x in inner.get_collection(key)
            if _in(inner, x)
        ]
        summaries = [s for s in inner.get_collection(tf1.GraphKeys.SUMMARIES) if _in(inner, s)]
        merged = tf1.summary.merge(summaries) if summaries else summary
        with tf.control_dependencies([step, *per_step]):
            return i + 1, tf.identity(merged)

    with graph.as_default(), tf1.name_scope("steps_per_execution"):
        # a counted loop (maximum_iterations) ran faster than a compared counter here;
        # one iteration at a time keeps the steps in order, as K=1 runs them
        count, summary = tf.while_loop(
            lambda i, s: True,
            body,
            [tf.constant(0), tf.constant("", dtype=tf.string)],
            maximum_iterations=k,
            parallel_iterations=1,
            name="loop",
        )
    (inner,) = body_graphs
    had_summaries = _purge(graph, inner)
    if had_summaries:
        graph.add_to_collection(tf1.GraphKeys.SUMMARIES, summary)
    return count.op


def _purge(graph: Any, inner: Any) -> bool:
    """Take every item of `inner` (the loop body) out of `graph`'s collections.

    Returns:
        Whether ``SUMMARIES`` held one.
    """
    had = False
    for key in graph.get_all_collection_keys():
        ref = graph.get_collection_ref(key)
        kept = [x for x in ref if not _in(inner, x)]
        if len(kept) != len(ref):
            had = had or key == tf1.GraphKeys.SUMMARIES
            ref[:] = kept
    return had


def coarse_step_refusals(callbacks: Sequence[Callback], k: int) -> list[str]:
    """Every reason one of `callbacks` cannot run with ``k`` steps per session call."""
    return [f for cb in callbacks for f in cb.coarse_steps_faults(k)]


def check_callbacks_for_k(callbacks: Sequence[Callback], k: int) -> None:
    """Raise ValueError naming every callback that needs a step inside a call of ``k`` steps."""
    faults = coarse_step_refusals(callbacks, k)
    if faults:
        msg = (
            f"steps_per_execution={k} runs the callbacks' per-step hooks once per {k} steps, "
            "at the last step of each session call; these callbacks need a step inside "
            "a call:\n  " + "\n  ".join(faults)
        )
        raise ValueError(msg)


def refuse_per_step_feeds(input: InputSource, k: int) -> None:
    """Raise when `input` is fed from Python with every step: such an input cannot run K steps."""
    if k == 1:
        return
    reason = getattr(input, "per_step_feed_reason", None)
    if reason:
        msg = (
            f"steps_per_execution={k} runs {k} steps in one session call, but the input "
            f"{input} {reason}; use an input that dequeues in the graph (QueueInput, "
            "TFDatasetInput, NumpyInput, IterableInput)"
        )
        raise ValueError(msg)


def k_after_setting(
    value: object,
    trainer: str,
    *,
    supported: bool,
    refusal: Callable[[], str],
    built: Callable[[], int | None],
) -> int:
    """``value`` as the K a trainer named `trainer` is set to while its graph is built.

    Args:
        value: the K asked for.
        trainer: the trainer's class name (for the messages).
        supported: whether the trainer can run several steps per call.
        refusal: why it cannot (called for the message only).
        built: gives the K its graph is built for already, or None while it is not
            (asked once the K is one the trainer can run).

    Raises:
        TypeError, ValueError: not an int >= 1; K > 1 for a trainer that cannot run it; a
            K other than the one the graph is built for.

    Examples:
        >>> k_after_setting(4, "T", supported=True, refusal=str, built=lambda: None)
        4
        >>> k_after_setting(4, "T", supported=True, refusal=str, built=lambda: 1)
        Traceback (most recent call last):
        ...
        ValueError: steps_per_execution=4: the graph of T is already built for 1 step(s) per call; choose it in setup_graph
    """
    k = check_k(value)
    if k != 1 and not supported:
        msg = (
            f"{trainer} runs one step per session call: "
            f"steps_per_execution={k} is not supported ({refusal()})"
        )
        raise ValueError(msg)
    already = built()
    if already is not None and k != already:
        msg = (
            f"steps_per_execution={k}: the graph of {trainer} is already built "
            f"for {already} step(s) per call; choose it in setup_graph"
        )
        raise ValueError(msg)
    return k


def global_step_increment(graph: Any, k: int) -> tuple[Any, Any]:
    """The global step variable of `graph` (made when missing) and an op adding `k` to it."""
    with graph.as_default():
        gs = tf1.train.get_or_create_global_step()
        with tf1.name_scope("global_step_increment"):
            step = tf1.constant(k, dtype=gs.dtype.base_dtype)
            op = tf1.assign_add(gs, step).op
    return gs, op


def train_k_refusal(k: int, built: int, trainer: str) -> str | None:
    """Why ``train(steps_per_execution=k)`` is refused for a graph built for `built`; None: it is not.

    Examples:
        >>> train_k_refusal(2, 2, "T") is None
        True
    """
    if k == built:
        return None
    return (
        f"train(steps_per_execution={k}): the graph of {trainer} was "
        f"built for {built} step(s) per session call; pass "
        f"steps_per_execution={k} to setup_graph (or TrainConfig), which builds the loop"
    )
