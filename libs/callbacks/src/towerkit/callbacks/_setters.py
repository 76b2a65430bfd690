"""The callbacks that set hyper-parameters: by schedule, by function, by file, by statistic."""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np

from towerkit.callbacks._base import Callback
from towerkit.callbacks._errors import MissingStatError
from towerkit.callbacks._hyperparams import (
    HyperParam,
    _as_param,
    _as_stat,
    _check_settable,
    _is_integer_dtype,
    _same,
    _show,
)
from towerkit.callbacks._loop import EventKind, LoopEvent
from towerkit.callbacks._schedules import (
    OnSchedule,
    PiecewiseSchedule,
    non_integral_entries,
    points_kind,
    schedule_point,
    scheduled_value,
    value_at,
    value_in_effect,
)
from towerkit.callbacks._shell_records import scheduled_setter_record
from towerkit.callbacks._stats import StatMonitorRule, StatMonitorState, advance_rule
from towerkit.callbacks._triggers import trainer_event
from towerkit.callbacks._writers import require_logdir
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")


class HyperParamSetter(Callback):
    """Base of the callbacks that set a hyper-parameter when triggered.

    On ``trigger()`` (every epoch unless scheduled otherwise) it asks
    :meth:`get_value_to_set`; a value other than None that differs from the current
    one (compared in the parameter's :attr:`~HyperParam.dtype`) is set, logged, and
    put to the monitors as a scalar named after the parameter. The value in effect is
    also put at the start of every epoch (a scalar parameter), so every record of
    ``stats.json`` holds it, the first epoch's and a resumed run's first included; a
    change made at the end of an epoch replaces it in that epoch's record. An integer
    parameter takes integral values only (``ValueError`` otherwise, before anything is
    set).
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
        self._put_at: int | None = None

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
            self.trainer.monitors.put_scalar(name, _as_stat(value, dtype))
            self._put_at = self.trainer.global_step

    def _before_epoch(self) -> None:
        step = self.trainer.global_step
        if self._put_at == step and self.trainer.epoch_num == self.trainer.starting_epoch:
            return  # put by before_train already, into the same record
        value = self.get_current_value()
        if isinstance(value, numbers.Real) or np.ndim(value) == 0:
            self.trainer.monitors.put_scalar(
                self._param.readable_name, _as_stat(value, self._param.dtype)
            )
            self._put_at = step

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
            ``before_train`` sets the value without putting it to the monitors (the
            start of its first epoch puts it, as every epoch's does), so a resumed
            run's ``stats.json`` equals an uninterrupted run's.

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
        built = scheduled_setter_record(schedule, interp, step_based, set_at_beginning)
        self._rule = cast(OnSchedule, built.trigger)
        self._trigger_kinds = built.kinds
        self._kinds = frozenset(built.kinds)
        self._points_kind = points_kind(self._rule.schedule)
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
        return self._trigger_kinds

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
        # trigger() (a PeriodicTrigger around the setter, a user) asks at the current
        # position: the same decision as at the event where the schedule's points are reached.
        return scheduled_value(self._rule, trainer_event(self.trainer, self._points_kind))

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
        self._rule = StatMonitorRule(threshold=threshold, last_k=last_k, reverse=reverse)
        super().__init__(param)
        self._stat = stat_name
        self._func = value_func
        self._state = StatMonitorState()

    @property
    def state(self) -> StatMonitorState:
        """The observations kept since the last change."""
        return self._state

    @property
    def rule(self) -> StatMonitorRule:
        """When the parameter changes: threshold, last_k and reverse, validated."""
        return self._rule

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
        self._state, change = advance_rule(self._state, step, value, self._rule)
        if not change:
            return None
        old = self.get_current_value()
        new = self._func(old)
        dtype = self._param.dtype
        logger.info(
            "%s: %r has not improved over the last %d observations; %s: %s -> %s",
            self,
            self._stat,
            self._rule.last_k,
            self._param.readable_name,
            _show(old, dtype),
            _show(new, dtype),
        )
        return new
