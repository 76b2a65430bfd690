"""Hyper-parameter schedules: frozen records and pure ``value_at`` (no TensorFlow)."""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol

import attrs

from towerkit.callbacks._loop import EventKind, LoopEvent, LoopPosition
from towerkit.callbacks._triggers import Trigger

__all__ = [
    "OnSchedule",
    "PiecewiseSchedule",
    "Schedule",
    "non_integral_entries",
    "piecewise_schedule",
    "schedule_point",
    "scheduled_value",
    "value_at",
    "value_in_effect",
]


class Schedule(Protocol):
    """Anything mapping a point (an epoch or a global step) to a value, or None for "no change".

    `PiecewiseSchedule` is one; so is any function of one positional argument.

    Examples:
        >>> halving: Schedule = lambda epoch: 0.1 * 0.5 ** (epoch // 10)
        >>> halving(20)
        0.025
    """

    def __call__(self, point: int, /) -> float | None:
        """The value at `point`, or None to leave it as it is."""


INTERPS = (None, "linear")
UNITS = ("epoch", "step")


def _points(value: Any) -> tuple[tuple[int, float], ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        msg = f"'schedule' must be a list of (point, value) pairs; got {type(value).__name__} {value!r:.80}"
        raise TypeError(msg)
    entries = list(value)
    out, bad = [], []
    for i, entry in enumerate(entries):
        try:
            point, val = entry
        except (TypeError, ValueError):
            bad.append(f"#{i} {entry!r}: not a (point, value) pair")
            continue
        if isinstance(point, bool) or not isinstance(point, numbers.Integral):
            bad.append(f"#{i} {entry!r}: point {point!r} is not an int")
            continue
        if isinstance(val, bool) or not isinstance(val, numbers.Real):
            bad.append(f"#{i} {entry!r}: value {val!r} is not a real number")
            continue
        out.append((int(point), float(val)))
    if bad:
        msg = (
            f"'schedule' entries must be (int point, number) pairs; wrong entries: {'; '.join(bad)}"
        )
        raise TypeError(msg)
    return tuple(out)


def _check_points(
    instance: Any,
    attribute: attrs.Attribute[tuple[tuple[int, float], ...]],
    points: tuple[tuple[int, float], ...],
) -> None:
    del instance, attribute
    if not points:
        msg = "'schedule' must hold at least one (point, value) pair; got none"
        raise ValueError(msg)
    negative = [f"#{i} {p}" for i, p in enumerate(points) if p[0] < 0]
    if negative:
        msg = f"'schedule' points (epochs or steps) must be >= 0; negative entries: {', '.join(negative)}"
        raise ValueError(msg)
    disorder = [
        f"#{i} {points[i]} after #{i - 1} {points[i - 1]}"
        for i in range(1, len(points))
        if points[i][0] <= points[i - 1][0]
    ]
    if disorder:
        msg = (
            "'schedule' points (epochs or steps) must be strictly increasing; "
            f"entries out of order: {', '.join(disorder)}"
        )
        raise ValueError(msg)


def _check_choice(choices: tuple[Any, ...]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        del instance
        if value not in choices:
            msg = f"{attribute.name!r} must be one of {choices}; got {value!r}"
            raise ValueError(msg)

    return check


@attrs.frozen(kw_only=True)
class PiecewiseSchedule:
    """A schedule given by (point, value) pairs, points in epochs or in global steps.

    A pair ``(p, v)`` means: set the value to ``v`` once point ``p`` is reached. With
    ``unit="epoch"`` that is after the completion of epoch ``p`` (``p == 0``: before
    the first epoch); with ``unit="step"`` after the run that brings the global step
    to ``p``. Without interpolation the value changes at those points only; with
    ``interp="linear"`` it moves linearly between consecutive points (and stays put
    before the first and after the last: no extrapolation).

    The record is callable: ``schedule(point)`` is ``value_at(schedule, point)``.

    Attributes:
        points: the (point, value) pairs, points strictly increasing and >= 0.
        interp: None or ``"linear"``.
        unit: ``"epoch"`` or ``"step"``.

    Examples:
        >>> s = PiecewiseSchedule(points=[(0, 0.1), (30, 0.01)])
        >>> s
        PiecewiseSchedule(points=((0, 0.1), (30, 0.01)), interp=None, unit='epoch')
        >>> s(30), s(31)
        (0.01, None)
    """

    points: tuple[tuple[int, float], ...] = attrs.field(converter=_points, validator=_check_points)
    interp: Literal["linear"] | None = attrs.field(default=None, validator=_check_choice(INTERPS))
    unit: Literal["epoch", "step"] = attrs.field(default="epoch", validator=_check_choice(UNITS))

    @property
    def step_based(self) -> bool:
        """Whether points are global steps (else epochs)."""
        return self.unit == "step"

    def __call__(self, point: int) -> float | None:
        return value_at(self, point)


def piecewise_schedule(
    points: Iterable[tuple[int, float]],
    interp: Literal["linear"] | None = None,
    unit: Literal["epoch", "step"] = "epoch",
) -> PiecewiseSchedule:
    """Build a :class:`PiecewiseSchedule`.

    Raises:
        TypeError: an entry is not an (int, number) pair; every such entry is listed.
        ValueError: points are not strictly increasing or are negative (every entry at
            fault is listed), the schedule is empty, or ``interp``/``unit`` is unknown.

    Examples:
        >>> piecewise_schedule([(10, 1.0), (20, 3.0)], interp="linear")(15)
        2.0
        >>> piecewise_schedule([(10, 1.0), (5, 3.0)])
        Traceback (most recent call last):
        ...
        ValueError: 'schedule' points (epochs or steps) must be strictly increasing; entries out of order: #1 (5, 3.0) after #0 (10, 1.0)
    """
    return PiecewiseSchedule(points=points, interp=interp, unit=unit)


def _locate(schedule: PiecewiseSchedule, point: int) -> int:
    """Index of the last scheduled point <= ``point`` (-1 when none)."""
    return bisect.bisect_right(schedule.points, point, key=lambda p: p[0]) - 1


def value_at(schedule: PiecewiseSchedule, point: int) -> float | None:
    """The value to set when ``point`` is reached, or None for "no change here".

    Without interpolation, the value of a scheduled point that equals ``point``. With
    ``interp="linear"``, also the interpolated value strictly between two scheduled
    points; before the first point and after the last, None.

    Args:
        schedule: the schedule.
        point: the epochs finished (``unit="epoch"``) or the global step
            (``unit="step"``).

    Examples:
        >>> s = PiecewiseSchedule(points=[(1, 1.0), (3, 3.0)], interp="linear")
        >>> [value_at(s, p) for p in range(5)]
        [None, 1.0, 2.0, 3.0, None]
        >>> [value_at(PiecewiseSchedule(points=[(1, 1.0), (3, 3.0)]), p) for p in range(5)]
        [None, 1.0, None, 3.0, None]
    """
    points = schedule.points
    i = _locate(schedule, point)
    if i < 0:
        return None
    p, v = points[i]
    if p == point:
        return v
    if schedule.interp is None or i + 1 >= len(points):
        return None
    p2, v2 = points[i + 1]
    return v + (v2 - v) * (point - p) / (p2 - p)


def value_in_effect(schedule: PiecewiseSchedule, point: int) -> float | None:
    """The value the schedule implies at ``point``, scheduled there or not.

    What a run resumed at ``point`` should start with: the last scheduled value at or
    before it (interpolated between points with ``interp="linear"``), or None before
    the first scheduled point.

    Examples:
        >>> s = PiecewiseSchedule(points=[(2, 1.0), (4, 0.5)])
        >>> [value_in_effect(s, p) for p in range(6)]
        [None, None, 1.0, 1.0, 0.5, 0.5]
        >>> value_in_effect(PiecewiseSchedule(points=[(2, 1.0), (4, 0.5)], interp="linear"), 3)
        0.75
    """
    i = _locate(schedule, point)
    if i < 0:
        return None
    exact_or_between = value_at(schedule, point)
    return schedule.points[i][1] if exact_or_between is None else exact_or_between


def non_integral_entries(schedule: PiecewiseSchedule) -> list[str]:
    """Where ``schedule`` gives values that are not integers: one line per entry at fault.

    Empty when every value :func:`value_at` can return is an integer, as a schedule
    of an integer variable needs. With ``interp="linear"`` the values between two
    points are integers only if the two values are and their difference is a
    multiple of the distance between the points.

    Examples:
        >>> non_integral_entries(piecewise_schedule([(0, 2.0), (3, 2.7)]))
        ['#1 (3, 2.7)']
        >>> non_integral_entries(piecewise_schedule([(0, 1.0), (4, 3.0)], interp="linear"))
        ['between #0 (0, 1.0) and #1 (4, 3.0): 1.5 at 1']
        >>> non_integral_entries(piecewise_schedule([(0, 1.0), (2, 5.0)], interp="linear"))
        []
    """
    points = schedule.points
    bad = [f"#{i} {entry}" for i, entry in enumerate(points) if not entry[1].is_integer()]
    if schedule.interp is None or bad:
        return bad
    for i in range(1, len(points)):
        (p1, v1), (p2, v2) = points[i - 1], points[i]
        if (v2 - v1) % (p2 - p1) != 0:
            first = value_at(schedule, p1 + 1)
            bad.append(
                f"between #{i - 1} {points[i - 1]} and #{i} {points[i]}: {first:g} at {p1 + 1}"
            )
    return bad


def _schedule(value: Any) -> PiecewiseSchedule:
    if not isinstance(value, PiecewiseSchedule):
        msg = f"'schedule' must be a PiecewiseSchedule; got {type(value).__name__}"
        raise TypeError(msg)
    return value


@attrs.frozen(kw_only=True)
class OnSchedule(Trigger):
    """When a ``ScheduledHyperParamSetter`` sets its parameter: a trigger record.

    It fires where :func:`scheduled_value` is not None: in ``before_train`` (the value
    in effect at the starting point with ``set_at_beginning``, else only an exact
    scheduled point), in ``trigger_epoch`` for epoch schedules and in
    ``trigger_step`` for step schedules.

    Examples:
        >>> from towerkit.callbacks._loop import loop_events
        >>> from towerkit.callbacks._triggers import fires
        >>> rule = OnSchedule(schedule=piecewise_schedule([(0, 1.0), (2, 0.1)]))
        >>> [(e.kind.value, e.epoch_num, scheduled_value(rule, e)) for e in loop_events(1, 3, 2)
        ...  if fires(rule, e)]
        [('before_train', 0, 1.0), ('trigger_epoch', 2, 0.1)]
    """

    schedule: PiecewiseSchedule = attrs.field(converter=_schedule)
    set_at_beginning: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))

    def _fires(self, event: LoopEvent) -> bool:
        return scheduled_value(self, event) is not None

    def _firing_kinds(self) -> frozenset[EventKind]:
        return frozenset((EventKind.BEFORE_TRAIN, points_kind(self.schedule)))


