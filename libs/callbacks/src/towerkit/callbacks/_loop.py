"""The training loop as a pure stream of events with their positions."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

import attrs
from attrs.validators import ge, instance_of


class EventKind(str, enum.Enum):
    """What the loop is doing at an event: one member per callback method the loop calls."""

    BEFORE_TRAIN = "before_train"
    BEFORE_EPOCH = "before_epoch"
    BEFORE_RUN = "before_run"
    AFTER_RUN = "after_run"
    TRIGGER_STEP = "trigger_step"
    AFTER_EPOCH = "after_epoch"
    TRIGGER_EPOCH = "trigger_epoch"
    AFTER_TRAIN = "after_train"

    def __repr__(self) -> str:
        return f"EventKind.{self.name}"


STEP_KINDS = frozenset({EventKind.BEFORE_RUN, EventKind.AFTER_RUN, EventKind.TRIGGER_STEP})
"""The kinds of event that happen at every step (the others happen per epoch or per run)."""

TRIGGER_KINDS = (EventKind.BEFORE_TRAIN, EventKind.TRIGGER_STEP, EventKind.TRIGGER_EPOCH)
"""Where trigger records act, in loop order: before training, after each step, after each epoch.

The one list: ``PeriodicTrigger`` evaluates its record at these kinds, a timeline entry
does by default (``DEFAULT_KINDS``), and the timeline tool reads it from here.
"""

GATED_KINDS = (
    EventKind.BEFORE_EPOCH,
    EventKind.AFTER_EPOCH,
    EventKind.BEFORE_RUN,
    EventKind.AFTER_RUN,
    EventKind.TRIGGER_STEP,
    EventKind.TRIGGER_EPOCH,
)
"""The methods ``EnableCallbackIf`` and ``PeriodicCallback`` gate, as event kinds.

The one list: the shells derive their method names from it, the timeline tool the
``methods`` a ``PeriodicCallback`` entry may name.
"""

GATE_KINDS = tuple(kind for kind in GATED_KINDS if kind is not EventKind.AFTER_RUN)
"""The gated kinds where a gate is evaluated: ``after_run`` follows its ``before_run``'s decision."""


def bounds_faults(starting_epoch: object, max_epoch: object, steps_per_epoch: object) -> list[str]:
    """Every fault of a run's loop bounds, one message each; empty when they are good.

    The one place the bounds are checked: `LoopBounds` and `LoopPosition` raise from it.

    Examples:
        >>> bounds_faults(1, 3, 10)
        []
        >>> bounds_faults(0, 3, -1)
        ["'starting_epoch' must be an int >= 1 (1-based); got 0", "'steps_per_epoch' must be an int >= 0 (0: epochs of no step, an evaluation); got -1"]
        >>> bounds_faults(5, 2, 1)
        ["'max_epoch' must be >= 'starting_epoch' - 1 (an empty run); got max_epoch=2, starting_epoch=5"]
    """
    faults = []
    starting_ok = _is_int(starting_epoch) and starting_epoch >= 1  # type: ignore[operator]
    if not starting_ok:
        faults.append(f"'starting_epoch' must be an int >= 1 (1-based); got {starting_epoch!r}")
    if not _is_int(max_epoch):
        faults.append(f"'max_epoch' must be an int; got {max_epoch!r}")
    elif starting_ok and max_epoch < starting_epoch - 1:  # type: ignore[operator]
        faults.append(
            f"'max_epoch' must be >= 'starting_epoch' - 1 (an empty run); got "
            f"max_epoch={max_epoch}, starting_epoch={starting_epoch}"
        )
    if not (_is_int(steps_per_epoch) and steps_per_epoch >= 0):  # type: ignore[operator]
        faults.append(
            f"'steps_per_epoch' must be an int >= 0 (0: epochs of no step, an evaluation); "
            f"got {steps_per_epoch!r}"
        )
    return faults


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_bounds(starting_epoch: object, max_epoch: object, steps_per_epoch: object) -> None:
    """Raise for bad loop bounds, listing every fault (`bounds_faults`).

    Raises:
        TypeError: a bound is not an int (the message lists the other faults too).
        ValueError: a bound is out of range.
    """
    faults = bounds_faults(starting_epoch, max_epoch, steps_per_epoch)
    if faults:
        kinds = not all(map(_is_int, (starting_epoch, max_epoch, steps_per_epoch)))
        msg = "; ".join(faults)
        raise (TypeError if kinds else ValueError)(msg)


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
    if not (_is_int(steps_per_epoch) and steps_per_epoch >= 0):  # type: ignore[operator]
        return [f"'steps_per_epoch' must be an int >= 0; got {steps_per_epoch!r}"]
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


