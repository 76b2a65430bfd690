"""The loop driver: the one hot loop of every trainer, its counters, and its hook point.

`LoopDriver` is the part of a `Trainer` that runs epochs of steps: it holds the
loop's position (``epoch_num``, ``local_step``), the run's `LoopBounds`, the steps per
session call (K) and the global step the run started from, which the trainer's
properties of the same names read. ``drive`` is the loop itself, written by hand for
speed: everything invariant is looked up once, and a step is a ``run_step`` call, the
callbacks' ``trigger_step`` and the stop check, nothing else.

The hook point is `LoopHooks`: where a run starts in each epoch (the ``(epoch, steps
done)`` pairs ``drive`` is given), whether an epoch's ``before_epoch`` runs, a call
after every ``every`` steps inside an epoch, and one after an epoch's end. The plain
trainer drives with `PLAIN_HOOKS`; elastic horovod (`parallel/_elastic.py`) commits
its state through ``after_steps`` and ``after_epoch`` and runs ``before_epoch`` once
per epoch even after rolling back into it. The cluster trainers run the plain drive
and read the position through the trainer's public properties.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from towerkit.callbacks import LoopBounds
from towerkit.callbacks.plumbing import check_steps_per_execution
from towerkit.trainers._loop_end import end_epoch, stop_requested

if TYPE_CHECKING:
    from towerkit.trainers._interrupt import StopControl

__all__ = ["PLAIN_HOOKS", "LoopDriver", "LoopHooks", "LoopRun", "epoch_starts", "step_segments"]

logger = logging.getLogger("towerkit.trainers")


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        msg = f"{attr.name!r} must be an int >= 1; got {value!r}"
        raise ValueError(msg)


@attrs.frozen
class LoopHooks:
    """The hook point of `LoopDriver.drive`: what a trainer adds around the plain loop.

    Attributes:
        begin_epoch: given an epoch about to run, whether its callbacks' ``before_epoch``
            runs (None: every epoch's does).
        after_steps: called with ``(epoch, steps done)`` after every ``every`` steps
            inside an epoch (at the end of a session call; not after the epoch's last
            step), once the step's triggers and the stop check passed.
        every: steps between two ``after_steps`` calls.
        after_epoch: called with the epoch once its ``after_epoch`` and ``trigger_epoch``
            ran and the stop check passed.
        epoch_end_first: a preemption arriving in an epoch's last step lets the epoch end
            (its statistics, checkpoint and stoppers) before the loop stops.
        rewind_local_step: an epoch entered after ``d`` steps starts with ``local_step
            == d - 1`` (the last step done, where a roll-back returns to) rather than -1.
    """

    begin_epoch: Callable[[int], bool] | None = None
    after_steps: Callable[[int, int], None] | None = None
    every: int = attrs.field(default=1, validator=_positive)
    after_epoch: Callable[[int], None] | None = None
    epoch_end_first: bool = True
    rewind_local_step: bool = False


PLAIN_HOOKS = LoopHooks()
"""The plain trainer's hooks: none."""


@attrs.frozen
class LoopRun:
    """What one drive calls: the callbacks group, the step, and the two stop checks.

    Attributes:
        callbacks: the trainer's `Callbacks` group.
        run_step: one session call (K steps).
        should_stop: whether a hook asked the hooked session to stop.
        stop: the trainer's `StopControl` (Ctrl-C, preemption signals).
    """

    callbacks: Any
    run_step: Callable[[], None]
    should_stop: Callable[[], bool]
    stop: StopControl


def step_segments(
    done: int, steps_per_epoch: int, k: int, every: int | None
) -> tuple[tuple[range, int], ...]:
    """The steps of an epoch entered after `done` steps, cut where a hook runs between them.

    Each element is ``(steps, done_after)``: the ``local_step`` of each session call
    (the last of its K steps) and, when a hook runs after them, the steps done by then
    (0: none). `every` None: one segment, no hook. A hook runs after a call whose steps
    done are a multiple of `every`, unless it ends the epoch.

    Examples:
        >>> step_segments(0, 6, 1, None)
        ((range(0, 6), 0),)
        >>> step_segments(1, 6, 1, 2)
        ((range(1, 2), 2), (range(2, 4), 4), (range(4, 6), 0))
        >>> step_segments(0, 8, 2, 4)
        ((range(1, 4, 2), 4), (range(5, 8, 2), 0))

        An epoch of no step (an evaluation-only run) has no call:

        >>> step_segments(0, 0, 1, None)
        ((range(0, 0), 0),)

    Raises:
        ValueError: `done` outside the epoch or not at a call's end, or a non-positive
            `k` or `every`.
    """
    if k < 1 or (every is not None and every < 1):
        msg = f"steps per call and steps between hooks must be >= 1; got k={k}, every={every}"
        raise ValueError(msg)
    if not (0 <= done < steps_per_epoch or done == steps_per_epoch == 0) or done % k:
        msg = (
            f"an epoch of {steps_per_epoch} steps, {k} per call, cannot be entered "
            f"after {done} steps"
        )
        raise ValueError(msg)
    if every is None:
        return ((range(done + k - 1, steps_per_epoch, k), 0),)
    cuts = [d for d in range(done + k, steps_per_epoch, k) if d % every == 0]
    segments = []
    start = done
    for cut in cuts:
        segments.append((range(start + k - 1, cut, k), cut))
        start = cut
    segments.append((range(start + k - 1, steps_per_epoch, k), 0))
    return tuple(segments)


def epoch_starts(bounds: LoopBounds, done: int = 0) -> Iterator[tuple[int, int]]:
    """``(epoch, steps done)`` of each epoch of `bounds`: the first after `done` steps.

    Lazy (a run's ``max_epoch`` may be huge).

    Examples:
        >>> from towerkit.callbacks import LoopBounds
        >>> list(epoch_starts(LoopBounds(starting_epoch=2, max_epoch=4, steps_per_epoch=5), 3))
        [(2, 3), (3, 0), (4, 0)]
    """
    first = bounds.starting_epoch
    return ((epoch, done if epoch == first else 0) for epoch in bounds.epochs)


class LoopDriver:
    """The loop's position and the loop that moves it (see the module's docstring).

    Attributes:
        epoch_num: the running epoch (1-based); ``starting_epoch - 1`` before the first
            ``before_epoch``.
        local_step: 0-based index of the current step in its epoch; -1 before an epoch's
            first step.
        bounds: the run's `LoopBounds` (None before ``start``).
        steps_per_execution: steps per session call (K).
        start_global_step: the global step the run started from (a restored
            checkpoint's), less any steps counted again after an elastic roll-back.
    """

    __slots__ = ("bounds", "epoch_num", "local_step", "start_global_step", "steps_per_execution")

    def __init__(self) -> None:
        self.epoch_num = 0
        self.local_step = -1
        self.bounds: LoopBounds | None = None
        self.steps_per_execution = 1
        self.start_global_step = 0

    def start(self, bounds: LoopBounds) -> None:
        """Take the run's `bounds`; the position before its first epoch."""
        self.bounds = bounds
        self.epoch_num = bounds.starting_epoch - 1
        self.local_step = -1

    def bounds_for(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> LoopBounds:
        """The record of these bounds (validated); the steps per call must divide the epoch."""
        bounds = LoopBounds(
            starting_epoch=starting_epoch, max_epoch=max_epoch, steps_per_epoch=steps_per_epoch
        )
        check_steps_per_execution(steps_per_epoch, self.steps_per_execution)
        return bounds

    def global_step(self, run_calls: int) -> int:
        """The global step after `run_calls` session calls of this run."""
        return self.start_global_step + run_calls * self.steps_per_execution

    def rebase(self, global_step: int, run_calls: int) -> None:
        """Count the global step as `global_step` after this run's `run_calls` session calls.

        An elastic roll-back or sync moved the position there.
        """
        self.start_global_step = global_step - run_calls * self.steps_per_execution

    def stepped(self) -> bool:
        """Whether the position is past the run's first step (its first epoch's first call)."""
        bounds = self.bounds
        start = 1 if bounds is None else bounds.starting_epoch
        return self.local_step > 0 or self.epoch_num > start

    def drive(
        self, run: LoopRun, epochs: Iterable[tuple[int, int]], hooks: LoopHooks = PLAIN_HOOKS
    ) -> None:
        """Run each ``(epoch, steps done)`` of `epochs` to its end, calling the callbacks.

        Stops by raising `StopTraining` (a callback's, or `stop_requested`'s when a hook
        asked the session to stop or the stop control was asked to).
        """
        bounds = self.bounds
        if bounds is None:
            msg = "LoopDriver.drive() needs the run's bounds: call start(bounds) first"
            raise ValueError(msg)
        steps_per_epoch = bounds.steps_per_epoch
        k = self.steps_per_execution
        cbs = run.callbacks
        run_step = run.run_step
        triggers = tuple(cb.trigger_step for cb in cbs.with_hook("_trigger_step"))
        should_stop = run.should_stop
        interrupt = run.stop
        begin = hooks.begin_epoch
        after_steps = hooks.after_steps
        after_epoch = hooks.after_epoch
        every = None if after_steps is None else hooks.every
        last = steps_per_epoch - 1 if hooks.epoch_end_first else -1
        rewind = hooks.rewind_local_step
        whole = step_segments(0, steps_per_epoch, k, every)
        for epoch, done in epochs:
            self.epoch_num = epoch
            self.local_step = done - 1 if rewind else -1
            start = time.perf_counter()
            if begin is None or begin(epoch):
                cbs.before_epoch()
            segments = whole if done == 0 else step_segments(done, steps_per_epoch, k, every)
            for steps, done_after in segments:
                for step in steps:
                    self.local_step = step
                    run_step()
                    for trigger in triggers:
                        trigger()
                    if should_stop() or interrupt.requested:
                        if interrupt.preempted and step == last and not should_stop():
                            break  # the epoch's end first: its statistics, checkpoint and stoppers
                        raise stop_requested(should_stop())
                if done_after and after_steps is not None:
                    after_steps(epoch, done_after)
            elapsed = time.perf_counter() - start
            # after after_epoch, which ends the progress bar's line; ScalarPrinter's
            # epoch line says the same at INFO
            line = functools.partial(
                logger.debug, "epoch %d done: %d steps in %.2f s", epoch, steps_per_epoch, elapsed
            )
            end_epoch(cbs, line)  # whole, even when a callback stops training in it
            if should_stop() or interrupt.requested:
                raise stop_requested(should_stop())
            if after_epoch is not None:
                after_epoch(epoch)
