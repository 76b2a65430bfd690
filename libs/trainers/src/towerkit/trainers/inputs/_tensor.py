"""`TensorInput`: input tensors built by a function of the program, in each tower."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from towerkit.callbacks.plumbing import whole_number
from towerkit.trainers.inputs._base import InputSource


class TensorInput(InputSource):
    """Input from tensors that a function of the program builds, one call per tower.

    For data that is already in the graph: a reader, a queue, a generator op of the
    program's own. `get_tensor_fn` is called with no argument under each tower's name
    scope and returns that tower's input tensors, in signature order, which are checked
    against the signature (dtype and shape). Every run of the tensors must give the next
    batch; the source itself moves no data and gives no callback.

    Args:
        get_tensor_fn: a function of no argument returning a list or tuple of tensors.
        size: steps in one epoch, or None when unknown (then give ``steps_per_epoch``).

    Raises:
        TypeError: `get_tensor_fn` is not callable, or `size` is not an int.
        ValueError: `size` is below 1.
    """

    def __init__(self, get_tensor_fn: Callable[[], Sequence[Any]], size: int | None = None) -> None:
        if not callable(get_tensor_fn):
            msg = (
                "'get_tensor_fn' must be a function of no argument returning the input "
                f"tensors; got {type(get_tensor_fn).__name__}"
            )
            raise TypeError(msg)
        if size is not None:
            given, size = size, whole_number(size)
            if size is None:  # tensorpack took int(size): '100' and 100.0 too
                msg = f"'size' must be an int or None; got {type(given).__name__} {given!r}"
                raise TypeError(msg)
            if size < 1:
                msg = f"'size' must be at least 1 (steps in one epoch); got {size}"
                raise ValueError(msg)
        self._fn = get_tensor_fn
        self._steps = size

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        del specs  # the tensors are checked against them when each tower takes them

    def _get_input_tensors(self) -> list[tf.Tensor]:
        tensors = self._fn()
        if not isinstance(tensors, (list, tuple)):
            msg = (
                f"{self}: get_tensor_fn must return a list or tuple of tensors, one per "
                f"input; got {type(tensors).__name__}"
            )
            raise TypeError(msg)
        return [tf.convert_to_tensor(t) for t in tensors]

    def _size(self) -> int | None:
        return self._steps

    def __str__(self) -> str:
        return f"TensorInput({getattr(self._fn, '__name__', type(self._fn).__name__)})"
