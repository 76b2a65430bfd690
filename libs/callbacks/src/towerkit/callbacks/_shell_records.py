"""What each trigger shell evaluates, built from its arguments: one builder per shell (no TensorFlow).

The shells (``PeriodicTrigger``, ``PeriodicCallback``, ``EnableCallbackIf``,
``ScheduledHyperParamSetter``, a plain callback acting in ``trigger_epoch``) build
their trigger record and the event kinds they evaluate it at with these functions,
and the timeline tool builds its entries with the same ones (``SHELL_RECORDS``), so
the tool can never describe a shell differently from how the shell acts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

import attrs

from towerkit.callbacks._loop import GATE_KINDS, TRIGGER_KINDS, EventKind
from towerkit.callbacks._numbers import real_number, whole_number
from towerkit.callbacks._schedules import OnSchedule, PiecewiseSchedule
from towerkit.callbacks._triggers import EveryK, Trigger, firing_kinds, periodic_record

__all__ = [
    "SHELL_RECORDS",
    "ShellRecord",
    "callback_record",
    "gate_kinds",
    "gated_record",
    "periodic_callback_record",
    "periodic_trigger_record",
    "scheduled_setter_record",
]


def _kind_tuple(value: Iterable[Any]) -> tuple[EventKind, ...]:
    return tuple(EventKind(v) for v in value)


def _check_trigger(value: Any) -> None:
    if not isinstance(value, Trigger):
        msg = f"'trigger' must be a trigger record; got {type(value).__name__} {value!r:.80}"
        raise TypeError(msg)


@attrs.frozen(kw_only=True)
class ShellRecord:
    """A trigger shell's record and the event kinds at which it evaluates it.

    Attributes:
        trigger: the trigger record.
        kinds: the event kinds the record is evaluated at.
    """

    trigger: Trigger = attrs.field(validator=lambda _i, _a, v: _check_trigger(v))
    kinds: tuple[EventKind, ...] = attrs.field(converter=_kind_tuple)


def callback_record() -> ShellRecord:
    """A plain callback that acts in ``trigger_epoch``: it fires after every epoch.

    Examples:
        >>> callback_record()
        ShellRecord(trigger=EveryK(steps=None, epochs=1, before_train=False), kinds=(EventKind.TRIGGER_EPOCH,))
    """
    return ShellRecord(trigger=EveryK(epochs=1), kinds=(EventKind.TRIGGER_EPOCH,))


def periodic_trigger_record(
    every_k_steps: int | None = None, every_k_epochs: int | None = None, before_train: bool = False
) -> ShellRecord:
    """The record of ``PeriodicTrigger(cb, every_k_steps, every_k_epochs, before_train)``.

    It is an `EveryK` evaluated at the trigger kinds.

    Examples:
        >>> periodic_trigger_record(every_k_epochs=2).trigger
        EveryK(steps=None, epochs=2, before_train=False)
    """
    return ShellRecord(
        trigger=EveryK(steps=every_k_steps, epochs=every_k_epochs, before_train=before_train),
        kinds=TRIGGER_KINDS,
    )


def gate_kinds(methods: Iterable[Any]) -> tuple[EventKind, ...]:
    """The gated methods a gate is evaluated at, in the order of ``GATE_KINDS``, from names or kinds.

    Raises:
        ValueError: `methods` is empty or names one that is not gated (all listed).

    Examples:
        >>> gate_kinds(["trigger_epoch", "before_run"])
        (EventKind.BEFORE_RUN, EventKind.TRIGGER_EPOCH)
        >>> gate_kinds(["after_train"])
        Traceback (most recent call last):
        ...
        ValueError: 'methods' must be a non-empty list of ['before_epoch', 'after_epoch', 'before_run', 'trigger_step', 'trigger_epoch']; wrong entries: ['after_train']
    """
    if isinstance(methods, str):
        methods = [methods]
    given = [m.value if isinstance(m, EventKind) else m for m in methods]
    names = [kind.value for kind in GATE_KINDS]
    bad = [m for m in given if m not in names]
    if bad or not given:
        msg = f"'methods' must be a non-empty list of {names}; wrong entries: {bad}"
        raise ValueError(msg)
    return tuple(kind for kind in GATE_KINDS if kind.value in given)


def gated_record(pred: Trigger, methods: Iterable[Any] = ("trigger_epoch",)) -> ShellRecord:
    """``EnableCallbackIf(cb, pred)`` with a record: `pred` at the gated methods `cb` acts in.

    Examples:
        >>> gated_record(EveryK(epochs=3), ["before_epoch"]).kinds
        (EventKind.BEFORE_EPOCH,)
    """
    if not isinstance(pred, Trigger):
        msg = f"'pred' must be a trigger record; got {type(pred).__name__} {pred!r:.80}"
        raise TypeError(msg)
    return ShellRecord(trigger=pred, kinds=gate_kinds(methods))


def periodic_callback_record(
    every_k_steps: int | None = None,
    every_k_epochs: int | None = None,
    methods: Iterable[Any] = ("trigger_epoch",),
) -> ShellRecord:
    """The record of ``PeriodicCallback(cb, every_k_steps, every_k_epochs)``.

    It is `periodic_record` at the gated methods `cb` acts in.

    Examples:
        >>> periodic_callback_record(None, 2).trigger
        AnyOf(triggers=(EpochMultiple(k=2), AtLastStep()))
    """
    return gated_record(periodic_record(every_k_steps, every_k_epochs), methods)


def scheduled_setter_record(
    schedule: Iterable[tuple[int, float]] | PiecewiseSchedule,
    interp: str | None = None,
    step_based: bool = False,
    set_at_beginning: bool = True,
) -> ShellRecord:
    """The `OnSchedule` record of a ``ScheduledHyperParamSetter``.

    For ``ScheduledHyperParamSetter(param, schedule, interp, step_based, set_at_beginning)``:
    it fires at ``before_train`` and where the schedule's points are reached.

    Raises:
        TypeError: a bad schedule entry.
        ValueError: a bad schedule, or a `PiecewiseSchedule` whose ``interp``/``unit``
            contradict the arguments.

    Examples:
        >>> r = scheduled_setter_record([(0, 0.1), (3, 0.01)], step_based=True)
        >>> r.trigger.schedule.unit, r.kinds
        ('step', (EventKind.BEFORE_TRAIN, EventKind.TRIGGER_STEP))
    """
    step_based = bool(step_based)
    if isinstance(schedule, PiecewiseSchedule):
        given = schedule
        schedule = given.points
        if interp is None:
            interp = given.interp
        if not step_based:
            step_based = given.step_based
        if (interp, step_based) != (given.interp, given.step_based):
            msg = (
                f"ScheduledHyperParamSetter: the schedule record says interp={given.interp!r}, "
                f"unit={given.unit!r}; the arguments say interp={interp!r}, step_based={step_based}"
            )
            raise ValueError(msg)
    elif isinstance(schedule, Iterable) and not isinstance(schedule, str | bytes):
        schedule = [_tensorpack_point(p) for p in schedule]
    record = PiecewiseSchedule(
        points=schedule, interp=cast(Any, interp), unit="step" if step_based else "epoch"
    )
    rule = OnSchedule(schedule=record, set_at_beginning=bool(set_at_beginning))
    kinds = firing_kinds(rule)
    return ShellRecord(trigger=rule, kinds=[kind for kind in EventKind if kind in kinds])


SHELL_RECORDS: Mapping[str, Callable[..., ShellRecord]] = MappingProxyType(
    {
        "Callback": callback_record,
        "PeriodicTrigger": periodic_trigger_record,
        "PeriodicCallback": periodic_callback_record,
        "EnableCallbackIf": gated_record,
        "ScheduledHyperParamSetter": scheduled_setter_record,
    }
)
"""The builder of each trigger shell, by class name: what the timeline tool describes."""


def _tensorpack_point(entry: Any) -> Any:
    """A schedule entry as tensorpack read it: ``(int(point), float(value))``.

    A list (a TOML array) becomes a pair; a point ``int()`` takes (``'25'``, ``30.0``) and
    a value ``float()`` takes (``'1e-5'``) become numbers. Anything else is left for
    `PiecewiseSchedule` to refuse with its message.
    """
    if isinstance(entry, list):
        entry = tuple(entry)
    if not isinstance(entry, tuple) or len(entry) != 2:
        return entry
    point, value = entry
    whole, real = whole_number(point), real_number(value)
    return (point if whole is None else whole, value if real is None else real)
