"""Trigger records and the pure ``fires(trigger, event)`` predicate (no TensorFlow)."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

import attrs

from towerkit.callbacks._loop import EventKind, LoopEvent, LoopPosition

__all__ = [
    "AllOf",
    "AnyOf",
    "AtLastStep",
    "EpochMultiple",
    "EveryK",
    "GlobalStepMultiple",
    "Not",
    "OnKinds",
    "Trigger",
    "all_of",
    "any_of",
    "fires",
    "negate",
    "trainer_event",
]


class Trigger(abc.ABC):
    """Base of trigger records: frozen values that say at which loop events something fires.

    Use :func:`fires` to evaluate one; a record's ``_fires`` method holds its rule.
    """

    __slots__ = ()

    @abc.abstractmethod
    def _fires(self, event: LoopEvent) -> bool:
        """Whether the record fires at ``event`` (the rule of :func:`fires`)."""


def _positive_int_or_none(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int > 0 or None; got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if value <= 0:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be > 0; got {value}"
        raise ValueError(msg)


def _positive_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int > 0; got None"
        raise TypeError(msg)
    _positive_int_or_none(instance, attribute, value)


def _bool(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        msg = f"{type(instance).__name__}: {attribute.name!r} must be a bool; got {type(value).__name__} {value!r}"
        raise TypeError(msg)


@attrs.frozen(kw_only=True)
class EveryK(Trigger):
    """Fire every ``steps`` global steps, every ``epochs`` epochs, and/or before training.

    What :class:`PeriodicTrigger` schedules: it fires at a ``trigger_step`` event when
    ``global_step % steps == 0`` (the global step counted after the step's run), at a
    ``trigger_epoch`` event when ``epoch_num % epochs == 0`` (1-based epochs), and at
    the ``before_train`` event when ``before_train`` is set; never at other events.

    Attributes:
        steps: period in global steps, or None.
        epochs: period in epochs, or None.
        before_train: also fire before the first step.

    Examples:
        >>> EveryK(epochs=2)
        EveryK(steps=None, epochs=2, before_train=False)
    """

    steps: int | None = attrs.field(default=None, validator=_positive_int_or_none)
    epochs: int | None = attrs.field(default=None, validator=_positive_int_or_none)
    before_train: bool = attrs.field(default=False, validator=_bool)

    def __attrs_post_init__(self) -> None:
        if self.steps is None and self.epochs is None and not self.before_train:
            msg = "EveryK: set at least one of 'steps', 'epochs' or 'before_train'; got none"
            raise ValueError(msg)

    def _fires(self, event: LoopEvent) -> bool:
        kind = event.kind
        if kind is EventKind.TRIGGER_STEP:
            return self.steps is not None and event.position.global_step % self.steps == 0
        if kind is EventKind.TRIGGER_EPOCH:
            return self.epochs is not None and event.position.epoch_num % self.epochs == 0
        if kind is EventKind.BEFORE_TRAIN:
            return self.before_train
        return False


@attrs.frozen
class GlobalStepMultiple(Trigger):
    """True at any event whose ``global_step`` is a multiple of ``k``.

    The global step is the one of the event: before the run in ``before_run``,
    after it in ``after_run`` and ``trigger_step``.

    Examples:
        >>> GlobalStepMultiple(5)
        GlobalStepMultiple(k=5)
    """

    k: int = attrs.field(validator=_positive_int)

    def _fires(self, event: LoopEvent) -> bool:
        return event.position.global_step % self.k == 0


@attrs.frozen
class EpochMultiple(Trigger):
    """True at any event whose ``epoch_num`` (1-based, the running epoch) is a multiple of ``k``.

    Examples:
        >>> EpochMultiple(3)
        EpochMultiple(k=3)
    """

    k: int = attrs.field(validator=_positive_int)

    def _fires(self, event: LoopEvent) -> bool:
        return event.position.epoch_num % self.k == 0


@attrs.frozen
class AtLastStep(Trigger):
    """True when the loop is at the last step of the last epoch.

    That is ``epoch_num == max_epoch and local_step == steps_per_epoch - 1``: from the
    last step's ``before_run`` through ``after_train`` of a run that completes.

    Examples:
        >>> AtLastStep()
        AtLastStep()
    """

    def _fires(self, event: LoopEvent) -> bool:
        return event.position.is_last_step


def _kinds(values: Iterable[Any]) -> frozenset[EventKind]:
    if isinstance(values, str | EventKind):
        values = (values,)
    out = []
    bad = []
    for v in values:
        try:
            out.append(EventKind(v))
        except ValueError:
            bad.append(v)
    if bad:
        msg = f"OnKinds: unknown event kinds {bad}; expected some of {[k.value for k in EventKind]}"
        raise ValueError(msg)
    return frozenset(out)


@attrs.frozen
class OnKinds(Trigger):
    """True at events of the given kinds.

    Examples:
        >>> OnKinds(["trigger_epoch"])
        OnKinds(kinds=frozenset({EventKind.TRIGGER_EPOCH}))
    """

    kinds: frozenset[EventKind] = attrs.field(converter=_kinds)

    def _fires(self, event: LoopEvent) -> bool:
        return event.kind in self.kinds


def _triggers(values: Iterable[Any]) -> tuple[Trigger, ...]:
    out = tuple(values)
    bad = [f"#{i}: {type(t).__name__}" for i, t in enumerate(out) if not isinstance(t, Trigger)]
    if bad:
        msg = f"trigger combinators take trigger records; got {', '.join(bad)}"
        raise TypeError(msg)
    return out


@attrs.frozen
class AnyOf(Trigger):
    """True when any of ``triggers`` is (False for none)."""

    triggers: tuple[Trigger, ...] = attrs.field(converter=_triggers)

    def _fires(self, event: LoopEvent) -> bool:
        return any(t._fires(event) for t in self.triggers)


@attrs.frozen
class AllOf(Trigger):
    """True when all of ``triggers`` are (True for none)."""

    triggers: tuple[Trigger, ...] = attrs.field(converter=_triggers)

    def _fires(self, event: LoopEvent) -> bool:
        return all(t._fires(event) for t in self.triggers)


def _one_trigger(value: Any) -> Trigger:
    (t,) = _triggers((value,))
    return t


@attrs.frozen
class Not(Trigger):
    """True when ``trigger`` is not."""

    trigger: Trigger = attrs.field(converter=_one_trigger)

    def _fires(self, event: LoopEvent) -> bool:
        return not self.trigger._fires(event)


def any_of(*triggers: Trigger) -> AnyOf:
    """A trigger that fires when any of ``triggers`` fires.

    Examples:
        >>> any_of(GlobalStepMultiple(10), AtLastStep())
        AnyOf(triggers=(GlobalStepMultiple(k=10), AtLastStep()))
    """
    return AnyOf(triggers)


def all_of(*triggers: Trigger) -> AllOf:
    """A trigger that fires when all of ``triggers`` fire.

    Examples:
        >>> all_of(EveryK(epochs=1), EpochMultiple(2))
        AllOf(triggers=(EveryK(steps=None, epochs=1, before_train=False), EpochMultiple(k=2)))
    """
    return AllOf(triggers)


def negate(trigger: Trigger) -> Not:
    """A trigger that fires when ``trigger`` does not.

    Examples:
        >>> negate(AtLastStep())
        Not(trigger=AtLastStep())
    """
    return Not(trigger)


def fires(trigger: Trigger, event: LoopEvent) -> bool:
    """Whether ``trigger`` fires at ``event``. Pure and total: any record, any event.

    Args:
        trigger: a trigger record (:class:`EveryK`, :class:`GlobalStepMultiple`, a
            combination, ...).
        event: a loop event, as :func:`~towerkit.callbacks.loop_events` yields them.

    Raises:
        TypeError: ``trigger`` is not a trigger record or ``event`` not a LoopEvent.

    Examples:
        >>> from towerkit.callbacks._loop import loop_events
        >>> [(e.epoch_num, e.global_step) for e in loop_events(1, 4, 3) if fires(EveryK(epochs=2), e)]
        [(2, 6), (4, 12)]
        >>> [e.global_step for e in loop_events(1, 2, 3) if fires(EveryK(steps=4), e)]
        [4]
    """
    if not isinstance(trigger, Trigger):
        msg = f"'trigger' must be a trigger record; got {type(trigger).__name__} {trigger!r:.80}"
        raise TypeError(msg)
    if not isinstance(event, LoopEvent):
        msg = f"'event' must be a LoopEvent; got {type(event).__name__}"
        raise TypeError(msg)
    return bool(trigger._fires(event))


def trainer_event(trainer: Any, kind: EventKind) -> LoopEvent:
    """The loop event a trainer is at, built from its counters.

    Args:
        trainer: anything with the counters of a ``TrainerView`` (``epoch_num``,
            ``local_step``, ``global_step``, ``steps_per_epoch``, ``starting_epoch``,
            ``max_epoch``).
        kind: the callback method being called.

    Examples:
        >>> from types import SimpleNamespace
        >>> t = SimpleNamespace(starting_epoch=1, max_epoch=3, steps_per_epoch=10,
        ...                     epoch_num=3, local_step=9, global_step=30)
        >>> ev = trainer_event(t, EventKind.TRIGGER_STEP)
        >>> fires(AtLastStep(), ev), fires(EveryK(steps=7), ev)
        (True, False)
    """
    return LoopEvent(
        kind,
        LoopPosition(
            starting_epoch=trainer.starting_epoch,
            max_epoch=trainer.max_epoch,
            steps_per_epoch=trainer.steps_per_epoch,
            epoch_num=trainer.epoch_num,
            local_step=trainer.local_step,
            global_step=trainer.global_step,
        ),
    )


def periodic_record(every_k_steps: int | None, every_k_epochs: int | None) -> AnyOf:
    """The trigger record of ``PeriodicCallback(cb, every_k_steps, every_k_epochs)``.

    Examples:
        >>> periodic_record(None, 2)
        AnyOf(triggers=(EpochMultiple(k=2), AtLastStep()))
    """
    if every_k_steps is None and every_k_epochs is None:
        msg = "PeriodicCallback: set 'every_k_steps' or 'every_k_epochs' (or both); got neither"
        raise ValueError(msg)
    parts: list[Trigger] = []
    if every_k_steps is not None:
        parts.append(GlobalStepMultiple(every_k_steps))
    if every_k_epochs is not None:
        parts += [EpochMultiple(every_k_epochs), AtLastStep()]
    return AnyOf(parts)
