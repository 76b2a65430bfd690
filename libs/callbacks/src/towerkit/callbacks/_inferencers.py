"""The inferencers: callbacks a runner drives over a round of inference (their pure statistics are in `_inference_stats`)."""

from __future__ import annotations

import abc
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from towerkit.callbacks._base import Callback
from towerkit.callbacks._graph import tensor_names
from towerkit.callbacks._inference_partials import (
    confusion_from_partial,
    confusion_partial,
    mean_from_partial,
    mean_partial,
    tally_from_partial,
    tally_partial,
)
from towerkit.callbacks._inference_stats import (
    Confusion,
    MeanState,
    Tally,
    confusion_add,
    mean_add,
    mean_values,
    precision_recall,
    tally_add,
    tally_ratio,
)
from towerkit.towers import get_op_tensor_name

logger = logging.getLogger("towerkit.callbacks")


class Inferencer(Callback, metaclass=abc.ABCMeta):
    """A callback that an inference runner drives over a round of inference.

    A runner calls ``before_inference``, then for every batch ``on_fetches``
    with the values of the tensors named by ``get_fetches``, then
    ``after_inference``, whose dict of scalar statistics goes to the monitors.
    Subclasses implement ``_get_fetches`` and ``_on_fetches``, and usually
    ``_before_inference`` and ``_after_inference``.

    An inferencer whose round can be summed across the processes of a job (a runner
    given ``reduce=True``) also implements ``_partial`` and ``_from_partial``: between
    the last ``on_fetches`` and ``after_inference`` the runner takes ``partial()`` on
    every process, sums the vectors across the job, and gives the sum to
    ``from_partial``; ``after_inference`` then reports the statistics of all processes.
    """

    @property
    def reducible(self) -> bool:
        """Whether its round can be summed across processes (it implements the partials).

        .. versionadded:: 0.2
        """
        cls = type(self)
        return cls._partial is not Inferencer._partial and (
            cls._from_partial is not Inferencer._from_partial
        )

    def partial(self) -> np.ndarray:
        """This round's sufficient statistics so far, as a flat float64 vector.

        The vectors of processes that each saw some of the batches sum to the vector of
        one process that saw them all (see `towerkit.callbacks.sum_partials`).

        Raises:
            TypeError: the inferencer does not implement the partials (`reducible`).

        .. versionadded:: 0.2
        """
        return np.asarray(self._partial(), dtype=np.float64).reshape(-1)

    def from_partial(self, vector: Any) -> None:
        """Replace this round's statistics with those of a (summed) partial `vector`.

        Raises:
            TypeError: the inferencer does not implement the partials (`reducible`).
            ValueError: `vector` is not a partial of this inferencer.

        .. versionadded:: 0.2
        """
        self._from_partial(np.asarray(vector, dtype=np.float64))

    def _partial(self) -> Any:
        msg = (
            f"{self} ({type(self).__name__}) cannot be summed across processes: it does not "
            "implement '_partial' and '_from_partial'"
        )
        raise TypeError(msg)

    def _from_partial(self, vector: np.ndarray) -> None:
        del vector
        self._partial()

    def before_inference(self) -> None:
        """Called before a round of inference."""
        self._before_inference()

    def after_inference(self) -> dict[str, float] | None:
        """Called after a round of inference; returns scalar statistics by name (or None)."""
        return self._after_inference()

    def get_fetches(self) -> list[str]:
        """The tensor names this inferencer needs (op names become their output ``:0``)."""
        names = self._get_fetches()
        return [get_op_tensor_name(n)[1] for n in tensor_names(names, "get_fetches()")]

    def on_fetches(self, results: list[Any]) -> None:
        """Called after each batch with one value per name of ``get_fetches``, in order."""
        self._on_fetches(results)

    def _before_inference(self) -> None:
        pass

    def _after_inference(self) -> dict[str, float] | None:
        return None

    @abc.abstractmethod
    def _get_fetches(self) -> Sequence[str]:
        """The tensor names to fetch with every batch."""

    @abc.abstractmethod
    def _on_fetches(self, results: list[Any]) -> None:
        """Take the values of one batch."""