def points_kind(schedule: PiecewiseSchedule) -> EventKind:
    """The event at which the schedule's points are reached: after a step or after an epoch.

    Examples:
        >>> points_kind(piecewise_schedule([(1, 0.1)])), points_kind(piecewise_schedule([(1, 0.1)], unit="step"))
        (EventKind.TRIGGER_EPOCH, EventKind.TRIGGER_STEP)
    """
    return EventKind.TRIGGER_STEP if schedule.unit == "step" else EventKind.TRIGGER_EPOCH


def schedule_point(schedule: PiecewiseSchedule, position: LoopPosition) -> int:
    """Where ``position`` is on the axis of ``schedule``: the point to look values up at.

    The global step for step schedules, the running epoch (the epochs finished, in
    ``trigger_epoch``; ``starting_epoch - 1`` before training) for epoch schedules.

    Examples:
        >>> from towerkit.callbacks import LoopBounds
        >>> pos = LoopPosition(bounds=LoopBounds(max_epoch=3, steps_per_epoch=10), epoch_num=2,
        ...                    local_step=9, global_step=20)
        >>> schedule_point(piecewise_schedule([(1, 0.1)]), pos)
        2
        >>> schedule_point(piecewise_schedule([(1, 0.1)], unit="step"), pos)
        20
    """
    return position.global_step if schedule.unit == "step" else position.epoch_num


def scheduled_value(rule: OnSchedule, event: LoopEvent) -> float | None:
    """The value a scheduled setter sets at ``event``, or None when it sets nothing.

    Points are the epochs finished (``epoch_num`` at ``trigger_epoch``, ``epoch_num``
    = ``starting_epoch - 1`` at ``before_train``) for epoch schedules, and the
    global step (after the step's run) for step schedules.

    Examples:
        >>> from towerkit.callbacks._loop import loop_events
        >>> from towerkit.callbacks._triggers import fires
        >>> rule = OnSchedule(schedule=piecewise_schedule([(3, 0.5)], unit="step"))
        >>> [(e.kind.value, e.global_step, scheduled_value(rule, e))
        ...  for e in loop_events(3, 4, 2, start_global_step=4) if fires(rule, e)]
        [('before_train', 4, 0.5)]
    """
    schedule = rule.schedule
    kind = event.kind
    if kind is EventKind.BEFORE_TRAIN:
        point = schedule_point(schedule, event.position)
        return (value_in_effect if rule.set_at_beginning else value_at)(schedule, point)
    if kind is points_kind(schedule):
        return value_at(schedule, schedule_point(schedule, event.position))
    return None
