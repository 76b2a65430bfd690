"""Trace events: one record per callback method call, with the loop counters seen then."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from towerkit.callbacks import EventKind, LoopEvent


def event_kind(value: Any) -> EventKind:
    """`value` as a callback method (an ``EventKind``), imported on first use.

    The suite's records load without TensorFlow (the pytest plugin imports them), so
    the callbacks lib is imported only when a record is built.

    Examples:
        >>> event_kind("trigger_step")
        EventKind.TRIGGER_STEP
    """
    from towerkit.callbacks import EventKind

    return EventKind(value)


def _int(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"TraceEvent: {attribute.name!r} must be an int; got {type(value).__name__} {value!r}"
        raise TypeError(msg)


@attrs.frozen
class TraceEvent:
    """A callback method call as a recording callback saw it.

    Attributes:
        kind: the callback method (``before_train``, ``before_run``, ...).
        epoch_num: ``trainer.epoch_num`` inside the method (1-based running epoch).
        local_step: ``trainer.local_step`` inside the method (0-based step in the epoch).
        global_step: ``trainer.global_step`` inside the method (``hooked_sess.run`` calls).

    Examples:
        >>> TraceEvent("trigger_step", 1, 2, 3)
        TraceEvent(kind=EventKind.TRIGGER_STEP, epoch_num=1, local_step=2, global_step=3)
        >>> print(TraceEvent("trigger_epoch", 3, 4, 15))
        trigger_epoch (epoch_num 3, local_step 4, global_step 15)
    """

    kind: EventKind = attrs.field(converter=event_kind)
    epoch_num: int = attrs.field(validator=_int)
    local_step: int = attrs.field(validator=_int)
    global_step: int = attrs.field(validator=_int)

    @classmethod
    def from_loop_event(cls, event: LoopEvent) -> TraceEvent:
        """The trace event a recording callback should see at `event`.

        Examples:
            >>> from towerkit.callbacks import loop_events
            >>> TraceEvent.from_loop_event(list(loop_events(1, 1, 1))[-1])
            TraceEvent(kind=EventKind.AFTER_TRAIN, epoch_num=1, local_step=0, global_step=1)
        """
        return cls(event.kind, event.epoch_num, event.local_step, event.global_step)

    def as_list(self) -> list[Any]:
        """``[kind, epoch_num, local_step, global_step]``, for JSON.

        Examples:
            >>> TraceEvent("after_run", 2, 0, 7).as_list()
            ['after_run', 2, 0, 7]
        """
        return [self.kind.value, self.epoch_num, self.local_step, self.global_step]

    def where(self) -> str:
        """The position in words, for messages.

        Examples:
            >>> TraceEvent("before_run", 2, 0, 6).where()
            'epoch 2, local_step 0, global_step 6'
        """
        return (
            f"epoch {self.epoch_num}, local_step {self.local_step}, global_step {self.global_step}"
        )

    def __str__(self) -> str:
        return (
            f"{self.kind.value} (epoch_num {self.epoch_num}, local_step {self.local_step}, "
            f"global_step {self.global_step})"
        )


def trace_of(events: Iterable[LoopEvent]) -> tuple[TraceEvent, ...]:
    """The trace events of a stream of loop events.

    Examples:
        >>> from towerkit.callbacks import loop_events
        >>> [e.kind.value for e in trace_of(loop_events(1, 1, 1))][:3]
        ['before_train', 'before_epoch', 'before_run']
    """
    return tuple(TraceEvent.from_loop_event(e) for e in events)


def trace_from_lists(rows: Iterable[Iterable[Any]]) -> tuple[TraceEvent, ...]:
    """Trace events from ``[kind, epoch_num, local_step, global_step]`` rows (JSON).

    Raises:
        ValueError: a row that is not four fields long (every such row is listed).

    Examples:
        >>> trace_from_lists([["before_train", 0, -1, 0]])
        (TraceEvent(kind=EventKind.BEFORE_TRAIN, epoch_num=0, local_step=-1, global_step=0),)
    """
    listed = [list(r) for r in rows]
    bad = [f"#{i}: {r!r}" for i, r in enumerate(listed) if len(r) != 4]
    if bad:
        msg = f"trace rows must be [kind, epoch_num, local_step, global_step]; rows at fault: {', '.join(bad)}"
        raise ValueError(msg)
    return tuple(TraceEvent(*r) for r in listed)