@attrs.frozen(kw_only=True)
class LoopBounds:
    """The bounds of a run: which epochs run and how many steps each has.

    The one record of the loop's bounds, validated once at construction: `TrainConfig`,
    the trainer's ``main_loop``, the conformance suite and the timeline tool build it.

    Attributes:
        starting_epoch: the first epoch (1-based).
        max_epoch: the last epoch, inclusive; ``starting_epoch - 1`` is an empty run.
        steps_per_epoch: steps (``run_step`` calls) in each epoch (>= 0; 0: epochs of no
            step, whose epoch hooks run: an evaluation-only run).

    Examples:
        >>> b = LoopBounds(starting_epoch=2, max_epoch=3, steps_per_epoch=10)
        >>> b
        LoopBounds(starting_epoch=2, max_epoch=3, steps_per_epoch=10)
        >>> (list(b.epochs), b.total_steps)
        ([2, 3], 20)
        >>> LoopBounds(starting_epoch=4, max_epoch=2, steps_per_epoch=-1)
        Traceback (most recent call last):
        ...
        ValueError: 'max_epoch' must be >= 'starting_epoch' - 1 (an empty run); got max_epoch=2, starting_epoch=4; 'steps_per_epoch' must be an int >= 0 (0: epochs of no step, an evaluation); got -1
    """

    starting_epoch: int = 1
    max_epoch: int
    steps_per_epoch: int

    def __attrs_post_init__(self) -> None:
        check_bounds(self.starting_epoch, self.max_epoch, self.steps_per_epoch)

    @property
    def epochs(self) -> range:
        """The epochs of the run, ``starting_epoch..max_epoch`` inclusive."""
        return range(self.starting_epoch, self.max_epoch + 1)

    @property
    def total_steps(self) -> int:
        """The number of steps the run makes."""
        return count_steps(self.starting_epoch, self.max_epoch, self.steps_per_epoch)

    def events(
        self, *, start_global_step: int = 0, runs_per_step: int = 1, steps_per_execution: int = 1
    ) -> Iterator[LoopEvent]:
        """`loop_events` of these bounds."""
        return loop_events(
            self.starting_epoch,
            self.max_epoch,
            self.steps_per_epoch,
            start_global_step=start_global_step,
            runs_per_step=runs_per_step,
            steps_per_execution=steps_per_execution,
        )


@attrs.frozen(kw_only=True)
class LoopPosition:
    """Where the loop is: the run's bounds and the counters within them.

    Attributes:
        bounds: the run's `LoopBounds` (validated once, when it was built; a position
            holds it, never copies of its fields).
        epoch_num: the running epoch (1-based); ``starting_epoch - 1`` before the
            first ``before_epoch``, ``max_epoch`` after the last ``trigger_epoch``.
        local_step: 0-based index of the current step in its epoch; ``-1`` before the
            first step of an epoch, ``steps_per_epoch - 1`` after its last step.
        global_step: ``hooked_sess.run`` calls so far, counting restored ones: the
            count before the call about to run in ``before_run``, after the call that
            just returned in ``after_run`` and ``trigger_step``.

    Examples:
        >>> pos = LoopPosition(bounds=LoopBounds(max_epoch=2, steps_per_epoch=3), epoch_num=2,
        ...                    local_step=2, global_step=6)
        >>> (pos.starting_epoch, pos.max_epoch, pos.steps_per_epoch, pos.is_last_step)
        (1, 2, 3, True)
    """

    bounds: LoopBounds = attrs.field(validator=instance_of(LoopBounds))
    epoch_num: int = attrs.field(validator=instance_of(int))
    local_step: int = attrs.field(default=-1, validator=[instance_of(int), ge(-1)])
    global_step: int = attrs.field(default=0, validator=[instance_of(int), ge(0)])

    @property
    def starting_epoch(self) -> int:
        """The first epoch of this run (1-based): ``bounds.starting_epoch``."""
        return self.bounds.starting_epoch

    @property
    def max_epoch(self) -> int:
        """The last epoch of this run, inclusive: ``bounds.max_epoch``."""
        return self.bounds.max_epoch

    @property
    def steps_per_epoch(self) -> int:
        """Steps (``run_step`` calls) in each epoch: ``bounds.steps_per_epoch``."""
        return self.bounds.steps_per_epoch

    @property
    def is_last_step(self) -> bool:
        """Whether this is the last step of the last epoch."""
        bounds = self.bounds
        return self.epoch_num == bounds.max_epoch and self.local_step == bounds.steps_per_epoch - 1


@attrs.frozen
class LoopEvent:
    """One callback method call of the loop: its kind and the loop's position then.

    Examples:
        >>> pos = LoopPosition(bounds=LoopBounds(max_epoch=2, steps_per_epoch=3), epoch_num=1,
        ...                    local_step=2, global_step=3)
        >>> ev = LoopEvent(EventKind.TRIGGER_STEP, pos)
        >>> (ev.epoch_num, ev.local_step, ev.global_step)
        (1, 2, 3)
    """

    kind: EventKind
    position: LoopPosition

    @property
    def epoch_num(self) -> int:
        """The running epoch (1-based)."""
        return self.position.epoch_num

    @property
    def local_step(self) -> int:
        """The 0-based step index in the epoch."""
        return self.position.local_step

    @property
    def global_step(self) -> int:
        """``hooked_sess.run`` calls so far."""
        return self.position.global_step


