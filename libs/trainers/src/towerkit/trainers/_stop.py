"""The stop control's core: what asked the loop to stop, as a record, and its transitions (pure).

Four things stop a run before its last epoch: Ctrl-C (the first SIGINT asks the loop to
stop after the step, a second one aborts), a preemption signal (SIGTERM, SIGUSR1: save
and stop; where the processes of a job stop together, once they agreed), a callback's
`StopTraining` (training is over), and the agreement across ranks or workers that
a preemption signal reached one of them. `StopState` is where a run stands with them,
`next_stop_state` the one transition, `stop_outcome` how the run ends. The shell,
`StopControl` (``_interrupt``), applies the events as signals and callbacks bring
them and keeps the flags the loop polls.
"""

from __future__ import annotations

import enum

import attrs

from towerkit.trainers._loop_end import LoopOutcome, loop_outcome

__all__ = [
    "SigintStep",
    "StopEvent",
    "StopState",
    "join_stop_states",
    "next_stop_state",
    "sigint_step",
    "stop_outcome",
]


@attrs.frozen(kw_only=True)
class SigintStep:
    """What one more SIGINT does, given how many arrived before it.

    Attributes:
        count: SIGINTs so far, this one included (1-based).
        request_stop: the loop is to stop after the current step (the first SIGINT).
        abort: stop at once (the second SIGINT and later).
    """

    count: int
    request_stop: bool
    abort: bool


def sigint_step(before: int) -> SigintStep:
    """The effect of a SIGINT after `before` earlier ones: stop after the step, then abort.

    Examples:
        >>> sigint_step(0)
        SigintStep(count=1, request_stop=True, abort=False)
        >>> sigint_step(1).abort
        True
    """
    if before < 0:
        msg = f"'before' must be a count of SIGINTs >= 0; got {before}"
        raise ValueError(msg)
    count = before + 1
    return SigintStep(count=count, request_stop=count == 1, abort=count >= 2)


class StopEvent(enum.Enum):
    """What can happen to a running loop's stop control."""

    SIGINT = "sigint"
    """Ctrl-C: the first asks the loop to stop after the step, the second aborts."""
    PREEMPT_SIGNAL = "preempt_signal"
    """A preemption signal reached this process (a second one exits: the shell's business)."""
    AGREED = "agreed"
    """The job's processes agreed to stop for a preemption (or this one alone, uncoordinated)."""
    ABORT_RAISED = "abort_raised"
    """The main thread raised the abort's ``KeyboardInterrupt``."""
    STOP_TRAINING = "stop_training"
    """A callback (or a hook asking the hooked session to stop) ended training."""


@attrs.frozen(kw_only=True)
class StopState:
    """Where a run stands with what stops it; every flag, once set, stays set.

    Attributes:
        coordinated: the job's processes agree on the step they stop at for a
            preemption (horovod ranks, cluster workers): a signal then only sets
            ``signalled`` and `StopEvent.AGREED` sets ``preempted``.
        sigints: the SIGINTs counted so far.
        signalled: a preemption signal arrived in this process.
        preempted: the loop is to save and stop for a preemption.
        requested: the loop stops at the next step boundary (Ctrl-C or a preemption).
        aborted: the second Ctrl-C arrived: stop at once.
        raised: the abort's ``KeyboardInterrupt`` has been raised.
        callback_stop: a callback's `StopTraining` ended training.

    Examples:
        >>> StopState().requested, StopState(coordinated=True).coordinated
        (False, True)
    """

    coordinated: bool = False
    sigints: int = 0
    signalled: bool = False
    preempted: bool = False
    requested: bool = False
    aborted: bool = False
    raised: bool = False
    callback_stop: bool = False

    @property
    def ctrl_c(self) -> bool:
        """Ctrl-C asked the loop to stop, and no preemption took the stop over."""
        return self.sigints > 0 and not self.preempted


def next_stop_state(state: StopState, event: StopEvent) -> StopState:
    """The state after `event`: the stop control's one transition.

    - `StopEvent.SIGINT`: one more counted; the first sets ``requested``, the second
      ``aborted`` (`sigint_step`'s rule).
    - `StopEvent.PREEMPT_SIGNAL`: ``signalled``; uncoordinated, also ``preempted`` and
      ``requested`` (the process agrees with itself). Later ones change nothing here.
    - `StopEvent.AGREED`: ``preempted`` and ``requested``.
    - `StopEvent.ABORT_RAISED`: ``raised``, once ``aborted`` (else nothing).
    - `StopEvent.STOP_TRAINING`: ``callback_stop``.

    Examples:
        >>> s = next_stop_state(StopState(), StopEvent.SIGINT)
        >>> s.requested, s.aborted, next_stop_state(s, StopEvent.SIGINT).aborted
        (True, False, True)
        >>> s = next_stop_state(StopState(coordinated=True), StopEvent.PREEMPT_SIGNAL)
        >>> s.signalled, s.preempted, next_stop_state(s, StopEvent.AGREED).preempted
        (True, False, True)
    """
    if event is StopEvent.SIGINT:
        step = sigint_step(state.sigints)
        return attrs.evolve(
            state,
            sigints=step.count,
            requested=state.requested or step.request_stop,
            aborted=state.aborted or step.abort,
        )
    if event is StopEvent.PREEMPT_SIGNAL:
        if state.signalled:
            return state
        if state.coordinated:
            return attrs.evolve(state, signalled=True)
        return attrs.evolve(state, signalled=True, preempted=True, requested=True)
    if event is StopEvent.AGREED:
        return attrs.evolve(state, preempted=True, requested=True)
    if event is StopEvent.ABORT_RAISED:
        return attrs.evolve(state, raised=True) if state.aborted else state
    if event is StopEvent.STOP_TRAINING:
        return attrs.evolve(state, callback_stop=True)
    msg = f"'event' must be a StopEvent; got {event!r}"
    raise TypeError(msg)


def join_stop_states(a: StopState, b: StopState) -> StopState:
    """Both states' flags set, the larger count: what two updates from one state add up to.

    The shell joins a transition's result with the state it finds when it stores it,
    so an update made in between (a signal handler running in the main thread) is kept.

    Examples:
        >>> a = StopState(sigints=1, requested=True)
        >>> b = StopState(signalled=True, preempted=True, requested=True)
        >>> join_stop_states(a, b) == StopState(sigints=1, signalled=True, preempted=True, requested=True)
        True
    """
    return StopState(
        coordinated=a.coordinated or b.coordinated,
        sigints=max(a.sigints, b.sigints),
        signalled=a.signalled or b.signalled,
        preempted=a.preempted or b.preempted,
        requested=a.requested or b.requested,
        aborted=a.aborted or b.aborted,
        raised=a.raised or b.raised,
        callback_stop=a.callback_stop or b.callback_stop,
    )


def stop_outcome(state: StopState) -> LoopOutcome:
    """How a run whose loop a `StopTraining` ended ends, from its stop state (`loop_outcome`).

    A callback's stop wins over a pending preemption; Ctrl-C wins over both.

    Examples:
        >>> s = next_stop_state(StopState(), StopEvent.PREEMPT_SIGNAL)
        >>> stop_outcome(s), stop_outcome(next_stop_state(s, StopEvent.STOP_TRAINING))
        ('preempted', 'stopped')
    """
    return loop_outcome(
        callback_stop=state.callback_stop, preempted=state.preempted, ctrl_c=state.ctrl_c
    )
