"""The pure statistics of inference: running means, tallies and confusion counts, without TensorFlow."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np


def _as_tuple_of_floats(values: Iterable[Any]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


@attrs.frozen(kw_only=True)
class MeanState:
    """Running sums of some scalars over batches, for their mean over batches.

    Attributes:
        sums: the sum of each scalar over the batches seen.
        count: batches seen.
    """

    sums: tuple[float, ...] = attrs.field(converter=_as_tuple_of_floats)
    count: int = attrs.field(default=0, validator=attrs.validators.ge(0))


def mean_add(state: MeanState, values: Sequence[Any]) -> MeanState:
    """``state`` with one more batch of scalar ``values`` (one per sum).

    Raises:
        ValueError: a value is not a scalar, or the number of values differs from the sums'.

    Examples:
        >>> s = mean_add(mean_add(MeanState(sums=(0, 0)), [1.0, 2.0]), [3, 4])
        >>> s, mean_values(s)
        (MeanState(sums=(4.0, 6.0), count=2), (2.0, 3.0))
    """
    if len(values) != len(state.sums):
        msg = f"expected {len(state.sums)} values, one per statistic; got {len(values)}"
        raise ValueError(msg)
    arrays = [np.asarray(v) for v in values]
    not_scalar = [f"#{i}: shape {a.shape}" for i, a in enumerate(arrays) if a.size != 1]
    if not_scalar:
        msg = f"the values must be scalars; got {', '.join(not_scalar)}"
        raise ValueError(msg)
    return MeanState(
        sums=[s + float(a.reshape(())) for s, a in zip(state.sums, arrays)], count=state.count + 1
    )


def mean_values(state: MeanState) -> tuple[float, ...]:
    """The mean of each scalar over the batches seen (NaN before any batch).

    Examples:
        >>> mean_values(MeanState(sums=(3.0,), count=2))
        (1.5,)
    """
    if state.count == 0:
        return tuple(float("nan") for _ in state.sums)
    return tuple(s / state.count for s in state.sums)


@attrs.frozen(kw_only=True)
class Tally:
    """Counts of ones among the entries of 0/1 vectors seen so far.

    Attributes:
        ones: entries equal to 1 (true, nonzero).
        total: entries seen.
    """

    ones: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    total: int = attrs.field(default=0, validator=attrs.validators.ge(0))


def tally_add(tally: Tally, vector: Any) -> Tally:
    """``tally`` with the entries of one more 0/1 (or boolean) vector of any length.

    Examples:
        >>> tally_add(tally_add(Tally(), [1, 0, 0]), [True])
        Tally(ones=2, total=4)
    """
    arr = np.asarray(vector).reshape(-1)
    return Tally(ones=tally.ones + int(np.count_nonzero(arr)), total=tally.total + arr.size)


def tally_ratio(tally: Tally) -> float:
    """The fraction of ones among all entries seen (NaN when none were seen).

    Batches of uneven sizes weigh by their sizes, so this is the true fraction
    over the whole data, not a mean of per-batch fractions.

    Examples:
        >>> tally_ratio(Tally(ones=1, total=4))
        0.25
    """
    return tally.ones / tally.total if tally.total else float("nan")


@attrs.frozen(kw_only=True)
class Confusion:
    """The confusion counts of binary predictions against binary labels.

    Attributes:
        tp: predicted 1, label 1.
        fp: predicted 1, label 0.
        fn: predicted 0, label 1.
        tn: predicted 0, label 0.
    """

    tp: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    fp: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    fn: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    tn: int = attrs.field(default=0, validator=attrs.validators.ge(0))


def confusion_add(confusion: Confusion, pred: Any, label: Any) -> Confusion:
    """``confusion`` with one more batch of 0/1 predictions and labels (nonzero means 1).

    Raises:
        ValueError: ``pred`` and ``label`` have different numbers of entries.

    Examples:
        >>> confusion_add(Confusion(), [1, 1, 0, 0], [1, 0, 1, 0])
        Confusion(tp=1, fp=1, fn=1, tn=1)
    """
    p = np.asarray(pred).reshape(-1) != 0
    y = np.asarray(label).reshape(-1) != 0
    if p.size != y.size:
        msg = f"predictions and labels must have as many entries; got {p.size} and {y.size}"
        raise ValueError(msg)
    return Confusion(
        tp=confusion.tp + int(np.count_nonzero(p & y)),
        fp=confusion.fp + int(np.count_nonzero(p & ~y)),
        fn=confusion.fn + int(np.count_nonzero(~p & y)),
        tn=confusion.tn + int(np.count_nonzero(~p & ~y)),
    )


def precision_recall(confusion: Confusion) -> tuple[float, float]:
    """Precision ``tp / (tp + fp)`` and recall ``tp / (tp + fn)``; 0.0 where undefined.

    Examples:
        >>> precision_recall(Confusion(tp=3, fp=1, fn=2, tn=9))
        (0.75, 0.6)
        >>> precision_recall(Confusion(tn=5))
        (0.0, 0.0)
    """
    predicted = confusion.tp + confusion.fp
    actual = confusion.tp + confusion.fn
    return (
        confusion.tp / predicted if predicted else 0.0,
        confusion.tp / actual if actual else 0.0,
    )


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of ``size`` items; the last one may be shorter.

    Examples:
        >>> list(chunks(range(5), 2))
        [[0, 1], [2, 3], [4]]
    """
    if size < 1:
        msg = f"'size' must be >= 1; got {size}"
        raise ValueError(msg)
    group: list[Any] = []
    for item in items:
        group.append(item)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group
