"""Hyper-parameters and the callbacks that set them: by schedule, by function, by file, by statistic."""

from __future__ import annotations

import abc
import logging
import math
import numbers
import os
from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np

from towerkit.callbacks._base import Callback
from towerkit.callbacks._errors import CallbackError, MissingStatError
from towerkit.callbacks._loop import EventKind, LoopEvent
from towerkit.callbacks._monitors import require_logdir
from towerkit.callbacks._schedules import (
    OnSchedule,
    PiecewiseSchedule,
    non_integral_entries,
    schedule_point,
    scheduled_value,
    value_at,
    value_in_effect,
)
from towerkit.callbacks._stats import StatMonitorState, advance, is_real_number
from towerkit.callbacks._triggers import firing_kinds, trainer_event, trainer_position
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")


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
        return np.dtype(self._var.dtype.base_dtype.as_numpy_dtype)

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


class HyperParamSetter(Callback):
    """Base of the callbacks that set a hyper-parameter when triggered.

    On ``trigger()`` (every epoch unless scheduled otherwise) it asks
    :meth:`get_value_to_set`; a value other than None that differs from the current
    one (compared in the parameter's :attr:`~HyperParam.dtype`) is set, logged, and
    put to the monitors as a scalar named after the parameter. An integer parameter
    takes integral values only (``ValueError`` otherwise, before anything is set).
    A subclass defines ``_get_value_to_set()``. Setters run on every process (not
    only the chief): each may hold its own copy of the parameter.

    Args:
        param: a :class:`HyperParam`, or a str naming a graph variable
            (:class:`GraphVarParam`).
    """

    _chief_only = False

    def __init__(self, param: HyperParam | str) -> None:
        if type(self)._get_value_to_set is HyperParamSetter._get_value_to_set:
            msg = f"{type(self).__name__} must define _get_value_to_set(): HyperParamSetter is a base class"
            raise TypeError(msg)
        self._param = _as_param(param)

    @property
    def param(self) -> HyperParam:
        """The parameter set."""
        return self._param

    def _setup_graph(self) -> None:
        self._param.setup_graph()

    def _in_session(self, fn: Callable[[], Any]) -> Any:
        sess = getattr(self.trainer, "sess", None)
        if sess is None or tf1.get_default_session() is sess:
            return fn()
        with sess.as_default():
            return fn()

    def get_current_value(self) -> Any:
        """The parameter's current value."""
        return self._in_session(self._param.get_value)

    def get_value_to_set(self) -> Any:
        """The value to set now, or None to leave the parameter as it is."""
        return self._get_value_to_set()

    def _get_value_to_set(self) -> Any:
        return None

    def _apply(self, value: Any, *, put: bool = True) -> None:
        param = self._param
        dtype = param.dtype
        _check_settable(param, value, str(self))
        old = self.get_current_value()
        if _same(old, value, dtype):
            return
        self._in_session(lambda: param.set_value(value))
        name = param.readable_name
        logger.info(
            "%s: %s changes from %s to %s at global step %d",
            type(self).__name__,
            name,
            _show(old, dtype),
            _show(value, dtype),
            self.trainer.global_step,
        )
        if put and (isinstance(value, numbers.Real) or np.ndim(value) == 0):
            self.trainer.monitors.put_scalar(name, value)

    def _set_param(self) -> None:
        value = self.get_value_to_set()
        if value is not None:
            self._apply(value)

    def _trigger(self) -> None:
        self._set_param()

    def __str__(self) -> str:
        return f"{type(self).__name__}({self._param.readable_name})"


