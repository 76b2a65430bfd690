"""PeriodicTrigger, TimedTrigger, PeriodicCallback and EnableCallbackIf: callback shells over trigger records."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from towerkit.callbacks._base import Callback, ProxyCallback
from towerkit.callbacks._loop import GATE_KINDS, GATED_KINDS, TRIGGER_KINDS, EventKind
from towerkit.callbacks._multistep import coarse_step_faults
from towerkit.callbacks._shell_records import gate_kinds, periodic_trigger_record
from towerkit.callbacks._timer import TimerState, WallClockInterval, advance_timer
from towerkit.callbacks._triggers import (
    AnyOf,
    EveryK,
    Trigger,
    fires,
    firing_kinds,
    periodic_record,
    trainer_event,
)

_TRIGGER_METHODS = tuple(f"_{kind.value}" for kind in TRIGGER_KINDS)
_GATED = tuple(f"_{kind.value}" for kind in GATED_KINDS)


class PeriodicTrigger(ProxyCallback):
    """Call a callback's ``trigger()`` every k global steps and/or every k epochs.

    Most callbacks act in ``trigger()``, which the loop calls once per epoch; this
    wrapper calls it on the schedule of an :class:`EveryK` record instead: in
    ``trigger_step`` when ``global_step % every_k_steps == 0`` (the global step after
    the step's run), in ``trigger_epoch`` when ``epoch_num % every_k_epochs == 0``
    (1-based epochs), and in ``before_train`` when ``before_train`` is set. The
    wrapped callback's own ``trigger_epoch`` is replaced by this schedule; its other
    methods (``before_run``, ``trigger_step``, ...) run as usual.

    Args:
        triggerable: the callback whose ``trigger()`` to call.
        every_k_steps: period in global steps, or None.
        every_k_epochs: period in epochs, or None.
        before_train: also trigger in ``before_train``.

    Raises:
        ValueError: neither period is set and ``before_train`` is False, or a period is <= 0.
    """

    def __init__(
        self,
        triggerable: Callback,
        every_k_steps: int | None = None,
        every_k_epochs: int | None = None,
        before_train: bool = False,
    ) -> None:
        built = periodic_trigger_record(every_k_steps, every_k_epochs, before_train)
        super().__init__(triggerable)
        self._record = cast(EveryK, built.trigger)
        self._trigger_kinds = built.kinds
        self._kinds = firing_kinds(self._record)
        self._at_step = EventKind.TRIGGER_STEP in self._kinds

    @property
    def trigger_record(self) -> EveryK:
        """The :class:`EveryK` record this wrapper follows."""
        return self._record

    @property
    def trigger_kinds(self) -> tuple[EventKind, ...]:
        """The event kinds at which the record is evaluated."""
        return self._trigger_kinds

    def has_hook(self, method: str) -> bool:
        if method in _TRIGGER_METHODS:
            return EventKind(method[1:]) in self._kinds or (
                method != "_trigger_epoch" and self.cb.has_hook(method)
            )
        return super().has_hook(method)

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        own = coarse_step_faults(self._record, steps_per_execution)
        return [f"{self}: {f}" for f in own] + self.cb.coarse_steps_faults(steps_per_execution)

    def _trigger_if_fires(self, kind: EventKind) -> None:
        # The kinds where the record cannot fire are known at construction: no event is built there.
        if kind in self._kinds and fires(self._record, trainer_event(self.trainer, kind)):
            self.cb.trigger()

    def _before_train(self) -> None:
        self.cb.before_train()
        self._trigger_if_fires(EventKind.BEFORE_TRAIN)

    def _trigger_step(self) -> None:
        self.cb.trigger_step()
        if self._at_step and fires(
            self._record, trainer_event(self.trainer, EventKind.TRIGGER_STEP)
        ):
            self.cb.trigger()

    def _trigger_epoch(self) -> None:
        self._trigger_if_fires(EventKind.TRIGGER_EPOCH)

    def __str__(self) -> str:
        r = self._record
        return f"PeriodicTrigger({self.cb}, steps={r.steps}, epochs={r.epochs}, before_train={r.before_train})"


class TimedTrigger(ProxyCallback):
    """Call a callback's ``trigger()`` every N minutes of wall clock, next to its own schedule.

    After each step (in ``trigger_step``), ``trigger()`` of ``triggerable`` is called
    when ``every_n_minutes`` have passed (``time.monotonic``, the pure rule
    :func:`advance_timer` over a :class:`WallClockInterval`) since the last time it
    was triggered: by this wrapper, or by its own ``trigger_epoch``, which still runs
    (so ``TimedTrigger(cb, 10)`` triggers ``cb`` every epoch and whenever 10 minutes
    pass without one). The count starts at ``before_train``. To trigger by time only,
    wrap a callback whose own schedule never fires, or use ``ModelSaver(every_n_minutes=...)``
    for checkpoints, which counts from its last save whatever caused it (a preemption
    save included).

    .. versionadded:: 0.2

    Args:
        triggerable: the callback whose ``trigger()`` to call.
        every_n_minutes: the period, minutes of wall clock (a finite number > 0).
        clock: a function returning seconds (``time.monotonic`` by default; tests give
            a fake one).

    Raises:
        TypeError: ``every_n_minutes`` is not a number, or ``clock`` is not callable.
        ValueError: ``every_n_minutes`` is not finite or not > 0.
    """

    def __init__(
        self,
        triggerable: Callback,
        every_n_minutes: float,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if clock is not None and not callable(clock):
            msg = f"'clock' must be a function returning seconds; got {type(clock).__name__}"
            raise TypeError(msg)
        self._interval = WallClockInterval.from_minutes(every_n_minutes)
        super().__init__(triggerable)
        self._clock = time.monotonic if clock is None else clock
        self._timer = TimerState(0.0)

    @property
    def interval(self) -> WallClockInterval:
        """The :class:`WallClockInterval` this wrapper follows."""
        return self._interval

    def has_hook(self, method: str) -> bool:
        if method == "_trigger_step":
            return True
        return super().has_hook(method)

    def _before_train(self) -> None:
        self.cb.before_train()
        self._timer = TimerState(self._clock())

    def _trigger_step(self) -> None:
        self.cb.trigger_step()
        due, self._timer = advance_timer(self._interval, self._timer, self._clock())
        if due:
            self.cb.trigger()
            # the count runs from the end of the trigger: a slow one never fires at every step
            self._timer = TimerState(self._clock())

    def _trigger_epoch(self) -> None:
        self.cb.trigger_epoch()
        if self.cb.has_hook("_trigger_epoch"):
            self._timer = TimerState(self._clock())

    def __str__(self) -> str:
        return f"TimedTrigger({self.cb}, every_n_minutes={self._interval.seconds / 60.0:g})"


class EnableCallbackIf(ProxyCallback):
    """Run some methods of a callback only when a predicate holds.

    ``before_epoch``, ``after_epoch``, ``before_run``, ``after_run``, ``trigger_step``
    and ``trigger_epoch`` of ``callback`` are called only when ``pred`` is true at that
    moment; its other methods always run. For a run, ``pred`` is evaluated in
    ``before_run`` only, and ``after_run`` follows that decision.

    Args:
        callback: the callback to gate.
        pred: either a function ``pred(self) -> bool`` of this wrapper (read the loop
            counters from ``self.trainer``; it should have no side effects), or a
            trigger record evaluated with :func:`~towerkit.callbacks.fires` at the event
            of the method being called.
    """

    def __init__(
        self, callback: Callback, pred: Callable[[EnableCallbackIf], bool] | Trigger
    ) -> None:
        if not isinstance(pred, Trigger) and not callable(pred):
            msg = f"'pred' must be a callable pred(self) -> bool or a trigger record; got {type(pred).__name__}"
            raise TypeError(msg)
        super().__init__(callback)
        self._pred = pred
        self._run_enabled = False

    @property
    def trigger_record(self) -> Trigger | None:
        """The trigger record gating the callback, or None when ``pred`` is a function."""
        return self._pred if isinstance(self._pred, Trigger) else None

    @property
    def trigger_kinds(self) -> tuple[EventKind, ...]:
        """The gated event kinds the wrapped callback acts in (``after_run`` follows ``before_run``)."""
        acts = [kind for kind in GATE_KINDS if self.cb.has_hook(f"_{kind.value}")]
        return gate_kinds(acts) if acts else ()

    def _enabled(self, kind: EventKind) -> bool:
        pred = self._pred
        if isinstance(pred, Trigger):
            return fires(pred, trainer_event(self.trainer, kind))
        return bool(pred(self))

    def has_hook(self, method: str) -> bool:
        if method in _GATED:
            return self.cb.has_hook(method)
        return super().has_hook(method)

    def _before_epoch(self) -> None:
        if self._enabled(EventKind.BEFORE_EPOCH):
            self.cb.before_epoch()

    def _after_epoch(self) -> None:
        if self._enabled(EventKind.AFTER_EPOCH):
            self.cb.after_epoch()

    def _before_run(self, run_context: Any) -> Any:
        self._run_enabled = self._enabled(EventKind.BEFORE_RUN)
        if self._run_enabled:
            return self.cb.before_run(run_context)
        return None

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        if self._run_enabled:
            self.cb.after_run(run_context, run_values)

    def _trigger_step(self) -> None:
        if self._enabled(EventKind.TRIGGER_STEP):
            self.cb.trigger_step()

    def _trigger_epoch(self) -> None:
        if self._enabled(EventKind.TRIGGER_EPOCH):
            self.cb.trigger_epoch()

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        pred = self._pred
        own = coarse_step_faults(pred, steps_per_execution) if isinstance(pred, Trigger) else []
        return [f"{self}: {f}" for f in own] + self.cb.coarse_steps_faults(steps_per_execution)

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.cb})"


class PeriodicCallback(EnableCallbackIf):
    """Enable a callback only every k global steps and/or every k epochs.

    The gated methods (see :class:`EnableCallbackIf`) of ``callback`` run when
    ``global_step % every_k_steps == 0`` or ``epoch_num % every_k_epochs == 0``, and,
    with ``every_k_epochs``, also at the last step of training (``epoch_num ==
    max_epoch and local_step == steps_per_epoch - 1``), so the final state is always
    seen. The global step is the event's: before the run in ``before_run``, after it in
    ``trigger_step``. This only makes a callback act less often than it does by
    itself; to trigger one more often than every epoch, use :class:`PeriodicTrigger`.

    Args:
        callback: the callback to gate.
        every_k_steps: period in global steps, or None.
        every_k_epochs: period in epochs, or None.
    """

    def __init__(
        self,
        callback: Callback,
        every_k_steps: int | None = None,
        every_k_epochs: int | None = None,
    ) -> None:
        super().__init__(callback, periodic_record(every_k_steps, every_k_epochs))

    @property
    def trigger_record(self) -> AnyOf:
        """The record gating the callback (see :func:`periodic_record`)."""
        return self._pred  # type: ignore[return-value]
