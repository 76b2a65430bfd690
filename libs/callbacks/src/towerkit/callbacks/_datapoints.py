"""The input vocabulary: what kind an input is, and whether a Python datapoint fits a signature.

The one rule for training inputs (the trainers' Python-fed sources) and inference
inputs (the inference runners' datapoints) alike: a component may be cast within its
kind, never across (a float is refused for an integer input, in both places). And one
answer to "what is this input?" (`input_kind`) for `TrainConfig`, a trainer's default
input and the inference runners.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

__all__ = [
    "INPUT_KINDS",
    "INPUT_SOURCE_METHODS",
    "DatapointLayout",
    "cast_component",
    "conform_datapoint",
    "datapoint_tuple",
    "describe_value",
    "input_kind",
    "timeout_message",
]

INPUT_SOURCE_METHODS = ("setup", "get_input_tensors", "get_callbacks", "size")
"""The methods of the input-source protocol (`towerkit.trainers.InputSource`)."""

INPUT_KINDS = ("source", "dataset", "builder", "iterable")
"""The kinds of input `input_kind` tells apart, in the order it tries them."""


def _is_dataset(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")  # not loaded: nothing is a dataset, and none is loaded here
    return tf is not None and isinstance(value, tf.data.Dataset)


def input_kind(value: Any) -> str | None:
    """What kind of input `value` is, or None when it is none of `INPUT_KINDS`.

    - ``source``: it follows the input-source protocol (``INPUT_SOURCE_METHODS``);
    - ``dataset``: a ``tf.data.Dataset``;
    - ``builder``: a function (a callable that is not iterable), taken to build a dataset;
    - ``iterable``: any other iterable of datapoints (a DataFlow, a list) except a
      string, bytes or a numpy array (which are one value, not datapoints).

    Whether an iterable can be iterated more than once is each reader's own check.

    Examples:
        >>> input_kind([([1.0], [0]), ([2.0], [1])])
        'iterable'
        >>> input_kind(lambda: None)
        'builder'
        >>> input_kind("data.npz") is None
        True
    """
    if all(callable(getattr(value, m, None)) for m in INPUT_SOURCE_METHODS):
        return "source"
    if _is_dataset(value):
        return "dataset"
    if isinstance(value, (str, bytes)) or type(value).__module__ == "numpy":
        return None
    if isinstance(value, Iterable):
        return "iterable"
    if callable(value):
        return "builder"
    return None


_TEXT_KINDS = frozenset("USO")
_NUMERIC_KINDS = frozenset("biuf")
"""numpy dtype kinds a string input (object dtype) accepts: str, bytes, object."""


def datapoint_tuple(datapoint: Any, names: Sequence[str]) -> tuple[Any, ...]:
    """A datapoint as a tuple in signature order.

    A datapoint is a sequence with one component per name, in the same order, or a
    mapping from each name to its component (extra keys are ignored).

    Raises:
        ValueError: a wrong number of components, or missing names.
        TypeError: neither a sequence nor a mapping.

    Examples:
        >>> datapoint_tuple([1, 2], ["x", "y"])
        (1, 2)
        >>> datapoint_tuple({"y": 2, "x": 1, "id": 7}, ["x", "y"])
        (1, 2)
        >>> datapoint_tuple([1], ["x", "y"])
        Traceback (most recent call last):
        ...
        ValueError: datapoint has 1 component(s); the input signature ('x', 'y') needs 2
    """
    if isinstance(datapoint, Mapping):
        missing = [n for n in names if n not in datapoint]
        if missing:
            msg = f"datapoint lacks {missing}; it has keys {sorted(map(str, datapoint))}"
            raise ValueError(msg)
        return tuple(datapoint[n] for n in names)
    if isinstance(datapoint, (str, bytes)) or not isinstance(datapoint, (Sequence, np.ndarray)):
        msg = (
            f"a datapoint must be a list/tuple with one component per input "
            f"{tuple(names)} or a dict keyed by them; got {type(datapoint).__name__}"
        )
        raise TypeError(msg)
    if len(datapoint) != len(names):
        msg = (
            f"datapoint has {len(datapoint)} component(s); the input signature "
            f"{tuple(names)} needs {len(names)}"
        )
        raise ValueError(msg)
    return tuple(datapoint)


def _to_dtype(value: Any) -> np.dtype:
    dtype: np.dtype = np.dtype(value)
    return dtype


def _to_dtypes(value: Any) -> tuple[np.dtype, ...]:
    return tuple(map(_to_dtype, value))


def _to_shapes(value: Any) -> tuple[tuple[int | None, ...] | None, ...]:
    return tuple(
        None if s is None else tuple(None if d is None else int(d) for d in s) for s in value
    )


def _fmt(dtype: np.dtype, shape: tuple[int | None, ...] | None) -> str:
    name = "string" if dtype.kind == "O" else dtype.name
    return f"{name}<unknown rank>" if shape is None else f"{name}{shape}"


@attrs.frozen(kw_only=True)
class DatapointLayout:
    """What each component of a datapoint must be: its name, numpy dtype and shape.

    Attributes:
        names: the input names, in signature order.
        dtypes: the numpy dtype of each input (``object`` for a string input).
        shapes: the shape of each input: a tuple with ``None`` for an unknown
            dimension, or ``None`` for an unknown rank.

    Examples:
        >>> layout = DatapointLayout(names=["x", "y"], dtypes=["float32", "int32"],
        ...                          shapes=[(None, 2), (None,)])
        >>> str(layout)
        'x: float32(None, 2), y: int32(None,)'
    """

    names: tuple[str, ...] = attrs.field(converter=tuple)
    dtypes: tuple[np.dtype, ...] = attrs.field(converter=_to_dtypes)
    shapes: tuple[tuple[int | None, ...] | None, ...] = attrs.field(converter=_to_shapes)

    @names.validator
    def _check(self, attribute: Any, value: tuple[str, ...]) -> None:
        del attribute
        if not (len(value) == len(self.dtypes) == len(self.shapes)):
            msg = (
                f"'names', 'dtypes' and 'shapes' must have one entry per input; got "
                f"{len(value)}, {len(self.dtypes)} and {len(self.shapes)}"
            )
            raise ValueError(msg)

    @classmethod
    def from_specs(cls, specs: Sequence[Any]) -> DatapointLayout:
        """The layout of named ``tf.TensorSpec``s."""
        return cls(
            names=[s.name for s in specs],
            dtypes=[s.dtype.as_numpy_dtype for s in specs],
            shapes=[None if s.shape.rank is None else tuple(s.shape.as_list()) for s in specs],
        )

    def __str__(self) -> str:
        return ", ".join(
            f"{n}: {_fmt(d, s)}" for n, d, s in zip(self.names, self.dtypes, self.shapes)
        )


def describe_value(value: Any) -> str:
    """What a datapoint component is, in the words of `DatapointLayout`: dtype and shape.

    Examples:
        >>> describe_value(np.zeros([3, 2], np.float64))
        'float64(3, 2)'
        >>> describe_value([1, 2])
        'int64(2,)'
        >>> describe_value(["a", "b"])
        'string(2,)'
        >>> describe_value(None)
        'NoneType'
    """
    try:
        arr = value if type(value) is np.ndarray else np.asarray(value)
    except (TypeError, ValueError):
        return type(value).__name__
    if arr.dtype.kind in "US" or (
        arr.dtype.kind == "O" and all(isinstance(v, (str, bytes)) for v in arr.flat)
    ):
        return f"string{arr.shape}"
    if arr.dtype.kind == "O":
        return type(value).__name__ if arr.ndim == 0 else f"object{arr.shape}"
    return _fmt(arr.dtype, arr.shape)


def _fits(shape: tuple[int | None, ...] | None, got: tuple[int, ...]) -> bool:
    if shape is None:
        return True
    return len(shape) == len(got) and all(w is None or w == h for w, h in zip(shape, got))


def _castable(got: np.dtype, want: np.dtype) -> bool:
    if want.kind == "O":
        return got.kind in _TEXT_KINDS
    if got.kind in _TEXT_KINDS or got.kind == "V":
        return False
    return bool(np.can_cast(got, want, casting="same_kind"))


def cast_component(arr: np.ndarray, want: Any) -> np.ndarray | None:
    """`arr` as dtype `want`, or None when the cast is refused.

    A cast within numpy's ``same_kind`` rule is made (``float64`` to ``float32``); a
    numeric cast across kinds (a float to an integer, an integer to a bool) is made only
    when every value survives it exactly (a float edge map of 0 and 1 into ``int32``),
    as tensorpack's feed did; ``0.5``, ``NaN`` or ``3e9`` into ``int32`` is refused.

    Examples:
        >>> cast_component(np.array([0.0, 1.0]), "int32")
        array([0, 1], dtype=int32)
        >>> cast_component(np.array([0.5]), "int32") is None
        True
    """
    want = np.dtype(want)
    if _castable(arr.dtype, want):
        return arr.astype(want)
    if arr.dtype.kind not in _NUMERIC_KINDS or want.kind not in _NUMERIC_KINDS:
        return None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        new = arr.astype(want)
        exact = np.array_equal(new.astype(arr.dtype), arr)
    return new if exact else None


def conform_datapoint(
    datapoint: Any, layout: DatapointLayout, error: type[Exception] = ValueError
) -> tuple[np.ndarray, ...]:
    """`datapoint` as one array per input, in signature order, with the layout's dtypes.

    A component may have another dtype when numpy casts it within its kind
    (``float64`` to ``float32``, ``int64`` to ``int32``, an integer to a float), or
    when its values survive the cast exactly (floats of 0 and 1 for an integer input,
    `cast_component`); anything else (0.5 for an integer input, a string for a number)
    is refused.
    Every dimension the layout fixes must match.

    Args:
        datapoint: a list/tuple with one component per input, or a dict keyed by the
            input names.
        layout: what each component must be.
        error: the exception class to raise (the trainers raise their `InputDataError`).

    Returns:
        The components as numpy arrays of the layout's dtypes.

    Raises:
        ValueError: (or `error`) the datapoint has the wrong arity or kind, or components of the
            wrong dtype or shape; the message lists every component at fault with what
            was expected and what came.

    Examples:
        >>> layout = DatapointLayout(names=["x", "y"], dtypes=["float32", "int32"],
        ...                          shapes=[(None, 2), (None,)])
        >>> x, y = conform_datapoint(([[1.5, 2.0]], [3]), layout)
        >>> x.dtype.name, x.shape, y.dtype.name
        ('float32', (1, 2), 'int32')
        >>> conform_datapoint(([[1.5, 2.0, 3.0]], [0.5]), layout)
        Traceback (most recent call last):
        ...
        ValueError: #0 'x': expected float32(None, 2), got float64(1, 3); #1 'y': expected int32(None,), got float64(1,)
    """
    names = layout.names
    try:
        parts = datapoint_tuple(datapoint, names)
    except (TypeError, ValueError) as err:
        raise error(str(err)) from None
    out = []
    wrong = []
    for i, (value, want, shape) in enumerate(zip(parts, layout.dtypes, layout.shapes)):
        arr = value
        if type(arr) is not np.ndarray:
            try:
                arr = np.asarray(value)
            except (TypeError, ValueError):
                arr = None
        if arr is not None and arr.dtype != want:
            arr = cast_component(arr, want)
        if arr is None or not _fits(shape, arr.shape):
            wrong.append(
                f"#{i} {names[i]!r}: expected {_fmt(want, shape)}, got {describe_value(value)}"
            )
            continue
        out.append(arr)
    if wrong:
        raise error("; ".join(wrong))
    return tuple(out)


def timeout_message(name: str, waited_s: float, timeout_s: float, passes: int, count: int) -> str:
    """What an input that gave no datapoint within its `timeout_s` says (training or inference).

    `count` datapoints (0-based: the one waited for is #count) of pass `passes`
    (1-based) came before the wait. One message for `IterableInput`'s watchdog and
    a `ParallelIterable`'s own bound, so the user reads the same words wherever a
    pool is read.

    Examples:
        >>> timeout_message("IterableInput(Flow)", 5.04, 5, 2, 0)  # doctest: +NORMALIZE_WHITESPACE
        "IterableInput(Flow): the iterable gave no datapoint for 5.0 s (timeout=5 s),
        waiting for the start of pass 2; it is blocked or too slow: fix the producer,
        or give IterableInput a larger 'timeout'"

    .. versionadded:: 0.2
    """
    what = f"datapoint #{count} of pass {passes}" if count else f"the start of pass {passes}"
    owner = name.split("(", 1)[0] or "the input"
    return (
        f"{name}: the iterable gave no datapoint for {waited_s:.1f} s "
        f"(timeout={timeout_s:g} s), waiting for {what}; it is blocked or too slow: "
        f"fix the producer, or give {owner} a larger 'timeout'"
    )