class ScheduledHyperParamSetter(HyperParamSetter):
    """Set a hyper-parameter by a schedule of epochs (or global steps).

    Args:
        param: as in :class:`HyperParamSetter`.
        schedule: ``[(epoch1, value1), (epoch2, value2), ...]``: each pair means "set
            the parameter to the value after the completion of that epoch" (epochs
            are 1-based, so epoch 0 means before the first epoch). Epochs must be
            strictly increasing. Also accepts a :class:`PiecewiseSchedule`.
        interp: None: set only at the scheduled points exactly; ``"linear"``: at
            every trigger between two scheduled points, set the linear interpolation
            (no extrapolation before the first point or after the last).
        step_based: read the schedule as (global step, value) pairs, checked after
            every step (the global step after the step's run).
        set_at_beginning: in ``before_train``, set the value the schedule implies at
            the starting point even when it is not a scheduled point: the last
            scheduled value at or before it (interpolated with ``"linear"``). This
            makes a resumed run continue the schedule where it stopped. When False,
            ``before_train`` sets a value only if the starting point is scheduled.
            A run that starts past a scheduled point with the parameter off the
            schedule logs a warning. A run starting after epoch 1 continues one whose
            statistics hold the value in effect at its start already: its
            ``before_train`` sets the value without putting it to the monitors again,
            so a resumed run's ``stats.json`` equals an uninterrupted run's.

    Values are compared and printed in the parameter's dtype (a float32 variable
    holding ``0.003`` is not changed again by ``0.003``). The schedule of an integer
    variable must set integers only (checked in ``setup_graph``).

    Raises:
        TypeError: a schedule entry is not an (int, number) pair.
        ValueError: epochs not strictly increasing or negative (the entries at fault
            are listed), an empty schedule, or an unknown ``interp``; in
            ``setup_graph``, a schedule with values that are not integers for an
            integer variable (they are listed).

    Examples::

        ScheduledHyperParamSetter("learning_rate", [(30, 1e-2), (60, 1e-3), (85, 1e-4)])
    """

    def __init__(
        self,
        param: HyperParam | str,
        schedule: Iterable[tuple[int, float]] | PiecewiseSchedule,
        interp: str | None = None,
        step_based: bool = False,
        set_at_beginning: bool = True,
    ) -> None:
        if isinstance(schedule, PiecewiseSchedule):
            given = schedule
            schedule = given.points
            if interp is None:
                interp = given.interp
            if not step_based:
                step_based = given.step_based
            if (interp, step_based) != (given.interp, given.step_based):
                msg = (
                    f"ScheduledHyperParamSetter: the schedule record says interp={given.interp!r}, "
                    f"unit={given.unit!r}; the arguments say interp={interp!r}, step_based={step_based}"
                )
                raise ValueError(msg)
        record = PiecewiseSchedule(
            points=schedule, interp=cast(Any, interp), unit="step" if step_based else "epoch"
        )
        self._rule = OnSchedule(schedule=record, set_at_beginning=bool(set_at_beginning))
        self._kinds = firing_kinds(self._rule)
        super().__init__(param)

    @property
    def schedule(self) -> PiecewiseSchedule:
        """The schedule record."""
        return self._rule.schedule

    @property
    def trigger_record(self) -> OnSchedule:
        """When this setter sets the parameter, as a trigger record."""
        return self._rule

    @property
    def trigger_kinds(self) -> tuple[EventKind, ...]:
        """The event kinds at which the record is evaluated, in loop order."""
        return tuple(kind for kind in EventKind if kind in self._kinds)

    @property
    def step_based(self) -> bool:
        """Whether the schedule's points are global steps."""
        return self._rule.schedule.step_based

    @property
    def set_at_beginning(self) -> bool:
        """Whether ``before_train`` sets the value in effect at the starting point."""
        return self._rule.set_at_beginning

    def _setup_graph(self) -> None:
        super()._setup_graph()
        dtype = self._param.dtype
        if not _is_integer_dtype(dtype):
            return
        bad = non_integral_entries(self._rule.schedule)
        if bad:
            msg = (
                f"{self}: {self._param.readable_name!r} holds {dtype} values, but the schedule "
                f"sets values that are not integers: {'; '.join(bad)}"
            )
            raise ValueError(msg)

    def _get_value_to_set(self) -> float | None:
        schedule = self._rule.schedule
        return value_at(schedule, schedule_point(schedule, trainer_position(self.trainer)))

    def has_hook(self, method: str) -> bool:
        if method in ("_trigger_step", "_trigger_epoch"):
            return EventKind(method[1:]) in self._kinds
        return super().has_hook(method)

    def _set_at(self, event: LoopEvent) -> None:
        value = scheduled_value(self._rule, event)
        if value is not None:
            # A run starting after epoch 1 continues one whose statistics (kept by
            # JSONWriter) already hold the value in effect at its start: set, not put again.
            self._apply(
                value,
                put=not (
                    event.kind is EventKind.BEFORE_TRAIN and event.position.starting_epoch > 1
                ),
            )

    def _warn_if_off_schedule(self, event: LoopEvent) -> None:
        """Warn when the run starts past a scheduled point, with the parameter off the schedule."""
        schedule = self._rule.schedule
        point = schedule_point(schedule, event.position)
        expected = value_in_effect(schedule, point)
        if expected is None or value_at(schedule, point) is not None:
            return  # before the schedule, or at a point it sets: nothing is off yet
        dtype = self._param.dtype
        current = self.get_current_value()
        if _same(current, expected, dtype):
            return
        unit = "global step" if schedule.step_based else "epoch"
        since = max(p for p, _ in schedule.points if p <= point)
        if self._rule.set_at_beginning:
            action = f"setting it to {_show(expected, dtype)}"
        else:
            action = (
                "leaving it (set_at_beginning=False); unless another setter sets it, "
                "check how it is initialized"
            )
        logger.warning(
            "%s: the run starts in the middle of the schedule, at %s %d: %r should be %s "
            "(since %s %d), but it is %s; %s",
            self,
            unit,
            point,
            self._param.readable_name,
            _show(expected, dtype),
            unit,
            since,
            _show(current, dtype),
            action,
        )

    def _before_train(self) -> None:
        event = trainer_event(self.trainer, EventKind.BEFORE_TRAIN)
        self._warn_if_off_schedule(event)
        self._set_at(event)

    def _trigger_step(self) -> None:
        self._set_at(trainer_event(self.trainer, EventKind.TRIGGER_STEP))

    def _trigger_epoch(self) -> None:
        self._set_at(trainer_event(self.trainer, EventKind.TRIGGER_EPOCH))