class ScalarStats(Inferencer):
    """The mean over batches of some scalar tensors.

    Each statistic is put as ``<prefix>_<name>`` (``<name>`` alone when ``prefix``
    is empty), the name without ``:0``. A mean of per-batch accuracies is not the
    accuracy over the data when batches differ in size: see `ClassificationError`.
    Summed across processes (a runner's ``reduce=True``), the statistic is the mean
    over all batches of all processes: the sums of the batch values and the counts of
    batches are summed, then divided.

    Args:
        names: a name or a list of names of scalar tensors.
        prefix: the statistics' prefix.

    Raises:
        TypeError: ``names`` is not a name or list of names, or ``prefix`` not a string.
        ValueError: ``names`` is empty.
    """

    def __init__(self, names: str | Sequence[str], prefix: str = "validation") -> None:
        self._names = tensor_names(names)
        if not isinstance(prefix, str):
            msg = f"'prefix' must be a string; got {type(prefix).__name__}"
            raise TypeError(msg)
        self._prefix = prefix
        self._state = MeanState(sums=[0.0] * len(self._names))

    @property
    def stat_names(self) -> tuple[str, ...]:
        """The names the means are put under."""
        short = [get_op_tensor_name(n)[0] if n.endswith(":0") else n for n in self._names]
        return tuple(f"{self._prefix}_{n}" if self._prefix else n for n in short)

    def _get_fetches(self) -> Sequence[str]:
        return self._names

    def _before_inference(self) -> None:
        self._state = MeanState(sums=[0.0] * len(self._names))

    def _on_fetches(self, results: list[Any]) -> None:
        self._state = mean_add(self._state, results)

    def _after_inference(self) -> dict[str, float]:
        return dict(zip(self.stat_names, mean_values(self._state)))

    def _partial(self) -> np.ndarray:
        return mean_partial(self._state)

    def _from_partial(self, vector: np.ndarray) -> None:
        self._state = mean_from_partial(vector, len(self._names))


class ClassificationError(Inferencer):
    """The true classification error over the data, from a 0/1 "wrong" vector per batch.

    The vector holds, for each sample of the batch, whether it is misclassified
    (``tf.logical_not(tf.nn.in_top_k(...))`` gives one). Counting misclassified
    samples over all samples gives the true error even when the last batch is
    smaller, which a mean of per-batch error rates (``ScalarStats``) does not. Given
    a "correct" vector instead, the statistic is the accuracy.

    Args:
        wrong_tensor_name: the name of the 0/1 vector.
        summary_name: the statistic's name.
    """

    def __init__(
        self, wrong_tensor_name: str = "incorrect_vector", summary_name: str = "validation_error"
    ) -> None:
        (self._name,) = tensor_names(wrong_tensor_name, "wrong_tensor_name")
        if not isinstance(summary_name, str) or not summary_name:
            msg = f"'summary_name' must be a non-empty string; got {summary_name!r}"
            raise ValueError(msg)
        self._summary = summary_name
        self._tally = Tally()

    def _get_fetches(self) -> Sequence[str]:
        return [self._name]

    def _before_inference(self) -> None:
        self._tally = Tally()

    def _on_fetches(self, results: list[Any]) -> None:
        (vector,) = results
        self._tally = tally_add(self._tally, vector)

    def _after_inference(self) -> dict[str, float]:
        if self._tally.total == 0:
            logger.warning("%s: no sample seen in this round of inference", self)
            return {}
        return {self._summary: tally_ratio(self._tally)}

    def _partial(self) -> np.ndarray:
        return tally_partial(self._tally)

    def _from_partial(self, vector: np.ndarray) -> None:
        self._tally = tally_from_partial(vector)


class BinaryClassificationStats(Inferencer):
    """Precision and recall of binary predictions against binary labels, over the data.

    They are put as ``<prefix>_precision`` and ``<prefix>_recall``; each is 0.0
    when undefined (no positive prediction, no positive label).

    Args:
        pred_tensor_name: the name of the 0/1 prediction tensor.
        label_tensor_name: the name of the 0/1 label tensor.
        prefix: the statistics' prefix.
    """

    def __init__(self, pred_tensor_name: str, label_tensor_name: str, prefix: str = "val") -> None:
        (self._pred,) = tensor_names(pred_tensor_name, "pred_tensor_name")
        (self._label,) = tensor_names(label_tensor_name, "label_tensor_name")
        if not isinstance(prefix, str):
            msg = f"'prefix' must be a string; got {type(prefix).__name__}"
            raise TypeError(msg)
        self._prefix = prefix
        self._confusion = Confusion()

    def _get_fetches(self) -> Sequence[str]:
        return [self._pred, self._label]

    def _before_inference(self) -> None:
        self._confusion = Confusion()

    def _on_fetches(self, results: list[Any]) -> None:
        pred, label = results
        self._confusion = confusion_add(self._confusion, pred, label)

    def _after_inference(self) -> dict[str, float]:
        precision, recall = precision_recall(self._confusion)
        return {f"{self._prefix}_precision": precision, f"{self._prefix}_recall": recall}

    def _partial(self) -> np.ndarray:
        return confusion_partial(self._confusion)

    def _from_partial(self, vector: np.ndarray) -> None:
        self._confusion = confusion_from_partial(vector)
