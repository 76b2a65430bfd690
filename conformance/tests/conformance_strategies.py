"""Hypothesis strategies shared by the tests of the conformance lib itself."""

from __future__ import annotations

from hypothesis import strategies as st

from towerkit.callbacks import EventKind
from towerkit.conformance import TraceEvent
from towerkit.conformance.strategies import loop_scenarios, loop_specs, trigger_scenarios

__all__ = [
    "loop_scenarios",
    "loop_specs",
    "scenarios",
    "trace_events",
    "traces",
    "trigger_scenarios",
]


def trace_events() -> st.SearchStrategy[TraceEvent]:
    """Any trace event with plausible counters."""
    return st.builds(
        TraceEvent,
        st.sampled_from(list(EventKind)),
        st.integers(0, 5),
        st.integers(-1, 5),
        st.integers(0, 50),
    )


def traces() -> st.SearchStrategy[list[TraceEvent]]:
    """Short traces."""
    return st.lists(trace_events(), max_size=12)


def scenarios():
    """Scenarios of both property strategies."""
    return loop_scenarios() | trigger_scenarios()