class HyperParamSetterWithFunc(HyperParamSetter):
    """Set a hyper-parameter to ``func(epoch_num, old_value)`` on each trigger.

    ``epoch_num`` is the number of epochs finished (1 after the first epoch). Returning
    None or the old value leaves the parameter unchanged.

    Args:
        param: as in :class:`HyperParamSetter`.
        func: ``(epoch_num, old_value) -> new_value``.

    Examples::

        # decay by 0.9 after every second epoch
        HyperParamSetterWithFunc("learning_rate", lambda e, x: x * 0.9 if e % 2 == 0 else x)
    """

    def __init__(self, param: HyperParam | str, func: Callable[[int, Any], Any]) -> None:
        if not callable(func):
            msg = f"'func' must be a callable (epoch_num, old_value) -> new_value; got {type(func).__name__}"
            raise TypeError(msg)
        super().__init__(param)
        self._func = func

    def _get_value_to_set(self) -> Any:
        return self._func(self.trainer.epoch_num, self.get_current_value())


class HumanHyperParamSetter(HyperParamSetter):
    """Set a hyper-parameter from a text file that a person edits during training.

    On ``before_train`` and each trigger it reads the file: one ``name:value`` pair a
    line (blank lines and lines starting with ``#`` are skipped). The value paired with
    the parameter's readable name is set; a missing file or a missing name changes
    nothing.

    Args:
        param: as in :class:`HyperParamSetter`.
        file_name: the file; a relative name is inside the trainer's ``logdir``.

    Raises:
        ValueError: when read, the file has lines that are not ``name:number`` (all
            of them are listed with their line numbers).
    """

    def __init__(self, param: HyperParam | str, file_name: str = "hyper.txt") -> None:
        super().__init__(param)
        self._file_name = os.fspath(file_name)
        self._path: str | None = None

    @property
    def path(self) -> str | None:
        """The file read (known after ``setup_graph``)."""
        return self._path

    def _setup_graph(self) -> None:
        super()._setup_graph()
        if os.path.isabs(self._file_name):
            self._path = self._file_name
        else:
            self._path = os.path.join(
                require_logdir(self, None, "file_name (absolute)"), self._file_name
            )

    def _before_train(self) -> None:
        self._set_param()

    def _get_value_to_set(self) -> float | None:
        try:
            with open(self._path, encoding="utf-8") as f:  # type: ignore[arg-type]
                lines = f.read().splitlines()
        except FileNotFoundError:
            return None
        values, bad = {}, []
        for i, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            key, sep, val = text.partition(":")
            try:
                if not sep:
                    raise ValueError
                values[key.strip()] = float(val)
            except ValueError:
                bad.append(f"line {i}: {line!r}")
        if bad:
            msg = f"{self._path!r} must hold 'name:number' lines; wrong lines: {'; '.join(bad)}"
            raise ValueError(msg)
        return values.get(self._param.readable_name)


