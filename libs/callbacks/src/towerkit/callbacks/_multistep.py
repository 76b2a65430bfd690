"""Several training steps per session call: which loop positions a call ends at, and what it rules out."""

from __future__ import annotations

from towerkit.callbacks._loop import check_steps_per_execution
from towerkit.callbacks._triggers import (
    AllOf,
    AnyOf,
    EveryK,
    GlobalStepMultiple,
    Not,
    Trigger,
)


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
