"""Several training steps per session call: which loop positions a call ends at, and what it rules out."""

from __future__ import annotations

from towerkit.callbacks._triggers import (
    AllOf,
    AnyOf,
    EveryK,
    GlobalStepMultiple,
    Not,
    Trigger,
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def execution_faults(steps_per_epoch: object, steps_per_execution: object) -> list[str]:
    """Every fault of running ``steps_per_execution`` steps per session call; empty when none.

    A call runs ``steps_per_execution`` (K) steps, so K must be an int >= 1 that
    divides ``steps_per_epoch``: an epoch is a whole number of calls and epoch hooks
    run where they run with one step per call.

    .. versionadded:: 0.2

    Examples:
        >>> execution_faults(100, 10)
        []
        >>> execution_faults(100, 32)
        ["'steps_per_execution' 32 must divide 'steps_per_epoch' 100 (an epoch is a whole number of session calls); divisors near 32: 25, 50"]
        >>> execution_faults(10, 0)
        ["'steps_per_execution' must be an int >= 1; got 0"]
    """
    if not (_is_int(steps_per_execution) and steps_per_execution >= 1):  # type: ignore[operator]
        return [f"'steps_per_execution' must be an int >= 1; got {steps_per_execution!r}"]
    if not (_is_int(steps_per_epoch) and steps_per_epoch > 0):  # type: ignore[operator]
        return [f"'steps_per_epoch' must be an int > 0; got {steps_per_epoch!r}"]
    k, n = int(steps_per_execution), int(steps_per_epoch)  # type: ignore[call-overload]
    if n % k == 0:
        return []
    below = max((d for d in range(1, k) if n % d == 0), default=None)
    above = min((d for d in range(k + 1, n + 1) if n % d == 0), default=None)
    near = ", ".join(str(d) for d in (below, above) if d is not None)
    return [
        f"'steps_per_execution' {k} must divide 'steps_per_epoch' {n} (an epoch is a whole "
        f"number of session calls); divisors near {k}: {near}"
    ]


def check_steps_per_execution(steps_per_epoch: object, steps_per_execution: object) -> None:
    """Raise for a ``steps_per_execution`` that cannot run epochs of ``steps_per_epoch``.

    .. versionadded:: 0.2

    Raises:
        TypeError: ``steps_per_execution`` is not an int.
        ValueError: it is < 1 or does not divide ``steps_per_epoch`` (both named).

    Examples:
        >>> check_steps_per_execution(64, 32)
        >>> check_steps_per_execution(64, 48)
        Traceback (most recent call last):
        ...
        ValueError: 'steps_per_execution' 48 must divide 'steps_per_epoch' 64 (an epoch is a whole number of session calls); divisors near 48: 32, 64
    """
    faults = execution_faults(steps_per_epoch, steps_per_execution)
    if faults:
        kind = TypeError if not _is_int(steps_per_execution) else ValueError
        raise kind("; ".join(faults))


def execution_ends(steps_per_epoch: int, steps_per_execution: int) -> range:
    """The 0-based local steps at which a session call ends, in one epoch.

    With K steps per call, the callbacks' per-step hooks run once per call, at the
    last step of its K: local steps ``K - 1, 2K - 1, ..., steps_per_epoch - 1``.

    .. versionadded:: 0.2

    Examples:
        >>> list(execution_ends(6, 2))
        [1, 3, 5]
        >>> list(execution_ends(3, 1))
        [0, 1, 2]
    """
    check_steps_per_execution(steps_per_epoch, steps_per_execution)
    return range(steps_per_execution - 1, steps_per_epoch, steps_per_execution)


def coarse_step_faults(trigger: Trigger, steps_per_execution: int) -> list[str]:
    """Why ``trigger`` would need a global step inside a call of K steps; empty when it never does.

    With K steps per call the loop sees only global steps that end a call (multiples
    of K when the run starts at one). A step period that is not a multiple of K would
    fire inside a call, where no callback runs. Epoch periods, the last step, event
    kinds and combinations of those are fine.

    .. versionadded:: 0.2

    Examples:
        >>> coarse_step_faults(EveryK(steps=100, epochs=1), 50)
        []
        >>> coarse_step_faults(EveryK(steps=30), 50)
        ['a period of 30 global steps is not a multiple of steps_per_execution=50']
        >>> coarse_step_faults(GlobalStepMultiple(7), 1)
        []
    """
    if not isinstance(trigger, Trigger):
        msg = f"'trigger' must be a trigger record; got {type(trigger).__name__}"
        raise TypeError(msg)
    if steps_per_execution == 1:
        return []
    period: int | None = None
    if isinstance(trigger, EveryK):
        period = trigger.steps
    elif isinstance(trigger, GlobalStepMultiple):
        period = trigger.k
    elif isinstance(trigger, AnyOf | AllOf):
        return [f for t in trigger.triggers for f in coarse_step_faults(t, steps_per_execution)]
    elif isinstance(trigger, Not):
        return coarse_step_faults(trigger.trigger, steps_per_execution)
    if period is not None and period % steps_per_execution:
        return [
            f"a period of {period} global steps is not a multiple of "
            f"steps_per_execution={steps_per_execution}"
        ]
    return []
