"""Trace events."""

from __future__ import annotations

import json

import pytest
from conformance_strategies import trace_events
from hypothesis import given

from towerkit.callbacks import EventKind, loop_events
from towerkit.conformance import TraceEvent, trace_of
from towerkit.conformance._trace import trace_from_lists


class TestTraceEvent:
    """`TraceEvent` records one callback method call."""

    def test_repr(self):
        """The repr names every field."""
        assert repr(TraceEvent("after_run", 1, 0, 1)) == (
            "TraceEvent(kind=EventKind.AFTER_RUN, epoch_num=1, local_step=0, global_step=1)"
        )

    def test_str(self):
        """The text form reads as a position."""
        assert str(TraceEvent("before_epoch", 2, -1, 6)) == (
            "before_epoch (epoch_num 2, local_step -1, global_step 6)"
        )

    def test_fail_kind(self):
        """An unknown method is rejected."""
        with pytest.raises(ValueError, match="'trigger' is not a valid EventKind"):
            TraceEvent("trigger", 1, 0, 0)

    def test_fail_counter(self):
        """Counters must be ints, booleans excluded."""
        with pytest.raises(
            TypeError, match=r"TraceEvent: 'global_step' must be an int; got float 1.0"
        ):
            TraceEvent("after_run", 1, 0, 1.0)
        with pytest.raises(TypeError, match=r"'epoch_num' must be an int; got bool True"):
            TraceEvent("after_run", True, 0, 1)

    @given(trace_events())
    def test_json_round_trip(self, event):
        """`as_list` through JSON and back gives the same event."""
        rows = json.loads(json.dumps([event.as_list()]))
        assert trace_from_lists(rows) == (event,)

    def test_from_loop_event(self):
        """A loop event's kind and counters carry over."""
        last = list(loop_events(2, 2, 3, start_global_step=4))[-1]
        assert TraceEvent.from_loop_event(last) == TraceEvent(EventKind.AFTER_TRAIN, 2, 2, 7)


class TestTraceOf:
    """`trace_of` turns a loop-event stream into trace events."""

    def test_length(self):
        """One trace event per loop event."""
        assert len(trace_of(loop_events(1, 2, 3))) == len(list(loop_events(1, 2, 3)))

    def test_rows_fail(self):
        """Rows of the wrong length are listed."""
        with pytest.raises(ValueError, match=r"rows at fault: #1: \['after_run', 1\]"):
            trace_from_lists([["after_run", 1, 0, 1], ["after_run", 1]])