class StatMonitorParamSetter(HyperParamSetter):
    """Change a hyper-parameter when a statistic stops improving.

    On each trigger it reads the latest value of ``stat_name`` from the monitors (a
    value already seen, put at the same global step, is not a new observation). Once
    the last ``last_k + 1`` new observations ``w`` satisfy ``min(w) >= w[0] -
    threshold`` (or, with ``reverse``, ``max(w) <= w[0] + threshold``), the parameter
    becomes ``value_func(old_value)`` and the observations start over, so the next
    change needs ``last_k + 1`` observations made after this one (see
    :func:`~towerkit.callbacks.should_change` and :func:`~towerkit.callbacks.advance`).
    Before the statistic is first put, triggers do nothing.

    The statistic must be put at least as often as this callback triggers, and by a
    callback that comes earlier in the list.

    Args:
        param: as in :class:`HyperParamSetter`.
        stat_name: the statistic's name in the monitors.
        value_func: ``old_value -> new_value``.
        threshold: the least improvement that counts (>= 0).
        last_k: observations after the reference that must fail to improve (>= 1).
        reverse: the statistic should increase (an accuracy) rather than decrease.

    Examples::

        # validation error not decreasing for 5 epochs: learning rate * 0.2
        StatMonitorParamSetter("learning_rate", "val-error", lambda x: x * 0.2, threshold=0, last_k=5)
    """

    def __init__(
        self,
        param: HyperParam | str,
        stat_name: str,
        value_func: Callable[[Any], Any],
        threshold: float,
        last_k: int,
        reverse: bool = False,
    ) -> None:
        if not callable(value_func):
            msg = f"'value_func' must be a callable old_value -> new_value; got {type(value_func).__name__}"
            raise TypeError(msg)
        if isinstance(last_k, bool) or not isinstance(last_k, int) or last_k < 1:
            msg = f"'last_k' must be an int >= 1; got {last_k!r}"
            raise ValueError(msg)
        if not is_real_number(threshold) or not math.isfinite(threshold) or threshold < 0:
            msg = f"'threshold' must be a finite number >= 0; got {threshold!r}"
            raise ValueError(msg)
        super().__init__(param)
        self._stat = stat_name
        self._func = value_func
        self._threshold = float(threshold)
        self._last_k = last_k
        self._reverse = bool(reverse)
        self._state = StatMonitorState()

    @property
    def state(self) -> StatMonitorState:
        """The observations kept since the last change."""
        return self._state

    def _get_value_to_set(self) -> Any:
        try:
            step, value = self.trainer.monitors.get_history(self._stat)[-1]
        except MissingStatError:
            logger.warning(
                "%s: statistic %r not available yet at global step %d",
                self,
                self._stat,
                self.trainer.global_step,
            )
            return None
        self._state, change = advance(
            self._state,
            step,
            value,
            threshold=self._threshold,
            last_k=self._last_k,
            reverse=self._reverse,
        )
        if not change:
            return None
        old = self.get_current_value()
        new = self._func(old)
        dtype = self._param.dtype
        logger.info(
            "%s: %r has not improved over the last %d observations; %s: %s -> %s",
            self,
            self._stat,
            self._last_k,
            self._param.readable_name,
            _show(old, dtype),
            _show(new, dtype),
        )
        return new
