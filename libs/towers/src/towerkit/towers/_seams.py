"""The callable seam of the towers lib, named: the tower function."""

from __future__ import annotations

from typing import Any, Protocol


class TowerFn(Protocol):
    """A tower function: it builds one tower's graph from the tower's input tensors.

    `TowerFunc` wraps one with its input signature and calls it once per tower,
    inside a `TowerContext`, with one tensor per input spec; what it returns is the
    tower's (a training tower returns its cost). ``ModelDesc.build_graph`` is one, and
    so is any function or callable object taking the inputs positionally.

    Examples:
        >>> def cost(x, y):
        ...     return x
        >>> fn: TowerFn = cost
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Build the tower from its inputs; return what the tower gives."""
