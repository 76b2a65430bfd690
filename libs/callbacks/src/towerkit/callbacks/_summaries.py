"""Summary callbacks: moving-average updates, merged summaries, simple moving averages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.callbacks._base import Callback
from towerkit.callbacks._graph import fetchable_tensors, tensor_names
from towerkit.callbacks._numbers import whole_number
from towerkit.callbacks._steps import display_name
from towerkit.towers import MOVING_SUMMARY_OPS_KEY
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")


class MovingAverageSummary(Callback):
    """Run the ops that maintain moving averages of summarized tensors, with every step.

    The ops (those `towerkit.towers.add_moving_summary` adds to its collection by
    default) only update the averages' variables; writing the summaries is left to
    other callbacks (`MergeAllSummaries`). With an empty collection the callback
    does nothing.

    Args:
        collection: the collection of the update ops.
        train_op: a training op (or its name). When given, the update ops become
            control dependencies of it, so they run whenever it runs; when None
            they are fetched with every ``hooked_sess.run``.

    Raises:
        TypeError: ``collection`` is not a string, or ``train_op`` not an op, tensor or name.
    """

    def __init__(self, collection: str = MOVING_SUMMARY_OPS_KEY, train_op: Any = None) -> None:
        if not isinstance(collection, str):
            msg = f"'collection' must be a collection name; got {type(collection).__name__}"
            raise TypeError(msg)
        if train_op is not None and not isinstance(train_op, (str, tf.Operation, tf.Tensor)):
            msg = f"'train_op' must be an op, a tensor, an op name or None; got {type(train_op).__name__}"
            raise TypeError(msg)
        self._collection = collection
        self._train_op = train_op
        self._args: Any = None

    def has_hook(self, method: str) -> bool:
        if method == "_before_run":
            return self._train_op is None and self._args is not False
        return super().has_hook(method)

    def _setup_graph(self) -> None:
        ops = self.graph.get_collection(self._collection)
        if not ops:
            # A default callback: a graph without moving averages is normal, not a problem.
            logger.debug(
                "%s: collection %r is empty; no moving average to maintain", self, self._collection
            )
            self._args = False
            return
        update = tf.group(*ops, name="maintain_moving_averages")
        if self._train_op is None:
            self._args = tf1.train.SessionRunArgs(fetches=update)
            return
        target = self.graph.as_graph_element(self._train_op)
        target = target.op if isinstance(target, tf.Tensor) else target
        # The update ops become inputs of the existing training op.
        target._add_control_inputs([update])
        logger.info("%s: %d update op(s) attached to %s", self, len(ops), target.name)

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return self._args or None


def summary_due(local_step: int, steps_per_epoch: int, next_global_step: int, period: int) -> bool:
    """Whether summaries are fetched with the session call about to run.

    They are in the last step of each epoch (0-based ``local_step ==
    steps_per_epoch - 1``) and, when ``period`` > 0, in every call that brings the
    global step to a multiple of ``period``.

    Args:
        local_step: 0-based index of the step in its epoch.
        steps_per_epoch: steps per epoch.
        next_global_step: the global step once the call has run.
        period: an extra period in steps; 0 for none.

    Examples:
        >>> [s for s in range(6) if summary_due(s % 3, 3, s + 1, 0)]
        [2, 5]
        >>> [s for s in range(6) if summary_due(s % 3, 3, s + 1, 2)]
        [1, 2, 3, 5]
    """
    return local_step == steps_per_epoch - 1 or (period > 0 and next_global_step % period == 0)


def _merged_summary(cb: Callback, key: str | None) -> Any:
    merged = tf1.summary.merge_all(key or tf1.GraphKeys.SUMMARIES)
    if merged is None:
        # A default callback: a graph without summaries is normal, not a problem.
        logger.debug("%s: no summary in collection %r; nothing to write", cb, key or "summaries")
    return merged


class _MergeAllSummariesRunWithOp(Callback):
    """Fetch the merged summary with the last step's call of each epoch (and every ``period``)."""

    name_scope = "MergeAllSummaries"

    def __init__(self, period: int, key: str | None) -> None:
        self._period = period
        self._key = key
        self._args: Any = None
        self._set_up = False
        self._stride = 1

    def has_hook(self, method: str) -> bool:
        if method in ("_before_run", "_after_run"):
            return not self._set_up or self._args is not None
        return super().has_hook(method)

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        # fetched with the call that ends an epoch, or a multiple of the period
        if self._period % steps_per_execution:
            return [
                f"MergeAllSummaries(period={self._period}): the period is not a multiple "
                f"of steps_per_execution={steps_per_execution}"
            ]
        return []

    def _before_train(self) -> None:
        self._stride = getattr(self.trainer, "steps_per_execution", 1)

    def _setup_graph(self) -> None:
        merged = _merged_summary(self, self._key)
        self._set_up = True
        self._args = None if merged is None else tf1.train.SessionRunArgs(fetches=merged)

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        t = self.trainer
        if summary_due(t.local_step, t.steps_per_epoch, t.global_step + self._stride, self._period):
            return self._args
        return None

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        if run_values.results is not None:
            self.trainer.monitors.put_summary(tf1.Summary.FromString(run_values.results))

    def __str__(self) -> str:
        return "MergeAllSummaries"


