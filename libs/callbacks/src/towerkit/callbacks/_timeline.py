"""When each callback fires over a run, computed from trigger records alone (no TensorFlow)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import attrs

from towerkit.callbacks._loop import (
    TRIGGER_KINDS,
    EventKind,
    LoopEvent,
    check_bounds,
    check_steps_per_execution,
    loop_events,
)
from towerkit.callbacks._schedules import OnSchedule, scheduled_value
from towerkit.callbacks._shell_records import _check_trigger, _kind_tuple, callback_record
from towerkit.callbacks._triggers import EveryK, Trigger, fires  # noqa: F401 - EveryK: the examples use it

__all__ = [
    "DEFAULT_KINDS",
    "Firing",
    "TimelineEntry",
    "format_timeline",
    "iter_timeline",
    "timeline",
    "timeline_entry",
    "timeline_firings",
]

DEFAULT_KINDS = TRIGGER_KINDS
"""The events where triggers act: before training, after each step, after each epoch
(the loop's ``TRIGGER_KINDS``)."""


@attrs.frozen(kw_only=True)
class TimelineEntry:
    """One line of a timeline's input: a name, its trigger, the event kinds it acts at.

    Attributes:
        name: what to call it in the output.
        trigger: the trigger record.
        kinds: the event kinds at which the record is evaluated.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    trigger: Trigger = attrs.field(validator=lambda _i, _a, v: _check_trigger(v))
    kinds: tuple[EventKind, ...] = attrs.field(default=DEFAULT_KINDS, converter=_kind_tuple)


@attrs.frozen(kw_only=True)
class Firing:
    """One firing: who, at which event, where in the loop, and the value set (schedules).

    Attributes:
        name: the entry's name.
        kind: the event kind.
        epoch_num: the running epoch (1-based; ``starting_epoch - 1`` before training).
        local_step: the 0-based step in the epoch (-1 before its first step).
        global_step: the global step at the event (after the step's run in
            ``trigger_step``, before it in ``before_run``).
        value: for a schedule, the value it sets; else None.
    """

    name: str
    kind: EventKind
    epoch_num: int
    local_step: int
    global_step: int
    value: float | None = None


def timeline_entry(item: Any) -> TimelineEntry | None:
    """The timeline entry of a callback, a trigger record or a ``(name, trigger)`` pair.

    A callback is read through its ``trigger_record`` and ``trigger_kinds`` properties
    (the trigger shells, ``ScheduledHyperParamSetter``); another callback that acts
    in ``trigger_epoch`` fires every epoch, and one that does not gives None.

    Raises:
        ValueError: a callback whose firing depends on a function, not a record
            (``EnableCallbackIf`` with a function predicate).
        TypeError: anything else.

    Examples:
        >>> timeline_entry(("every 2 epochs", EveryK(epochs=2))).name
        'every 2 epochs'
    """
    if isinstance(item, TimelineEntry):
        return item
    if isinstance(item, Trigger):
        return TimelineEntry(name=repr(item), trigger=item)
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Trigger):
        return TimelineEntry(name=str(item[0]), trigger=item[1])
    if hasattr(item, "trigger_record"):
        record = item.trigger_record
        if record is None:
            msg = f"cannot tell when {item} fires: it is gated by a function, not a trigger record"
            raise ValueError(msg)
        kinds = getattr(item, "trigger_kinds", DEFAULT_KINDS)
        return TimelineEntry(name=str(item), trigger=record, kinds=kinds)
    if callable(getattr(item, "has_hook", None)):
        if item.has_hook("_trigger_epoch"):
            built = callback_record()
            return TimelineEntry(name=str(item), trigger=built.trigger, kinds=built.kinds)
        return None
    msg = f"a timeline takes callbacks, trigger records or (name, trigger) pairs; got {type(item).__name__} {item!r:.80}"
    raise TypeError(msg)


def timeline(
    callbacks_or_triggers: Sequence[Any],
    starting_epoch: int,
    max_epoch: int,
    steps_per_epoch: int,
    *,
    start_global_step: int = 0,
    on_unknown: Literal["raise", "skip"] = "raise",
    steps_per_execution: int = 1,
) -> list[Firing]:
    """Where each callback (or trigger) fires over a run, in loop order, without running it.

    Epochs run from ``starting_epoch`` to ``max_epoch`` inclusive with
    ``steps_per_epoch`` steps each and one ``hooked_sess.run`` per step, as in
    :func:`~towerkit.callbacks.loop_events`. Schedules
    (``ScheduledHyperParamSetter`` or :class:`OnSchedule` records) also give the
    value they set. The whole run is walked and every firing kept: for a long run
    or a per-step trigger, take what you need from :func:`iter_timeline` instead.

    Args:
        callbacks_or_triggers: callbacks, trigger records, ``(name, trigger)`` pairs or
            :class:`TimelineEntry` values (see :func:`timeline_entry`).
        starting_epoch: the first epoch (1-based).
        max_epoch: the last epoch, inclusive.
        steps_per_epoch: steps per epoch.
        start_global_step: the global step at the start (restored on a resumed run).
        on_unknown: what to do with a callback gated by a function: ``"raise"`` a
            ValueError, or ``"skip"`` it.
        steps_per_execution: training steps per session call (K): step events come once
            per call, at its last step (see ``loop_events``); an entry whose step period
            is not a multiple of K is refused, as the trainer refuses it.

    Returns:
        The firings, ordered by event, then by the order of the input.

    Examples:
        >>> from towerkit.callbacks._schedules import piecewise_schedule
        >>> lr = ("lr", OnSchedule(schedule=piecewise_schedule([(0, 0.1), (2, 0.01)])))
        >>> save = ("save", EveryK(epochs=2))
        >>> for f in timeline([lr, save], 1, 3, 100):
        ...     print(f.kind.value, f.epoch_num, f.global_step, f.name, f.value)
        before_train 0 0 lr 0.1
        trigger_epoch 2 200 lr 0.01
        trigger_epoch 2 200 save None
    """
    return list(
        iter_timeline(
            callbacks_or_triggers,
            starting_epoch,
            max_epoch,
            steps_per_epoch,
            start_global_step=start_global_step,
            on_unknown=on_unknown,
            steps_per_execution=steps_per_execution,
        )
    )


def iter_timeline(
    callbacks_or_triggers: Sequence[Any],
    starting_epoch: int,
    max_epoch: int,
    steps_per_epoch: int,
    *,
    start_global_step: int = 0,
    on_unknown: Literal["raise", "skip"] = "raise",
    steps_per_execution: int = 1,
) -> Iterator[Firing]:
    """The firings of :func:`timeline`, computed one at a time as they are asked for.

    The arguments are checked at the call; the loop is then walked only as far as
    the firings taken need, and nothing is kept: taking the first ``n`` firings of a
    run of any length costs the events up to the ``n``-th firing, and memory stays
    bounded whatever the run's length (the loop of 99,999 epochs that ``TrainConfig``
    runs by default included).

    Args:
        callbacks_or_triggers: as for :func:`timeline`.
        starting_epoch: the first epoch (1-based).
        max_epoch: the last epoch, inclusive.
        steps_per_epoch: steps per epoch.
        start_global_step: the global step at the start.
        on_unknown: ``"raise"`` or ``"skip"``, as for :func:`timeline`.
        steps_per_execution: steps per session call, as for :func:`timeline`.

    Returns:
        An iterator over the firings, in the order :func:`timeline` lists them.

    Raises:
        ValueError, TypeError: bad bounds or entries, at the call.

    Examples:
        >>> from itertools import islice
        >>> every_step = ("step", EveryK(steps=1))
        >>> [f.global_step for f in islice(iter_timeline([every_step], 1, 99_999, 1000), 3)]
        [1, 2, 3]
        >>> every_call = ("call", EveryK(steps=50))
        >>> [f.global_step for f in islice(
        ...     iter_timeline([every_call], 1, 9, 1000, steps_per_execution=50), 3)]
        [50, 100, 150]
    """
    check_bounds(starting_epoch, max_epoch, steps_per_epoch)
    entries = _entries(callbacks_or_triggers, on_unknown)
    if steps_per_execution != 1:
        from towerkit.callbacks._multistep import coarse_step_faults

        check_steps_per_execution(steps_per_epoch, steps_per_execution)
        faults = [
            f"{e.name!r}: {f}"
            for e in entries
            for f in coarse_step_faults(e.trigger, steps_per_execution)
        ]
        if faults:
            msg = "entries that need a step inside a session call: " + "; ".join(faults)
            raise ValueError(msg)
    wanted = frozenset(k for e in entries for k in e.kinds)
    events = loop_events(
        starting_epoch,
        max_epoch,
        steps_per_epoch,
        start_global_step=start_global_step,
        kinds=wanted,
        steps_per_execution=steps_per_execution,
    )
    return timeline_firings(entries, events)


def _entries(
    callbacks_or_triggers: Sequence[Any], on_unknown: Literal["raise", "skip"]
) -> tuple[TimelineEntry, ...]:
    if on_unknown not in ("raise", "skip"):
        msg = f"'on_unknown' must be 'raise' or 'skip'; got {on_unknown!r}"
        raise ValueError(msg)
    entries: list[TimelineEntry] = []
    unknown: list[str] = []
    for item in callbacks_or_triggers:
        try:
            entry = timeline_entry(item)
        except ValueError as err:
            unknown.append(str(err))
            continue
        if entry is not None:
            entries.append(entry)
    if unknown and on_unknown == "raise":
        msg = "; ".join(unknown) + " (pass on_unknown='skip' to leave them out)"
        raise ValueError(msg)
    return tuple(entries)


def timeline_firings(
    entries: Iterable[TimelineEntry], events: Iterable[LoopEvent]
) -> Iterator[Firing]:
    """The firings of `entries` over a stream of loop events, lazily, in stream order.

    Reads one event at a time from `events` (any iterable, e.g. :func:`loop_events`)
    and never reads past the event of the last firing taken.

    Args:
        entries: the timeline entries, in output order within an event.
        events: the loop events.

    Yields:
        Each firing, ordered by event, then by the order of `entries`.

    Examples:
        >>> from towerkit.callbacks._loop import loop_events
        >>> entry = TimelineEntry(name="save", trigger=EveryK(epochs=1))
        >>> [f.global_step for f in timeline_firings([entry], loop_events(1, 2, 3))]
        [3, 6]
    """
    entries = tuple(entries)
    for event in events:
        for entry in entries:
            if event.kind not in entry.kinds or not fires(entry.trigger, event):
                continue
            value = (
                scheduled_value(entry.trigger, event)
                if isinstance(entry.trigger, OnSchedule)
                else None
            )
            yield Firing(
                name=entry.name,
                kind=event.kind,
                epoch_num=event.epoch_num,
                local_step=event.local_step,
                global_step=event.global_step,
                value=value,
            )


def format_timeline(firings: Iterable[Firing]) -> str:
    """The firings as an aligned text table, one line each.

    Examples:
        >>> print(format_timeline(timeline([("save", EveryK(epochs=1))], 1, 2, 5)))
        epoch  local_step  global_step  event          name  value
        1      4           5            trigger_epoch  save
        2      4           10           trigger_epoch  save
    """
    rows = [("epoch", "local_step", "global_step", "event", "name", "value")]
    for f in firings:
        value = "" if f.value is None else f"{f.value:.6g}"
        rows.append(
            (str(f.epoch_num), str(f.local_step), str(f.global_step), f.kind.value, f.name, value)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
