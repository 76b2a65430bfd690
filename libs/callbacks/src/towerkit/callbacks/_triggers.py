"""Trigger records and the pure ``fires(trigger, event)`` predicate (no TensorFlow)."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

import attrs

from towerkit.callbacks._loop import EventKind, LoopBounds, LoopEvent, LoopPosition

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
    "firing_kinds",
    "negate",
    "trainer_event",
]


class Trigger(abc.ABC):
    """Base of trigger records: frozen values that say at which loop events something fires.

    Use :func:`fires` to evaluate one; a record's ``_fires`` method holds its rule,
    and its ``_firing_kinds`` method the event kinds where that rule can hold (every
    kind unless a record narrows it; see :func:`firing_kinds`).
    """

    __slots__ = ()

    @abc.abstractmethod
    def _fires(self, event: LoopEvent) -> bool:
        """Whether the record fires at ``event`` (the rule of :func:`fires`)."""

    def _firing_kinds(self) -> frozenset[EventKind]:
        """The event kinds at which the record may fire (the rule of :func:`firing_kinds`)."""
        return ALL_KINDS


ALL_KINDS = frozenset(EventKind)
"""Every event kind."""


def _positive_int_or_none(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int > 0 or None; got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if value <= 0:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be > 0; got {value}"
        raise ValueError(msg)


def _positive_int(instance: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if value is None:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int > 0; got None"
        raise TypeError(msg)
    _positive_int_or_none(instance, attribute, value)


def _bool(instance: Any, attribute: attrs.Attribute[bool], value: Any) -> None:
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

    def _firing_kinds(self) -> frozenset[EventKind]:
        kinds = (
            (EventKind.TRIGGER_STEP, self.steps is not None),
            (EventKind.TRIGGER_EPOCH, self.epochs is not None),
            (EventKind.BEFORE_TRAIN, self.before_train),
        )
        return frozenset(kind for kind, on in kinds if on)


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

    def _firing_kinds(self) -> frozenset[EventKind]:
        return self.kinds


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

    def _firing_kinds(self) -> frozenset[EventKind]:
        return frozenset().union(*(t._firing_kinds() for t in self.triggers))


@attrs.frozen
class AllOf(Trigger):
    """True when all of ``triggers`` are (True for none)."""

    triggers: tuple[Trigger, ...] = attrs.field(converter=_triggers)

    def _fires(self, event: LoopEvent) -> bool:
        return all(t._fires(event) for t in self.triggers)

    def _firing_kinds(self) -> frozenset[EventKind]:
        return ALL_KINDS.intersection(*(t._firing_kinds() for t in self.triggers))


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


def firing_kinds(trigger: Trigger) -> frozenset[EventKind]:
    """The event kinds at which ``trigger`` may fire: it never fires at any other kind.

    Pure and total. A shell hooks only the callback methods of these kinds, so a
    record that cannot fire after a step costs nothing per step. The set may be
    larger than needed (a record whose rule reads only the position, such as
    :class:`GlobalStepMultiple`, may fire at every kind), never smaller.

    Args:
        trigger: a trigger record.

    Raises:
        TypeError: ``trigger`` is not a trigger record.

    Examples:
        >>> sorted(k.value for k in firing_kinds(EveryK(steps=10, before_train=True)))
        ['before_train', 'trigger_step']
        >>> sorted(k.value for k in firing_kinds(any_of(EveryK(epochs=1), OnKinds(["after_train"]))))
        ['after_train', 'trigger_epoch']
        >>> firing_kinds(all_of(EveryK(epochs=1), EveryK(steps=1)))
        frozenset()
    """
    if not isinstance(trigger, Trigger):
        msg = f"'trigger' must be a trigger record; got {type(trigger).__name__} {trigger!r:.80}"
        raise TypeError(msg)
    return frozenset(trigger._firing_kinds())


_SLOTS = LoopPosition.__dict__
_SET_BOUNDS = _SLOTS["bounds"].__set__
_SET_EPOCH_NUM = _SLOTS["epoch_num"].__set__
_SET_LOCAL_STEP = _SLOTS["local_step"].__set__
_SET_GLOBAL_STEP = _SLOTS["global_step"].__set__
_SET_KIND = LoopEvent.__dict__["kind"].__set__
_SET_POSITION = LoopEvent.__dict__["position"].__set__
_LAST_BOUNDS: list[LoopBounds] = [LoopBounds(max_epoch=1, steps_per_epoch=1)]
"""The bounds `trainer_position` built last, reused while a trainer's bounds stay the same."""


def trainer_bounds(trainer: Any) -> LoopBounds:
    """A trainer's `LoopBounds`, its own or one built once for as long as its bounds stay.

    The trainer's own ``loop_bounds`` record when it keeps one; else one built (and
    validated) from its ``starting_epoch``, ``max_epoch`` and ``steps_per_epoch``.

    Raises:
        ValueError: the trainer's bounds are not a run's (see `LoopBounds`).
    """
    own: LoopBounds | None = getattr(trainer, "loop_bounds", None)
    if own is not None:
        return own
    last = _LAST_BOUNDS[0]
    starting, most, per_epoch = trainer.starting_epoch, trainer.max_epoch, trainer.steps_per_epoch
    if (
        last.starting_epoch == starting
        and last.max_epoch == most
        and last.steps_per_epoch == per_epoch
    ):
        return last
    made = LoopBounds(starting_epoch=starting, max_epoch=most, steps_per_epoch=per_epoch)
    _LAST_BOUNDS[0] = made
    return made


def trainer_position(trainer: Any) -> LoopPosition:
    """Where a trainer is in its loop: its `LoopBounds` and its counters.

    Shells call it at every event they act at, after each step too, so it is cheap:
    the bounds are a validated `LoopBounds` (`trainer_bounds`: the trainer's own, or
    one built once), and the three counters are taken as the trainer keeps them (it
    only ever counts them up), without running the position's validators again.

    Args:
        trainer: anything with the counters of a ``TrainerView`` (``epoch_num``,
            ``local_step``, ``global_step``, ``steps_per_epoch``, ``starting_epoch``,
            ``max_epoch``), ints, and optionally its ``loop_bounds``.

    Examples:
        >>> from types import SimpleNamespace
        >>> t = SimpleNamespace(starting_epoch=1, max_epoch=3, steps_per_epoch=10,
        ...                     epoch_num=3, local_step=9, global_step=30)
        >>> trainer_position(t).is_last_step
        True
    """
    position = object.__new__(LoopPosition)
    _SET_BOUNDS(position, trainer_bounds(trainer))
    _SET_EPOCH_NUM(position, trainer.epoch_num)
    _SET_LOCAL_STEP(position, trainer.local_step)
    _SET_GLOBAL_STEP(position, trainer.global_step)
    return position


def trainer_event(trainer: Any, kind: EventKind) -> LoopEvent:
    """The loop event a trainer is at, built from its counters (see :func:`trainer_position`).

    Args:
        trainer: anything with the counters of a ``TrainerView``.
        kind: the callback method being called.

    Examples:
        >>> from types import SimpleNamespace
        >>> t = SimpleNamespace(starting_epoch=1, max_epoch=3, steps_per_epoch=10,
        ...                     epoch_num=3, local_step=9, global_step=30)
        >>> ev = trainer_event(t, EventKind.TRIGGER_STEP)
        >>> fires(AtLastStep(), ev), fires(EveryK(steps=7), ev)
        (True, False)
    """
    event = object.__new__(LoopEvent)
    _SET_KIND(event, kind)
    _SET_POSITION(event, trainer_position(trainer))
    return event


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
