"""What inference runners read: their kinds of input, checked, and rounds over an input source."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.callbacks._base import Callback
from towerkit.callbacks._datapoints import DatapointLayout, conform_datapoint, input_kind
from towerkit.callbacks._errors import StopTraining
from towerkit.callbacks._hooked import HookedSession
from towerkit.callbacks._inferencers import Inferencer
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")


def _check_size(size: Any) -> int | None:
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        msg = f"'size' must be a number of batches (an int >= 1) or None; got {type(size).__name__}"
        raise TypeError(msg)
    if size < 1:
        msg = f"'size' must be a number of batches >= 1 or None; got {size}"
        raise ValueError(msg)
    return int(size)


def _dataset_cardinality(dataset: tf.data.Dataset) -> int | None:
    """The cardinality of a dataset built in a graph that can still change, or None.

    ``tf.data.INFINITE_CARDINALITY`` and ``tf.data.UNKNOWN_CARDINALITY`` come back as
    they are; None when it cannot be computed (the dataset reads a placeholder, say).
    It runs in a short-lived CPU-only session on the dataset's graph.
    """
    variant = dataset._variant_tensor
    try:
        if not tf.is_symbolic_tensor(variant):
            return int(dataset.cardinality())
        graph = variant.graph
        if graph.finalized:
            return None
        with graph.as_default():
            card = dataset.cardinality()
        config = tf1.ConfigProto(device_count={"GPU": 0})
        with tf1.Session(graph=graph, config=config) as sess:
            return int(sess.run(card))
    except (tf.errors.OpError, RuntimeError, ValueError) as err:
        logger.debug("cannot compute the cardinality of a dataset: %s", err)
        return None


def _check_infs(infs: Any) -> tuple[Inferencer, ...]:
    items = [infs] if isinstance(infs, Inferencer) else infs
    if not isinstance(items, (list, tuple)):
        msg = f"'infs' must be an Inferencer or a list of them; got {type(infs).__name__}"
        raise TypeError(msg)
    bad = [
        f"#{i}: {type(x).__name__}" for i, x in enumerate(items) if not isinstance(x, Inferencer)
    ]
    if bad:
        msg = f"'infs' must hold Inferencer instances; entries at fault: {', '.join(bad)}"
        raise TypeError(msg)
    if not items:
        msg = "'infs' is empty: expected at least one Inferencer"
        raise ValueError(msg)
    return tuple(items)


def _input_kind(input: Any) -> str:
    """What `input` of a runner is: ``dataset``, ``builder``, ``source`` or ``python``.

    Raises:
        TypeError: none of these, or a one-pass iterator.
    """
    kind = input_kind(input)
    if kind is None:
        msg = (
            "'input' must be a tf.data.Dataset, a function of no argument building one, an "
            "InputSource (e.g. FeedInput), or a re-iterable of datapoints (a list, or an "
            f"object with __iter__ and __len__); got {type(input).__name__}"
        )
        raise TypeError(msg)
    if kind != "iterable":
        return kind
    if iter(input) is input:
        msg = (
            f"'input' is an iterator ({type(input).__name__}): it could run only one round of "
            "inference; give a re-iterable (a list, or an object whose __iter__ starts over)"
        )
        raise TypeError(msg)
    return "python"


class _SourceRounds:
    """Rounds of inference over an input source, driven by its own callbacks.

    A round runs ``source.size()`` batches through a hooked session holding the
    source's callbacks (which initialize its iterator or feed its placeholders); the
    source is not restarted between rounds, so a round is one pass when ``size()`` is
    a pass. A source that ends (``StopTraining`` from a finite feed, or the end of a
    dataset) ends the round; when it ends at the first batch of a round, its
    callbacks' ``before_train`` restarts it once.
    """

    def __init__(self, source: Any, runner: Callback, limit: int | None = None) -> None:
        self.source = source
        self._limit = limit
        self._runner = runner
        self._cbs: list[Callback] = []
        self._hooked: Any = None
        self.size = 0

    def setup(self, signature: Sequence[tf.TensorSpec]) -> None:
        """Set the source up (before the towers take its tensors)."""
        self.source.setup(signature)

    def attach(self, trainer: Any) -> None:
        """Make and set up the source's callbacks, once every tower took its tensors."""
        try:
            size = self.source.size()
        except TypeError as err:
            if self._limit is None:
                msg = (
                    f"{self._runner}: a round of inference runs size() batches of its input, "
                    f"but the size of {self.source} is unknown or infinite ({err}); give a "
                    "source of known size, or the runner size=n to run n batches per round"
                )
                raise ValueError(msg) from err
            size = self._limit
        self.size = int(size) if self._limit is None else min(int(size), self._limit)
        self._cbs = list(self.source.get_callbacks())
        for cb in self._cbs:
            cb.setup_graph(trainer)

    def start(self, sess: Any) -> None:
        """Before training: the hooked session, and the callbacks' ``before_train``."""
        self._hooked = HookedSession(sess, self._cbs)
        for cb in self._cbs:
            cb.before_train()

    def finish(self) -> None:
        """After training: the callbacks' ``after_train``."""
        for cb in self._cbs:
            cb.after_train()

    def run(self, fetches: Any) -> Iterator[Any]:
        """The values of `fetches` for each batch of one round."""
        restarted = False
        done = 0
        while done < self.size:
            try:
                values = self._hooked.run(fetches)
            except (StopTraining, tf.errors.OutOfRangeError):
                if done > 0 or restarted:
                    return
                restarted = True
                for cb in self._cbs:
                    cb.before_train()
                continue
            done += 1
            yield values


def _check_tower_func(tower_func: Any) -> Any:
    if tower_func is not None and not (
        callable(tower_func) and hasattr(tower_func, "input_signature")
    ):
        msg = (
            "'tower_func' must be a towerkit.towers.TowerFunc (callable, with an input_signature) "
            f"or None; got {type(tower_func).__name__}"
        )
        raise TypeError(msg)
    return tower_func


def _dataset_inputs(element: Any, signature: Sequence[tf.TensorSpec]) -> list[Any]:
    """The tensors of a dataset element in the order of ``signature``."""
    names = [s.name for s in signature]
    if isinstance(element, dict):
        missing = [n for n in names if n not in element]
        if missing:
            msg = f"the dataset's elements lack the inputs {missing} of the input signature {names}"
            raise ValueError(msg)
        return [element[n] for n in names]
    flat = list(element) if isinstance(element, (tuple, list)) else [element]
    if len(flat) != len(signature):
        msg = (
            f"the dataset's elements have {len(flat)} component(s); the input signature "
            f"has {len(signature)}: {names}"
        )
        raise ValueError(msg)
    return flat


def _datapoint_values(dp: Any, index: int, layout: DatapointLayout) -> list[Any]:
    """The arrays of a Python datapoint, checked against ``layout``.

    The check is the one datapoint rule the trainers' inputs also follow (`conform_datapoint`).
    """
    try:
        return list(conform_datapoint(dp, layout))
    except ValueError as err:
        msg = f"datapoint #{index} (0-based) does not fit the input signature ({layout}): {err}"
        raise ValueError(msg) from None
