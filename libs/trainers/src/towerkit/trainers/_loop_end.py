"""How an epoch and a run end: a stop asked for at an epoch's end waits until the epoch is whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from towerkit.callbacks import StopTraining


def end_epoch(cbs: Any, between: Callable[[], None] | None = None) -> None:
    """``after_epoch`` then ``trigger_epoch`` of `cbs` (a `Callbacks`), as one whole.

    A `StopTraining` raised in ``after_epoch`` is raised once ``trigger_epoch`` has run
    too (the epoch's statistics are written, monitors and savers see it); the first one
    raised wins. `between` runs between the two (the loop's debug line).
    """
    stop: StopTraining | None = None
    try:
        cbs.after_epoch()
    except StopTraining as err:
        stop = err
    if between is not None:
        between()
    try:
        cbs.trigger_epoch()
    except StopTraining as err:
        stop = stop or err
    if stop is not None:
        raise stop


def stop_line(epoch_num: int, global_step: int, err: BaseException) -> str:
    """The line that says training stopped: where, who stopped it and why.

    `err` is the `StopTraining` that stopped it; its ``stopped_by`` (when set) names
    the callback, unless its message already starts with that name.

    Examples:
        >>> stop_line(5, 20, StopTraining("val has not improved for 2 epochs"))
        'training stopped at epoch 5, global step 20: val has not improved for 2 epochs'
        >>> e = StopTraining("no more data"); e.stopped_by = "Feeder"
        >>> stop_line(2, 8, e)
        'training stopped at epoch 2, global step 8 by Feeder: no more data'
        >>> e = StopTraining("Feeder: no more data"); e.stopped_by = "Feeder"
        >>> stop_line(2, 8, e)
        'training stopped at epoch 2, global step 8: Feeder: no more data'
        >>> stop_line(1, 3, StopTraining())
        'training stopped at epoch 1, global step 3'
    """
    text = str(err)
    by = getattr(err, "stopped_by", None)
    where = f"training stopped at epoch {epoch_num}, global step {global_step}"
    if by and not text.startswith(by):
        where += f" by {by}"
    return f"{where}: {text}" if text else where


class SignalStop(StopTraining):
    """The loop's own stop for a signal (Ctrl-C, preemption): no callback decided it."""


def stop_requested(hook_asked: bool) -> StopTraining:
    """The `StopTraining` the loop raises when asked to stop between steps.

    A hook that asked the hooked session to stop (`hook_asked`) is a callback's
    decision, a plain `StopTraining`; otherwise only a signal asked, a `SignalStop`.
    """
    msg = "stop requested"
    return StopTraining(msg) if hook_asked else SignalStop(msg)


LoopOutcome = Literal["stopped", "preempted", "interrupted"]


def loop_outcome(*, callback_stop: bool, preempted: bool, ctrl_c: bool) -> LoopOutcome:
    """How a run whose loop a `StopTraining` ended ends: a callback's stop wins over a preemption.

    Args:
        callback_stop: a callback (or a hook) decided to stop (``EarlyStopping``,
            a time limit, ...), rather than the loop reacting to a signal alone.
        preempted: a preemption signal was pending (`PreemptionPolicy`).
        ctrl_c: Ctrl-C asked the loop to stop.

    Returns:
        ``"interrupted"`` after Ctrl-C (the run ends by ``KeyboardInterrupt``, as the
        person at the terminal asked); otherwise ``"stopped"`` when a callback stopped
        training, even with a preemption pending: training is over, so the run ends as
        any stopped run does (status 0, saved as a stopped run is) and a rerun of the
        command does no more than after an ordinary stop; ``"preempted"`` when only the
        preemption asked (the run saves where it is and exits with status 143 to be
        resumed).

    Examples:
        >>> loop_outcome(callback_stop=True, preempted=True, ctrl_c=False)
        'stopped'
        >>> loop_outcome(callback_stop=False, preempted=True, ctrl_c=False)
        'preempted'
        >>> loop_outcome(callback_stop=True, preempted=False, ctrl_c=True)
        'interrupted'

    .. versionadded:: 0.2
    """
    if ctrl_c:
        return "interrupted"
    if preempted and not callback_stop:
        return "preempted"
    return "stopped"