def loop_events(
    starting_epoch: int,
    max_epoch: int,
    steps_per_epoch: int,
    *,
    start_global_step: int = 0,
    runs_per_step: int = 1,
    kinds: Iterable[EventKind] | None = None,
    steps_per_execution: int = 1,
) -> Iterator[LoopEvent]:
    """Yield every event of a training run, in the order the loop calls callbacks.

    Epochs run from ``starting_epoch`` to ``max_epoch`` inclusive, with
    ``steps_per_epoch`` steps each. Each step makes ``runs_per_step`` calls to
    ``hooked_sess.run`` (each framed by before_run/after_run), then one
    ``trigger_step``.

    Args:
        starting_epoch: first epoch (1-based).
        max_epoch: last epoch, inclusive.
        steps_per_epoch: steps per epoch (>= 0; 0: only the epoch events, an
            evaluation-only run).
        start_global_step: the global step restored at the start (>= 0).
        runs_per_step: ``hooked_sess.run`` calls per step (>= 0).
        kinds: yield only the events of these kinds (all when None), the same as
            filtering the full stream; without step kinds the steps are counted, not
            walked, so a long run's epoch events come at once.
        steps_per_execution: training steps per session call (K, dividing
            ``steps_per_epoch``): each ``hooked_sess.run`` advances the global step by
            K, and the step events come once per call, at the last local step of its K
            (``K - 1, 2K - 1, ...``). Epoch events are the same for every K.

    .. versionchanged:: 0.2
       ``steps_per_execution``.

    Examples:
        >>> [e.kind.value for e in loop_events(1, 1, 1)]
        ['before_train', 'before_epoch', 'before_run', 'after_run', 'trigger_step', 'after_epoch', 'trigger_epoch', 'after_train']
        >>> [(e.epoch_num, e.local_step, e.global_step) for e in loop_events(2, 2, 2, start_global_step=4)
        ...  if e.kind is EventKind.TRIGGER_STEP]
        [(2, 0, 5), (2, 1, 6)]
        >>> [(e.local_step, e.global_step) for e in loop_events(1, 1, 6, steps_per_execution=3)
        ...  if e.kind is EventKind.TRIGGER_STEP]
        [(2, 3), (5, 6)]
    """
    check_bounds(starting_epoch, max_epoch, steps_per_epoch)
    k = steps_per_execution
    if k != 1:
        check_steps_per_execution(steps_per_epoch, k)
    if runs_per_step < 0:
        msg = f"'runs_per_step' must be >= 0; got {runs_per_step}"
        raise ValueError(msg)
    pos = LoopPosition(
        bounds=LoopBounds(
            starting_epoch=starting_epoch, max_epoch=max_epoch, steps_per_epoch=steps_per_epoch
        ),
        epoch_num=starting_epoch - 1,
        global_step=start_global_step,
    )
    wanted = frozenset(EventKind) if kinds is None else frozenset(map(EventKind, kinds))
    walk_steps = not wanted.isdisjoint(STEP_KINDS)
    evolve = attrs.evolve
    if EventKind.BEFORE_TRAIN in wanted:
        yield LoopEvent(EventKind.BEFORE_TRAIN, pos)
    for epoch in range(starting_epoch, max_epoch + 1):
        pos = evolve(pos, epoch_num=epoch, local_step=-1)
        if EventKind.BEFORE_EPOCH in wanted:
            yield LoopEvent(EventKind.BEFORE_EPOCH, pos)
        if walk_steps:
            for step in range(k - 1, steps_per_epoch, k):
                pos = evolve(pos, local_step=step)
                for _ in range(runs_per_step):
                    if EventKind.BEFORE_RUN in wanted:
                        yield LoopEvent(EventKind.BEFORE_RUN, pos)
                    pos = evolve(pos, global_step=pos.global_step + k)
                    if EventKind.AFTER_RUN in wanted:
                        yield LoopEvent(EventKind.AFTER_RUN, pos)
                if EventKind.TRIGGER_STEP in wanted:
                    yield LoopEvent(EventKind.TRIGGER_STEP, pos)
        else:
            pos = evolve(
                pos,
                local_step=steps_per_epoch - 1,
                global_step=pos.global_step + steps_per_epoch * runs_per_step,
            )
        for kind in (EventKind.AFTER_EPOCH, EventKind.TRIGGER_EPOCH):
            if kind in wanted:
                yield LoopEvent(kind, pos)
    if EventKind.AFTER_TRAIN in wanted:
        yield LoopEvent(EventKind.AFTER_TRAIN, pos)


def count_steps(starting_epoch: int, max_epoch: int, steps_per_epoch: int) -> int:
    """The number of steps a run makes.

    Examples:
        >>> count_steps(1, 3, 10)
        30
        >>> count_steps(4, 3, 10)
        0
    """
    return max(0, max_epoch - starting_epoch + 1) * steps_per_epoch
