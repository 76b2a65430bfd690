"""Hyper-parameters (a graph variable, an object's attribute) and how their values compare and print."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

import numpy as np

from towerkit.callbacks._errors import CallbackError
from towerkit.towers.compat import tf1


class HyperParam(abc.ABC):
    """Something a :class:`HyperParamSetter` can read and set: a graph variable, an attribute."""

    def setup_graph(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Build what the parameter needs in the default graph (called in the setter's ``setup_graph``)."""

    @abc.abstractmethod
    def get_value(self) -> Any:
        """The current value."""

    @abc.abstractmethod
    def set_value(self, v: Any) -> None:
        """Set the value to ``v``."""

    @property
    @abc.abstractmethod
    def readable_name(self) -> str:
        """The name to display and to put statistics under."""

    @property
    def dtype(self) -> np.dtype | None:
        """The NumPy dtype the parameter holds its value in, or None when it has none.

        A setter compares, checks and prints values in this dtype: a value is "new"
        only if it differs once stored, an integer parameter takes integers only, and
        a float32 value prints as the float32 it is (``0.003``, not
        ``0.003000000026077032``).
        """
        return None


def _py(value: Any) -> Any:
    arr = np.asarray(value)
    if arr.ndim == 0:
        item = arr.item()
        return item
    return arr


class GraphVarParam(HyperParam):
    """A variable of the graph (such as ``learning_rate``) as a hyper-parameter.

    In ``setup_graph`` it finds the global variable and builds one placeholder and
    one assign op; each ``set_value`` runs that op (the graph is finalized by then).
    Reading and setting use the default session (the trainer's, during training).
    The variable is a global variable, so checkpoints save and restore its value.

    Args:
        name: the variable's name (``"learning_rate"`` or ``"learning_rate:0"``).
        shape: its expected shape (``()`` for a scalar).
    """

    def __init__(self, name: str, shape: Iterable[int] = ()) -> None:
        if not isinstance(name, str) or not name:
            msg = f"'name' must be a non-empty variable name; got {name!r}"
            raise TypeError(msg)
        self._name = name[:-2] if name.endswith(":0") else name
        self._shape = tuple(int(d) for d in shape)
        self._var: Any = None
        self._ph: Any = None
        self._assign: Any = None

    @property
    def readable_name(self) -> str:
        return self._name

    @property
    def shape(self) -> tuple[int, ...]:
        """The expected shape."""
        return self._shape

    @property
    def var(self) -> Any:
        """The variable (after ``setup_graph``)."""
        return self._var

    @property
    def dtype(self) -> np.dtype | None:
        """The variable's dtype as a NumPy dtype (after ``setup_graph``; None before)."""
        if self._var is None:
            return None
        dtype: np.dtype = np.dtype(self._var.dtype.base_dtype.as_numpy_dtype)
        return dtype

    def setup_graph(self) -> None:
        graph = tf1.get_default_graph()
        found = [
            v
            for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)
            if v.op.name == self._name
        ]
        if not found:
            names = sorted(v.op.name for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES))
            shown = names if len(names) <= 30 else [*names[:30], f"... ({len(names) - 30} more)"]
            msg = f"GraphVarParam: no global variable named {self._name!r} in the graph; global variables: {shown}"
            raise ValueError(msg)
        var = found[0]
        if tuple(var.shape.as_list()) != self._shape:
            msg = (
                f"GraphVarParam: variable {self._name!r} has shape {tuple(var.shape.as_list())}; "
                f"expected {self._shape}"
            )
            raise ValueError(msg)
        self._var = var
        self._ph = tf1.placeholder(var.dtype.base_dtype, shape=var.shape, name="value")
        self._assign = tf1.assign(var, self._ph, name="set_value").op

    def _session(self) -> Any:
        if self._var is None:
            msg = f"GraphVarParam({self._name!r}) is used before setup_graph"
            raise CallbackError(msg)
        sess = tf1.get_default_session()
        if sess is None:
            msg = (
                f"GraphVarParam({self._name!r}) needs a default session (the trainer provides one)"
            )
            raise CallbackError(msg)
        return sess

    def get_value(self) -> Any:
        return _py(self._session().run(self._var))

    def set_value(self, v: Any) -> None:
        self._session().run(self._assign, {self._ph: v})

    def __repr__(self) -> str:
        return f"GraphVarParam({self._name!r}, shape={self._shape})"


