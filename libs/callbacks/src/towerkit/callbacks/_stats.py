"""Pure statistics for callbacks: time-left estimates and the stat-monitor decision."""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Sequence

import attrs
from attrs.validators import instance_of

__all__ = [
    "EARLY_STOPPING_MODES",
    "EarlyStoppingState",
    "StatMonitorRule",
    "StatMonitorState",
    "advance",
    "advance_early_stopping",
    "estimate_time_left",
    "improves",
    "should_change",
    "should_stop",
]


def is_real_number(value: object) -> bool:
    """Whether ``value`` is a real number (Python or NumPy), booleans excluded.

    Examples:
        >>> is_real_number(0.5), is_real_number(3), is_real_number(True), is_real_number("1")
        (True, True, False, False)
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def improves(value: float, best: float | None, reverse: bool = False) -> bool:
    """Whether `value` becomes the new best of a statistic (`MinSaver`, `MaxSaver`).

    Only finite values count: NaN and the infinities (a diverged run) never become
    the best, so a NaN first value does not stop later values from being kept, and
    an infinity never beats every value that follows. A finite value beats no best
    yet (None); it must be strictly lower than the best (strictly higher with
    `reverse`) to replace it.

    Args:
        value: the newest value of the statistic.
        best: the best finite value so far, or None before the first.
        reverse: higher is better (`MaxSaver`) instead of lower.

    Examples:
        >>> improves(float("nan"), None), improves(0.5, None), improves(0.5, 0.5)
        (False, True, False)
        >>> improves(float("-inf"), 0.5), improves(0.7, 0.5, reverse=True)
        (False, True)
    """
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    return value > best if reverse else value < best


def estimate_time_left(durations: Sequence[float], epochs_left: int, median: bool = True) -> float:
    """Seconds left in training, from the durations of recent epochs.

    Args:
        durations: wall-clock seconds of the most recent epochs (at least one), in
            any order; the caller keeps as many as it wants to average over.
        epochs_left: epochs still to run (>= 0).
        median: average the durations by their median (robust to one slow epoch)
            instead of their mean.

    Returns:
        ``epochs_left`` times the average duration, in seconds.

    Raises:
        ValueError: ``durations`` is empty or holds a negative or non-finite value, or
            ``epochs_left`` is negative.

    Examples:
        >>> estimate_time_left([10.0, 12.0, 50.0], 4)
        48.0
        >>> estimate_time_left([10.0, 12.0, 50.0], 4, median=False)
        96.0
        >>> estimate_time_left([3.0], 0)
        0.0
    """
    values = [float(d) for d in durations]
    if not values:
        msg = "'durations' must hold at least one epoch duration (seconds); got none"
        raise ValueError(msg)
    bad = [d for d in values if not math.isfinite(d) or d < 0]
    if bad:
        msg = f"'durations' must be finite seconds >= 0; got {bad}"
        raise ValueError(msg)
    if epochs_left < 0:
        msg = f"'epochs_left' must be >= 0; got {epochs_left}"
        raise ValueError(msg)
    average = statistics.median(values) if median else statistics.fmean(values)
    return float(epochs_left * average)


def should_change(
    history: Sequence[float], threshold: float, last_k: int, reverse: bool = False
) -> bool:
    """Whether a monitored statistic has stopped improving.

    The decision looks at the last ``last_k + 1`` observations: the oldest of them is
    the reference, and the statistic has stopped improving when none of the ``last_k``
    newer ones beat it by more than ``threshold``. Written over that window ``w``:
    ``min(w) >= w[0] - threshold`` (decreasing is better), or with ``reverse``
    ``max(w) <= w[0] + threshold`` (increasing is better). With fewer than
    ``last_k + 1`` observations there is not enough evidence and the answer is False.
    A NaN observation (a diverged statistic) counts as the worst value: it never
    improves on the reference, and any number improves on a NaN reference.

    Args:
        history: observations since the parameter last changed, oldest first.
        threshold: the least improvement that counts (>= 0), in the statistic's units.
        last_k: how many observations after the reference must fail to improve (>= 1).
        reverse: the statistic should increase (an accuracy) rather than decrease.

    Examples:
        >>> should_change([0.5, 0.5, 0.51], threshold=0.0, last_k=2)
        True
        >>> should_change([0.5, 0.5, 0.49], threshold=0.0, last_k=2)
        False
        >>> should_change([0.5, 0.49], threshold=0.05, last_k=1)
        True
        >>> should_change([0.5, 0.5], threshold=0.0, last_k=2)
        False
        >>> should_change([0.9, 0.95, 0.9], threshold=0.0, last_k=2, reverse=True)
        False
        >>> nan = float("nan")
        >>> should_change([0.5, nan, nan], 0.0, 2), should_change([nan, 0.9, nan], 0.0, 2)
        (True, False)
    """
    if len(history) < last_k + 1:
        return False
    worst = -math.inf if reverse else math.inf
    window = [worst if math.isnan(v) else v for v in history[len(history) - last_k - 1 :]]
    if reverse:
        return max(window) <= window[0] + threshold
    return min(window) >= window[0] - threshold


def _to_floats(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


@attrs.frozen(kw_only=True)
class StatMonitorState:
    """What ``StatMonitorParamSetter`` remembers between triggers.

    Attributes:
        history: observations of the statistic since the parameter last changed
            (or since training started), oldest first; at most ``last_k + 1`` kept.
        last_step: the global step of the newest observation taken, or None before
            the first; an observation at the same step is the same one seen again.
    """

    history: tuple[float, ...] = attrs.field(default=(), converter=_to_floats)
    last_step: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(instance_of(int))
    )


def _check_last_k(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    del instance, attribute
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"'last_k' must be an int >= 1; got {value!r}"
        raise ValueError(msg)


def _check_threshold(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    del instance, attribute
    if not is_real_number(value) or not math.isfinite(value) or value < 0:  # type: ignore[arg-type, operator]
        msg = f"'threshold' must be a finite number >= 0; got {value!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class StatMonitorRule:
    """When ``StatMonitorParamSetter`` changes its parameter: the arguments of :func:`advance`.

    Validated at construction, so a setter with a bad rule fails before training.

    Attributes:
        threshold: the least improvement that counts (a finite number >= 0).
        last_k: observations after the reference that must fail to improve (an int >= 1).
        reverse: the statistic should increase (an accuracy) rather than decrease.

    Examples:
        >>> StatMonitorRule(threshold=0, last_k=2)
        StatMonitorRule(last_k=2, threshold=0.0, reverse=False)
        >>> StatMonitorRule(threshold=-1, last_k=2)
        Traceback (most recent call last):
        ...
        ValueError: 'threshold' must be a finite number >= 0; got -1
    """

    last_k: int = attrs.field(validator=_check_last_k)
    threshold: float = attrs.field(validator=_check_threshold)
    reverse: bool = attrs.field(default=False, converter=bool)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "threshold", float(self.threshold))


def advance_rule(
    state: StatMonitorState, step: int, value: float, rule: StatMonitorRule
) -> tuple[StatMonitorState, bool]:
    """:func:`advance` under a validated :class:`StatMonitorRule`.

    Examples:
        >>> advance_rule(StatMonitorState(history=[1.0]), 3, 1.0, StatMonitorRule(threshold=0, last_k=1))
        (StatMonitorState(history=(), last_step=3), True)
    """
    return advance(
        state, step, value, threshold=rule.threshold, last_k=rule.last_k, reverse=rule.reverse
    )


def advance(
    state: StatMonitorState,
    step: int,
    value: float,
    *,
    threshold: float,
    last_k: int,
    reverse: bool = False,
) -> tuple[StatMonitorState, bool]:
    """Take one observation of the statistic and decide whether to change the parameter.

    An observation with the same ``step`` as the previous one is not new (the
    statistic was not updated since) and changes nothing. After a change, the history
    restarts empty: the next decision needs ``last_k + 1`` observations made after
    this one, so a change happens at most once every ``last_k + 1`` new observations.

    Args:
        state: the state after the previous observation.
        step: the global step at which the observation was put to the monitors.
        value: the observed value.
        threshold: as in :func:`should_change`.
        last_k: as in :func:`should_change`.
        reverse: as in :func:`should_change`.

    Returns:
        The new state and whether to change the parameter now.

    Examples:
        >>> s = StatMonitorState()
        >>> decisions = []
        >>> for step, v in enumerate([3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]):
        ...     s, change = advance(s, step, v, threshold=0.0, last_k=2)
        ...     decisions.append(change)
        >>> decisions
        [False, False, False, True, False, False, True]
    """
    if state.last_step is not None and step == state.last_step:
        return state, False
    history = (*state.history, float(value))[-(last_k + 1) :]
    if should_change(history, threshold, last_k, reverse):
        return StatMonitorState(history=(), last_step=step), True
    return StatMonitorState(history=history, last_step=step), False


EARLY_STOPPING_MODES = ("min", "max")
"""``"min"``: lower is better (a loss, an error); ``"max"``: higher is better (an accuracy)."""


@attrs.frozen(kw_only=True)
class EarlyStoppingState:
    """What ``EarlyStopping`` remembers between observations.

    Attributes:
        best: the best finite value so far, or None before the first.
        best_step: the global step at which the best value was put, or None.
        wait: new observations since the best that did not improve on it by more
            than ``min_delta`` (observations before the first finite one count too).
        last_step: the global step of the newest observation, or None before the first.

    .. versionadded:: 0.2
    """

    best: float | None = attrs.field(default=None)
    best_step: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(instance_of(int))
    )
    wait: int = attrs.field(default=0, validator=instance_of(int))
    last_step: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(instance_of(int))
    )


def check_early_stopping(mode: str, patience: int, min_delta: float) -> None:
    """Raise ``ValueError`` naming every argument of an early-stopping rule that is out of range."""
    bad = []
    if mode not in EARLY_STOPPING_MODES:
        bad.append(f"'mode' must be 'min' or 'max'; got {mode!r}")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
        bad.append(f"'patience' must be an int >= 0 (epochs); got {patience!r}")
    if not is_real_number(min_delta) or not math.isfinite(min_delta) or min_delta < 0:
        bad.append(f"'min_delta' must be a finite number >= 0; got {min_delta!r}")
    if bad:
        raise ValueError("; ".join(bad))


def advance_early_stopping(
    state: EarlyStoppingState,
    step: int,
    value: float,
    *,
    mode: str = "min",
    patience: int,
    min_delta: float = 0.0,
) -> tuple[EarlyStoppingState, bool]:
    """Take one observation of a monitored statistic and decide whether to stop training.

    As for :func:`advance`, an observation at the same ``step`` as the previous one
    is the same value seen again and changes nothing. A value improves when it is
    finite and beats the best by more than ``min_delta`` (lower with ``"min"``,
    higher with ``"max"``; see :func:`improves`, which never lets NaN or an infinity
    win); it becomes the best and the wait restarts at 0. Any other value adds one to
    the wait, and training stops once the wait reaches ``patience``.

    Args:
        state: the state after the previous observation.
        step: the global step at which the value was put to the monitors.
        value: the observed value.
        mode: ``"min"`` or ``"max"``.
        patience: observations without improvement before stopping (>= 0).
        min_delta: the least change that counts as an improvement (>= 0).

    Returns:
        The new state and whether to stop now.

    Raises:
        ValueError: ``mode``, ``patience`` or ``min_delta`` out of range.

    Examples:
        >>> s = EarlyStoppingState()
        >>> decisions = []
        >>> for step, v in enumerate([0.5, 0.4, 0.41, 0.4, 0.45]):
        ...     s, stop = advance_early_stopping(s, step, v, patience=3)
        ...     decisions.append(stop)
        >>> decisions, s.best, s.best_step
        ([False, False, False, False, True], 0.4, 1)

    .. versionadded:: 0.2
    """
    check_early_stopping(mode, patience, min_delta)
    if state.last_step is not None and step == state.last_step:
        return state, False
    value = float(value)
    reverse = mode == "max"
    bar = None if state.best is None else state.best + (min_delta if reverse else -min_delta)
    if improves(value, bar, reverse):
        return EarlyStoppingState(best=value, best_step=step, wait=0, last_step=step), False
    new = attrs.evolve(state, wait=state.wait + 1, last_step=step)
    return new, new.wait >= patience


def should_stop(
    history: Sequence[float], *, mode: str = "min", patience: int, min_delta: float = 0.0
) -> bool:
    """Whether training should stop after the last of `history` (oldest first).

    The fold of :func:`advance_early_stopping` over the observations: True when the
    last ``patience`` observations all failed to beat the best before them by more
    than ``min_delta``.

    Examples:
        >>> should_stop([0.5, 0.4, 0.41, 0.4], patience=2), should_stop([0.5, 0.4, 0.41], patience=2)
        (True, False)
        >>> should_stop([0.9, 0.905, 0.908], mode="max", patience=2, min_delta=0.01)
        True
        >>> should_stop([], patience=0)
        False
    """
    check_early_stopping(mode, patience, min_delta)
    state, stop = EarlyStoppingState(), False
    for step, value in enumerate(history):
        state, stop = advance_early_stopping(
            state, step, value, mode=mode, patience=patience, min_delta=min_delta
        )
    return stop
