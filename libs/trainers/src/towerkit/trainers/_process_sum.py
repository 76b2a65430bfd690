"""Sums of float64 vectors across a job's processes: the hook reducing inference runners use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ProcessSumFn = Callable[[np.ndarray], np.ndarray]
"""Takes this process's float64 vector; returns the element-wise sum over the job's processes."""


def sum_vector(vector: Any, name: str) -> np.ndarray:
    """`vector` as a 1-D float64 array, checked for a sum named `name`.

    Raises:
        ValueError: `vector` is not one-dimensional.

    Examples:
        >>> sum_vector([1, 2], "s").tolist()
        [1.0, 2.0]
    """
    arr = np.asarray(vector, dtype=np.float64)
    if arr.ndim != 1:
        msg = f"the process sum {name!r} takes a vector (1-D); got shape {arr.shape}"
        raise ValueError(msg)
    return arr


class ProcessSum:
    """The trainer's ``make_process_sum``: a one-process trainer's sum is the vector itself."""

    def make_process_sum(self, name: str) -> ProcessSumFn:
        """A function summing a float64 vector across the job's processes, built now.

        Callbacks call it in ``setup_graph`` (a collective is an op, built before the
        graph is finalized), with a `name` of their own that is the same on every
        process, and call the function it returns during the loop, on every process, in
        the same order. This trainer runs one process: the sum is the vector itself.

        Args:
            name: the sum's name (an op name in multi-process trainers).

        Raises:
            ValueError: `name` is empty.

        .. versionadded:: 0.2
        """
        check_sum_name(name)
        return lambda vector: sum_vector(vector, name).copy()


def check_sum_name(name: Any) -> str:
    """`name`, checked to be a non-empty string fit for an op name.

    Raises:
        ValueError: it is not.

    Examples:
        >>> check_sum_name("inference_sum_InferenceTower")
        'inference_sum_InferenceTower'
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        msg = f"a process sum's 'name' must be a non-empty string of [A-Za-z0-9_.-]; got {name!r}"
        raise ValueError(msg)
    return name
