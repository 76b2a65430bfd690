"""SwapEMAWeights: run a callback's trigger with the moving averages of the weights in their place."""

from __future__ import annotations

from typing import Any

from towerkit.callbacks._base import Callback, ProxyCallback
from towerkit.callbacks._errors import CallbackError
from towerkit.sessinit import EMA_SUFFIX
from towerkit.towers.compat import tf1


class SwapEMAWeights(ProxyCallback):
    """Run a callback's ``trigger`` (an `InferenceRunner`'s evaluation) with the averaged weights.

    Every variable ``x`` (global, or local as a replicated trainer's tower copies) that has a moving average ``x/ExponentialMovingAverage``
    in the graph (``EMAOptimizer`` of the trainers lib builds them) holds the average
    while the wrapped callback's ``trigger_epoch`` (or ``trigger``, when a
    `PeriodicTrigger` calls it) runs, and gets its own value back after it, whatever
    happens there. The swap reads both sets of values in one session call and assigns
    them in another; training never sees the averages. Its other methods run as usual.

    .. versionadded:: 0.2

    Args:
        callback: the callback to run with the averages as the weights.

    Raises:
        CallbackError: at ``setup_graph``, no variable of the graph has a moving average.
    """

    def __init__(self, callback: Callback) -> None:
        super().__init__(callback)
        self._pairs: list[tuple[Any, Any]] = []
        self._assign: Any = None
        self._feeds: list[Any] = []

    @property
    def averaged(self) -> tuple[str, ...]:
        """The names of the variables swapped (after ``setup_graph``)."""
        return tuple(v.op.name for v, _ in self._pairs)

    def _setup_graph(self) -> None:
        variables = [
            v
            for key in (tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.LOCAL_VARIABLES)
            for v in self.graph.get_collection(key)
        ]
        by_name = {v.op.name: v for v in variables}
        self._pairs = [
            (v, by_name[f"{v.op.name}/{EMA_SUFFIX}"])
            for v in variables
            if f"{v.op.name}/{EMA_SUFFIX}" in by_name
        ]
        if not self._pairs:
            msg = (
                f"SwapEMAWeights({self.cb}): no variable of the graph has a moving average "
                f"'<name>/{EMA_SUFFIX}': train with EMAOptimizer (towerkit.trainers)"
            )
            raise CallbackError(msg)
        ops = []
        with tf1.name_scope("swap"):
            for var, _ in self._pairs:
                ph = tf1.placeholder(var.dtype.base_dtype, var.shape)
                self._feeds.append(ph)
                ops.append(tf1.assign(var, ph).op)
            self._assign = tf1.group(*ops)

    def _swapped(self, run: Any) -> None:
        sess = self.trainer.sess
        weights = [v for v, _ in self._pairs]
        averages = [s for _, s in self._pairs]
        own = sess.run(weights)
        sess.run(self._assign, feed_dict=dict(zip(self._feeds, sess.run(averages), strict=True)))
        try:
            run()
        finally:
            sess.run(self._assign, feed_dict=dict(zip(self._feeds, own, strict=True)))

    def _trigger_epoch(self) -> None:
        self._swapped(self.cb.trigger_epoch)

    def _trigger(self) -> None:
        self._swapped(self.cb.trigger)

    def __str__(self) -> str:
        return f"SwapEMAWeights({self.cb})"