class _MergeAllSummariesRunAlone(Callback):
    """Evaluate the merged summary alone on ``trigger`` (and every ``period`` steps)."""

    name_scope = "MergeAllSummaries"

    def __init__(self, period: int, key: str | None) -> None:
        self._period = period
        self._key = key
        self._merged: Any = None
        self._set_up = False

    def has_hook(self, method: str) -> bool:
        if self._set_up and self._merged is None and method != "_setup_graph":
            return False
        if method == "_trigger_step":
            return self._period > 0
        return super().has_hook(method)

    def _setup_graph(self) -> None:
        self._merged = _merged_summary(self, self._key)
        self._set_up = True

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        if steps_per_execution == 1 or self._merged is None:
            return []
        return [
            "MergeAllSummaries(run_alone=True) evaluates the summaries in a call of their "
            "own, which would run the K-step training loop again; use run_alone=False"
        ]

    def _run(self) -> None:
        if self._merged is not None:
            value = self.trainer.sess.run(self._merged)
            self.trainer.monitors.put_summary(tf1.Summary.FromString(value))

    def _trigger_step(self) -> None:
        if self._period > 0 and self.trainer.global_step % self._period == 0:
            self._run()

    def _trigger(self) -> None:
        self._run()

    def __str__(self) -> str:
        return "MergeAllSummaries"


def MergeAllSummaries(period: int = 0, run_alone: bool = False, key: str | None = None) -> Callback:
    """A callback that evaluates every summary of the graph and puts them to the monitors.

    The summaries of collection ``key`` are merged once (``tf.summary.merge_all``)
    and handed to ``trainer.monitors.put_summary`` as ``tf.compat.v1.Summary``.

    Args:
        period: besides once per epoch, also summarize every ``period`` global
            steps (0: only once per epoch).
        run_alone: False (default): fetch the summaries with the session call of
            the last step of each epoch (and with the call that brings the global
            step to a multiple of ``period``), so summaries that depend on the
            training inputs see a real batch; needed when inputs are fed.
            True: evaluate them alone on every ``trigger`` (after each epoch by
            default) and after every ``period``-th step.
        key: the summary collection; ``tf.compat.v1.GraphKeys.SUMMARIES`` when None.

    Returns:
        The callback.

    Raises:
        TypeError: ``period`` is not an int, or ``key`` not a string.
        ValueError: ``period`` < 0.
    """
    given, period = period, whole_number(period)  # type: ignore[assignment]
    if period is None:
        msg = f"'period' must be an int (steps); got {type(given).__name__} {given!r}"
        raise TypeError(msg)
    if period < 0:
        msg = f"'period' must be >= 0 (0: once per epoch only); got {period}"
        raise ValueError(msg)
    if key is not None and not isinstance(key, str):
        msg = f"'key' must be a collection name or None; got {type(key).__name__}"
        raise TypeError(msg)
    if run_alone:
        return _MergeAllSummariesRunAlone(int(period), key)
    return _MergeAllSummariesRunWithOp(int(period), key)


def window_mean(values: Sequence[Any], window: int) -> np.ndarray:
    """The mean of the last ``window`` rows of ``values`` (all rows when there are fewer).

    Examples:
        >>> window_mean([[1.0, 10.0], [2.0, 20.0], [6.0, 60.0]], 2).tolist()
        [4.0, 40.0]
        >>> window_mean([[3.0]], 5).tolist()
        [3.0]
    """
    arr = np.asarray(values, dtype=np.float64)
    mean: np.ndarray = arr[-window:].mean(axis=0)
    return mean


class SimpleMovingAverage(Callback):
    """Average scalar tensors over a sliding window of steps and put the averages to the monitors.

    The tensors are fetched with every ``hooked_sess.run``; on every ``trigger``
    (after each epoch by default) the mean of their last ``window_size`` values
    goes to ``trainer.monitors.put_scalar`` as ``<name>/SMA`` (the name without
    ``:0``).

    Args:
        tensors: names of scalar tensors.
        window_size: the window, in steps (>= 1).

    Raises:
        TypeError: bad kinds of arguments.
        ValueError: ``tensors`` empty, or ``window_size`` < 1.
    """

    def __init__(self, tensors: str | Sequence[str], window_size: int) -> None:
        self._names = tensor_names(tensors, "tensors")
        given, window_size = window_size, whole_number(window_size)  # type: ignore[assignment]
        if window_size is None:
            msg = f"'window_size' must be an int (steps); got {type(given).__name__} {given!r}"
            raise TypeError(msg)
        if window_size < 1:
            msg = f"'window_size' must be >= 1 (steps); got {window_size}"
            raise ValueError(msg)
        self._window = int(window_size)
        self._stat_names = tuple(f"{display_name(n)}/SMA" for n in self._names)
        self._buffer = np.zeros((self._window, len(self._names)), np.float64)
        self._count = 0
        self._args: Any = None

    @property
    def stat_names(self) -> tuple[str, ...]:
        """The names the averages are put under."""
        return self._stat_names

    def _setup_graph(self) -> None:
        tensors = fetchable_tensors(self, self._names)
        not_scalar = [f"{t.name} {t.shape}" for t in tensors if t.shape.rank not in (0, None)]
        if not_scalar:
            msg = f"{self}: the tensors must be scalars; got {', '.join(not_scalar)}"
            raise ValueError(msg)
        self._args = tf1.train.SessionRunArgs(fetches=tensors)

    def _before_train(self) -> None:
        self._count = 0

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return self._args

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        self._buffer[self._count % self._window] = run_values.results
        self._count += 1

    def averages(self) -> np.ndarray | None:
        """The current averages, one per tensor; None before the first step."""
        if self._count == 0:
            return None
        mean: np.ndarray = self._buffer[: min(self._count, self._window)].mean(axis=0)
        return mean

    def _trigger(self) -> None:
        means = self.averages()
        if means is None:
            return
        for name, value in zip(self._stat_names, means):
            self.trainer.monitors.put_scalar(name, float(value))
