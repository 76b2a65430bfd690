"""The time trigger: every N minutes of wall clock since the last firing, as a pure record and state."""

from __future__ import annotations

import math
from typing import Any

import attrs

__all__ = ["TimerState", "WallClockInterval", "advance_timer", "check_minutes"]


def check_minutes(value: Any, name: str = "every_n_minutes") -> float:
    """`value` as a number of minutes: a finite number > 0 (an int or a float, not a bool).

    Examples:
        >>> check_minutes(30), check_minutes(0.5)
        (30.0, 0.5)

    Raises:
        TypeError: `value` is not a number.
        ValueError: it is not finite or not > 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        msg = f"{name!r} must be a number of minutes > 0; got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if not (math.isfinite(value) and value > 0):
        msg = f"{name!r} must be a finite number of minutes > 0; got {value!r}"
        raise ValueError(msg)
    return float(value)


def _seconds(instance: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        msg = f"{type(instance).__name__}: {attribute.name!r} must be a finite number > 0; got {value!r}"
        raise ValueError(msg)


@attrs.frozen
class WallClockInterval:
    """Fire when at least `seconds` of a clock have passed since the last firing.

    The clock is the caller's (``time.monotonic`` in the shells): the elapsed time of
    the wall clock, never moved by a change of the system time.

    Attributes:
        seconds: the interval, a finite number > 0.
    """

    seconds: float = attrs.field(converter=float, validator=_seconds)

    @classmethod
    def from_minutes(cls, minutes: float) -> WallClockInterval:
        """The interval of `minutes` (`check_minutes`).

        Examples:
            >>> WallClockInterval.from_minutes(2)
            WallClockInterval(seconds=120.0)
        """
        return cls(check_minutes(minutes) * 60.0)


@attrs.frozen
class TimerState:
    """When the timer last fired (or was started), in seconds of its clock.

    Attributes:
        last: the clock's reading then.
    """

    last: float = attrs.field(converter=float)


def advance_timer(
    interval: WallClockInterval, state: TimerState, now: float
) -> tuple[bool, TimerState]:
    """Whether the timer fires at `now`, and its state after.

    It fires when ``now - state.last >= interval.seconds``, and then counts from
    `now`. A clock read earlier than `state.last` (a clock that went back) never
    fires and restarts the count from `now`. Something else that resets the count (a
    save for another reason) is ``TimerState(now)``.

    Examples:
        >>> i, s = WallClockInterval(60.0), TimerState(0.0)
        >>> advance_timer(i, s, 59.9)
        (False, TimerState(last=0.0))
        >>> advance_timer(i, s, 60.0)
        (True, TimerState(last=60.0))
    """
    if now < state.last:
        return False, TimerState(now)
    if now - state.last >= interval.seconds:
        return True, TimerState(now)
    return False, state
