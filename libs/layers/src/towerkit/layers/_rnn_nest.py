"""Nested states of the recurrent cells: flatten, pack and describe tuples of leaves (pure)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple


class LSTMStateTuple(NamedTuple):
    """The state of an LSTM cell: the cell state ``c`` and the output ``h`` (in that order).

    A tuple of two tensors (or two sizes, as a cell's ``state_size``), ordered as
    TensorFlow 1's, so code that unpacks ``c, h = state`` keeps working.

    Examples:
        >>> LSTMStateTuple(c=4, h=3)
        LSTMStateTuple(c=4, h=3)

    .. versionadded:: 0.2
    """

    c: Any
    h: Any

    @property
    def dtype(self) -> Any:
        """The dtype of ``c`` and ``h``.

        Raises:
            TypeError: ``c`` and ``h`` have different dtypes.
        """
        if self.c.dtype != self.h.dtype:
            msg = f"LSTMStateTuple: 'c' and 'h' differ in dtype: {self.c.dtype} and {self.h.dtype}"
            raise TypeError(msg)
        return self.c.dtype


def is_nested(value: Any) -> bool:
    """Whether `value` is a tuple or a list (a named tuple too), not a leaf.

    Examples:
        >>> is_nested((1, 2)), is_nested(LSTMStateTuple(1, 2)), is_nested(3)
        (True, True, False)
    """
    return isinstance(value, (tuple, list))


def flatten(structure: Any) -> list[Any]:
    """The leaves of `structure`, depth first, left to right.

    Examples:
        >>> flatten((LSTMStateTuple(c=1, h=2), 3))
        [1, 2, 3]
        >>> flatten(5)
        [5]
    """
    if not is_nested(structure):
        return [structure]
    out: list[Any] = []
    for item in structure:
        out.extend(flatten(item))
    return out


def _rebuild(structure: Any, items: list[Any]) -> Any:
    if isinstance(structure, list):
        return items
    if hasattr(structure, "_fields"):
        return type(structure)(*items)
    return tuple(items)


def _pack(structure: Any, leaves: Sequence[Any], start: int) -> tuple[Any, int]:
    if not is_nested(structure):
        return leaves[start], start + 1
    items = []
    for item in structure:
        packed, start = _pack(item, leaves, start)
        items.append(packed)
    return _rebuild(structure, items), start


def pack_as(structure: Any, leaves: Sequence[Any]) -> Any:
    """`leaves` arranged as `structure` is (the inverse of `flatten`).

    Raises:
        ValueError: `leaves` does not hold as many leaves as `structure`.

    Examples:
        >>> pack_as((LSTMStateTuple(c=0, h=0), 0), ["c", "h", "x"])
        (LSTMStateTuple(c='c', h='h'), 'x')
    """
    want = len(flatten(structure))
    if want != len(leaves):
        msg = f"pack_as: the structure {describe(structure)} has {want} leaves; got {len(leaves)}"
        raise ValueError(msg)
    return _pack(structure, leaves, 0)[0]


def map_structure(fn: Callable[..., Any], structure: Any, *others: Any) -> Any:
    """`fn` applied to the leaves of `structure` (and the matching leaves of `others`).

    Raises:
        ValueError: an entry of `others` is not shaped as `structure`.

    Examples:
        >>> map_structure(lambda a, b: a + b, (1, LSTMStateTuple(2, 3)), (10, (20, 30)))
        (11, LSTMStateTuple(c=22, h=33))
    """
    flat = flatten(structure)
    rest = []
    for other in others:
        if not same_structure(structure, other):
            msg = (
                f"map_structure: expected the structure {describe(structure)}; "
                f"got {describe(other)}"
            )
            raise ValueError(msg)
        rest.append(flatten(other))
    return pack_as(structure, [fn(*args) for args in zip(flat, *rest, strict=True)])


def same_structure(a: Any, b: Any) -> bool:
    """Whether `a` and `b` nest alike (tuples, lists and named tuples are interchangeable).

    Examples:
        >>> same_structure((1, (2, 3)), [4, LSTMStateTuple(5, 6)])
        True
        >>> same_structure((1, 2), (1, (2, 3)))
        False
    """
    if is_nested(a) != is_nested(b):
        return False
    if not is_nested(a):
        return True
    return len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b, strict=True))


def describe(structure: Any, leaf: Callable[[Any], str] = str) -> str:
    """A one-line text of `structure`, its leaves written by `leaf` (for error messages).

    Examples:
        >>> describe((LSTMStateTuple(c=4, h=3), 5))
        '(LSTMStateTuple(c=4, h=3), 5)'
        >>> describe([1], leaf=lambda n: f"[batch, {n}]")
        '[[batch, 1]]'
    """
    if not is_nested(structure):
        return leaf(structure)
    if hasattr(structure, "_fields"):
        inner = ", ".join(
            f"{k}={describe(v, leaf)}" for k, v in zip(structure._fields, structure, strict=True)
        )
        return f"{type(structure).__name__}({inner})"
    inner = ", ".join(describe(v, leaf) for v in structure)
    if isinstance(structure, list):
        return f"[{inner}]"
    return f"({inner},)" if len(structure) == 1 else f"({inner})"


def derived_seed(seed: int | None, salt: str, index: int) -> int | None:
    """A seed in ``[0, 2**31)`` for one dropout mask, distinct per `salt` and `index`.

    None stays None (TensorFlow picks the seed).

    Examples:
        >>> derived_seed(None, "input", 0) is None
        True
        >>> derived_seed(7, "input", 0) == derived_seed(7, "output", 0)
        False
    """
    if seed is None:
        return None
    return zlib.crc32(f"{seed}:{salt}:{index}".encode()) & 0x7FFFFFFF


def undropped(state: Any) -> Any:
    """`state` with True at the leaves that state dropout skips: every LSTM cell state ``c``.

    Examples:
        >>> undropped((LSTMStateTuple(c="c0", h="h0"), "s1"))
        (LSTMStateTuple(c=True, h=False), False)
    """
    if isinstance(state, LSTMStateTuple):
        return LSTMStateTuple(c=map_structure(lambda _: True, state.c), h=undropped(state.h))
    if is_nested(state):
        return _rebuild(state, [undropped(s) for s in state])
    return False
