"""A round's inference statistics as flat float64 vectors, summed across the processes of a job.

Each record of `_inference_stats` has a *partial*: a vector of float64 sums whose
element-wise sum over processes is the partial of one process that saw every batch
of every process. A reduced round is: each process takes its partial, the vectors are
summed across the job, and each process turns the sum back into the record. Counts
travel as float64, exact up to 2**53.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from towerkit.callbacks._inference_stats import Confusion, MeanState, Tally


def _vector(vector: Any, size: int, what: str) -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float64)
    if arr.shape != (size,):
        msg = f"the partial of {what} must be a vector of {size} floats; got shape {arr.shape}"
        raise ValueError(msg)
    if not np.all(np.isfinite(arr)):
        msg = f"the partial of {what} must be finite; got {arr.tolist()}"
        raise ValueError(msg)
    return arr


def _count(value: float, field: str, what: str) -> int:
    if value < 0 or value != np.floor(value):
        msg = f"the partial of {what}: {field!r} must be a whole number >= 0; got {float(value)!r}"
        raise ValueError(msg)
    return int(value)


def mean_partial(state: MeanState) -> np.ndarray:
    """The partial of a `MeanState`: its sums, then its count of batches.

    Examples:
        >>> mean_partial(MeanState(sums=(1.0, 2.0), count=3)).tolist()
        [1.0, 2.0, 3.0]
    """
    return np.array([*state.sums, state.count], dtype=np.float64)


def mean_from_partial(vector: Any, size: int) -> MeanState:
    """The `MeanState` of `size` scalars whose partial (maybe summed) is `vector`.

    Summed over processes, it is the mean over all batches of all processes:
    each sum is the sum of the batch values (each batch's mean, for a
    per-batch mean tensor) and the count is the number of batches, both summed.

    Raises:
        ValueError: `vector` is not ``size + 1`` finite floats, or its count is not a
            whole number >= 0.

    Examples:
        >>> mean_from_partial([4.0, 6.0, 2.0], 2)
        MeanState(sums=(4.0, 6.0), count=2)
    """
    arr = _vector(vector, size + 1, "a MeanState")
    return MeanState(sums=arr[:size].tolist(), count=_count(arr[size], "count", "a MeanState"))


def tally_partial(tally: Tally) -> np.ndarray:
    """The partial of a `Tally`: ``[ones, total]``.

    Examples:
        >>> tally_partial(Tally(ones=1, total=4)).tolist()
        [1.0, 4.0]
    """
    return np.array([tally.ones, tally.total], dtype=np.float64)


def tally_from_partial(vector: Any) -> Tally:
    """The `Tally` whose partial (maybe summed) is `vector`.

    Raises:
        ValueError: `vector` is not 2 whole numbers >= 0, or ones exceed the total.

    Examples:
        >>> tally_from_partial([3.0, 8.0])
        Tally(ones=3, total=8)
    """
    arr = _vector(vector, 2, "a Tally")
    ones, total = (_count(v, f, "a Tally") for v, f in zip(arr, ("ones", "total")))
    if ones > total:
        msg = f"the partial of a Tally: 'ones' ({ones}) exceeds 'total' ({total})"
        raise ValueError(msg)
    return Tally(ones=ones, total=total)


_CONFUSION_FIELDS = ("tp", "fp", "fn", "tn")


def confusion_partial(confusion: Confusion) -> np.ndarray:
    """The partial of a `Confusion`: ``[tp, fp, fn, tn]``.

    Examples:
        >>> confusion_partial(Confusion(tp=1, fn=2)).tolist()
        [1.0, 0.0, 2.0, 0.0]
    """
    return np.array([getattr(confusion, f) for f in _CONFUSION_FIELDS], dtype=np.float64)


def confusion_from_partial(vector: Any) -> Confusion:
    """The `Confusion` whose partial (maybe summed) is `vector`.

    Raises:
        ValueError: `vector` is not 4 whole numbers >= 0.

    Examples:
        >>> confusion_from_partial([1, 0, 2, 5])
        Confusion(tp=1, fp=0, fn=2, tn=5)
    """
    arr = _vector(vector, 4, "a Confusion")
    counts = {f: _count(v, f, "a Confusion") for f, v in zip(_CONFUSION_FIELDS, arr)}
    return Confusion(**counts)


def sum_partials(vectors: Sequence[Any]) -> np.ndarray:
    """The element-wise sum of partials of one length: the reduction across processes.

    Raises:
        ValueError: no vector, or vectors of different shapes.

    Examples:
        >>> sum_partials([[1.0, 2.0], [3.0, 4.0]]).tolist()
        [4.0, 6.0]
    """
    arrays = [np.asarray(v, dtype=np.float64) for v in vectors]
    if not arrays:
        msg = "sum_partials needs at least one vector; got none"
        raise ValueError(msg)
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) != 1 or arrays[0].ndim != 1:
        msg = f"the partials must be vectors of one length; got shapes {shapes}"
        raise ValueError(msg)
    return np.asarray(np.sum(arrays, axis=0, dtype=np.float64))


def join_partials(parts: Sequence[Any]) -> tuple[np.ndarray, tuple[int, ...]]:
    """One vector of several partials (one per inferencer), and each one's length.

    Examples:
        >>> vector, lengths = join_partials([[1.0], [2.0, 3.0]])
        >>> vector.tolist(), lengths
        ([1.0, 2.0, 3.0], (1, 2))
    """
    arrays = [np.asarray(p, dtype=np.float64).reshape(-1) for p in parts]
    lengths = tuple(a.size for a in arrays)
    joined = np.concatenate(arrays) if arrays else np.zeros(0, np.float64)
    return joined, lengths


def split_partials(vector: Any, lengths: Sequence[int]) -> list[np.ndarray]:
    """The partials that `join_partials` joined into `vector` (of these lengths).

    Raises:
        ValueError: `vector` is not as long as the lengths together.

    Examples:
        >>> [p.tolist() for p in split_partials([1.0, 2.0, 3.0], (1, 2))]
        [[1.0], [2.0, 3.0]]
    """
    arr = np.asarray(vector, dtype=np.float64).reshape(-1)
    if arr.size != sum(lengths):
        msg = (
            f"a joined partial of lengths {tuple(lengths)} has {sum(lengths)} floats; "
            f"got {arr.size}"
        )
        raise ValueError(msg)
    bounds = itertools.accumulate(lengths, initial=0)
    return [arr[a:b] for a, b in itertools.pairwise(bounds)]