class ObjAttrParam(HyperParam):
    """An attribute of a Python object as a hyper-parameter.

    Args:
        obj: the object.
        attrname: the attribute (it must exist).
        readable_name: the name to display; defaults to ``attrname``.
    """

    def __init__(self, obj: Any, attrname: str, readable_name: str | None = None) -> None:
        if not hasattr(obj, attrname):
            msg = f"ObjAttrParam: {type(obj).__name__} object has no attribute {attrname!r}"
            raise ValueError(msg)
        self._obj = obj
        self._attr = attrname
        self._readable = readable_name if readable_name is not None else attrname

    @property
    def readable_name(self) -> str:
        return self._readable

    def get_value(self) -> Any:
        return getattr(self._obj, self._attr)

    def set_value(self, v: Any) -> None:
        setattr(self._obj, self._attr, v)

    def __repr__(self) -> str:
        return f"ObjAttrParam({type(self._obj).__name__}, {self._attr!r})"


def _as_param(param: Any) -> HyperParam:
    if isinstance(param, str):
        return GraphVarParam(param)
    if not isinstance(param, HyperParam):
        msg = f"'param' must be a HyperParam or a variable name (str); got {type(param).__name__}"
        raise TypeError(msg)
    return param


def _as_dtype(value: Any, dtype: np.dtype | None) -> np.ndarray:
    return np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)


def _same(a: Any, b: Any, dtype: np.dtype | None = None) -> bool:
    """Whether ``a`` and ``b`` are the same value once held in ``dtype``."""
    try:
        return bool(np.array_equal(_as_dtype(a, dtype), _as_dtype(b, dtype)))
    except (TypeError, ValueError, OverflowError):
        return False


def _as_stat(value: Any, dtype: np.dtype | None = None) -> Any:
    """A scalar parameter's value as the statistic records it: the digits `_show` prints.

    The value set (``0.1``) and the value read back from a float32 variable
    (``0.10000000149011612``) are the same statistic, so a run resumed between two
    settings records what an uninterrupted one does.

    Examples:
        >>> _as_stat(np.float32(0.1), np.dtype("float32")), _as_stat(0.1, np.dtype("float32"))
        (0.1, 0.1)
    """
    try:
        arr = _as_dtype(value, dtype)
    except (TypeError, ValueError, OverflowError):
        return value
    if arr.ndim == 0 and arr.dtype.kind == "f":
        return float(str(arr[()]))
    return value


def _show(value: Any, dtype: np.dtype | None = None) -> str:
    """``value`` as the parameter holds it, at the precision of its dtype.

    A float32 value prints as the shortest decimal that reads back as the same
    float32 (``0.003``), a float64 one as Python prints floats.
    """
    try:
        arr = _as_dtype(value, dtype)
    except (TypeError, ValueError, OverflowError):
        return str(value)
    if arr.ndim == 0 and arr.dtype.kind == "f":
        # the dtype's shortest round-trip digits, spelled as Python spells floats
        return repr(float(str(arr[()])))
    if arr.ndim == 0 and arr.dtype.kind in "biu":
        return str(arr[()])
    if arr.dtype.kind in "biuf":
        return np.array2string(arr, separator=", ")
    return str(value)


def _is_integer_dtype(dtype: np.dtype | None) -> bool:
    return dtype is not None and dtype.kind in "biu"


def _check_settable(param: HyperParam, value: Any, who: str) -> None:
    """Raise if ``value`` would change on the way into an integer parameter."""
    dtype = param.dtype
    if not _is_integer_dtype(dtype):
        return
    try:
        with np.errstate(all="ignore"):
            exact = bool(np.all(np.asarray(value, dtype=np.float64) == _as_dtype(value, dtype)))
    except (TypeError, ValueError, OverflowError):
        exact = False
    if not exact:
        msg = (
            f"{who}: {param.readable_name!r} holds {dtype} values; {value!r} is not one "
            f"(it would be stored as something else)"
        )
        raise ValueError(msg)
