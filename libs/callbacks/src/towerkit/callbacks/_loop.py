"""The training loop as a pure stream of events with their positions."""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs
from attrs.validators import ge, gt, instance_of


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


def _check_epochs(instance: LoopPosition, attribute: attrs.Attribute, value: int) -> None:
    del attribute
    if value < instance.starting_epoch - 1:
        msg = (
            f"'max_epoch' must be >= 'starting_epoch' - 1 (an empty run); got "
            f"max_epoch={value}, starting_epoch={instance.starting_epoch}"
        )
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class LoopPosition:
    """Where the loop is.

    Attributes:
        starting_epoch: the first epoch of this run (1-based).
        max_epoch: the last epoch of this run, inclusive.
        steps_per_epoch: steps (``run_step`` calls) in each epoch.
        epoch_num: the running epoch (1-based); ``starting_epoch - 1`` before the
            first ``before_epoch``, ``max_epoch`` after the last ``trigger_epoch``.
        local_step: 0-based index of the current step in its epoch; ``-1`` before the
            first step of an epoch, ``steps_per_epoch - 1`` after its last step.
        global_step: ``hooked_sess.run`` calls so far, counting restored ones: the
            count before the call about to run in ``before_run``, after the call that
            just returned in ``after_run`` and ``trigger_step``.
    """

    starting_epoch: int = attrs.field(default=1, validator=[instance_of(int), ge(1)])
    max_epoch: int = attrs.field(validator=[instance_of(int), _check_epochs])
    steps_per_epoch: int = attrs.field(validator=[instance_of(int), gt(0)])
    epoch_num: int = attrs.field(validator=instance_of(int))
    local_step: int = attrs.field(default=-1, validator=[instance_of(int), ge(-1)])
    global_step: int = attrs.field(default=0, validator=[instance_of(int), ge(0)])

    @property
    def is_last_step(self) -> bool:
        """Whether this is the last step of the last epoch."""
        return self.epoch_num == self.max_epoch and self.local_step == self.steps_per_epoch - 1


@attrs.frozen
class LoopEvent:
    """One callback method call of the loop: its kind and the loop's position then.

    Examples:
        >>> pos = LoopPosition(max_epoch=2, steps_per_epoch=3, epoch_num=1, local_step=2, global_step=3)
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
) -> Iterator[LoopEvent]:
    """Yield every event of a training run, in the order the loop calls callbacks.

    Epochs run from ``starting_epoch`` to ``max_epoch`` inclusive, with
    ``steps_per_epoch`` steps each. Each step makes ``runs_per_step`` calls to
    ``hooked_sess.run`` (each framed by before_run/after_run), then one
    ``trigger_step``.

    Args:
        starting_epoch: first epoch (1-based).
        max_epoch: last epoch, inclusive.
        steps_per_epoch: steps per epoch (> 0).
        start_global_step: the global step restored at the start (>= 0).
        runs_per_step: ``hooked_sess.run`` calls per step (>= 0).

    Examples:
        >>> [e.kind.value for e in loop_events(1, 1, 1)]
        ['before_train', 'before_epoch', 'before_run', 'after_run', 'trigger_step', 'after_epoch', 'trigger_epoch', 'after_train']
        >>> [(e.epoch_num, e.local_step, e.global_step) for e in loop_events(2, 2, 2, start_global_step=4)
        ...  if e.kind is EventKind.TRIGGER_STEP]
        [(2, 0, 5), (2, 1, 6)]
    """
    if runs_per_step < 0:
        msg = f"'runs_per_step' must be >= 0; got {runs_per_step}"
        raise ValueError(msg)
    pos = LoopPosition(
        starting_epoch=starting_epoch,
        max_epoch=max_epoch,
        steps_per_epoch=steps_per_epoch,
        epoch_num=starting_epoch - 1,
        global_step=start_global_step,
    )
    evolve = attrs.evolve
    yield LoopEvent(EventKind.BEFORE_TRAIN, pos)
    for epoch in range(starting_epoch, max_epoch + 1):
        pos = evolve(pos, epoch_num=epoch, local_step=-1)
        yield LoopEvent(EventKind.BEFORE_EPOCH, pos)
        for step in range(steps_per_epoch):
            pos = evolve(pos, local_step=step)
            for _ in range(runs_per_step):
                yield LoopEvent(EventKind.BEFORE_RUN, pos)
                pos = evolve(pos, global_step=pos.global_step + 1)
                yield LoopEvent(EventKind.AFTER_RUN, pos)
            yield LoopEvent(EventKind.TRIGGER_STEP, pos)
        yield LoopEvent(EventKind.AFTER_EPOCH, pos)
        yield LoopEvent(EventKind.TRIGGER_EPOCH, pos)
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
