"""The trace diff: the first difference, the field, the rule."""

from __future__ import annotations

import attrs
import pytest
from conformance_strategies import loop_specs, traces
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.callbacks import EventKind
from towerkit.conformance import LoopSpec, Scenario, TraceEvent
from towerkit.conformance._diff import count_differences, explain_trace, explain_values
from towerkit.conformance._reference import expected_run


def _clock(loop):
    return list(expected_run(Scenario(name="s", loop=loop)).trace("loop"))


class TestExplainTrace:
    """`explain_trace` names the semantic a trace breaks."""

    @given(traces())
    def test_equal_is_none(self, trace):
        """Equal traces need no explanation."""
        assert explain_trace(trace, list(trace), who="p") is None

    @settings(max_examples=50, deadline=None)
    @given(loop_specs(), st.data())
    def test_one_counter_off_is_named(self, loop, data):
        """Changing one counter of one event names that counter and that method."""
        trace = _clock(loop)
        i = data.draw(st.integers(0, len(trace) - 1))
        field = data.draw(st.sampled_from(["epoch_num", "local_step", "global_step"]))
        wrong = list(trace)
        wrong[i] = attrs.evolve(trace[i], **{field: getattr(trace[i], field) + 1})
        msg = explain_trace(trace, wrong, who="p")
        assert msg.startswith(f"p: {field} in {trace[i].kind.value}: expected ")

    def test_local_step_message(self):
        """The message of the issue's example."""
        exp = [TraceEvent("trigger_step", 1, 2, 3)]
        obs = [TraceEvent("trigger_step", 1, 3, 3)]
        assert explain_trace(exp, obs, who="probe").splitlines()[0] == (
            "probe: local_step in trigger_step: expected the 0-based index of the step in its "
            "epoch (2), got 3 at epoch 1"
        )

    def test_missing_method(self):
        """A method never called is named first, with the rule of that method."""
        trace = _clock(LoopSpec(max_epoch=1, steps_per_epoch=2))
        without = [e for e in trace if e.kind is not EventKind.TRIGGER_STEP]
        msg = explain_trace(trace, without, who="p")
        assert msg.startswith(
            "p: trigger_step is never called (expected 2 calls) -- first difference:"
        )
        assert "rule: trigger_step runs once after each run_step completes" in msg

    def test_truncated(self):
        """A trace that ends early says what came next."""
        trace = _clock(LoopSpec(max_epoch=1, steps_per_epoch=1))
        msg = explain_trace(trace, trace[:-1], who="p")
        assert "after_train is never called" in msg
        assert "the trace ends after 7 events; expected next: after_train" in msg

    def test_extra(self):
        """Extra events are counted."""
        trace = _clock(LoopSpec(max_epoch=1, steps_per_epoch=1))
        msg = explain_trace(trace, [*trace, trace[-1]], who="p")
        assert "after_train is called 2 times, expected 1" in msg
        assert "1 extra events after the expected end" in msg

    def test_order(self):
        """Swapped methods are an order problem."""
        trace = _clock(LoopSpec(max_epoch=1, steps_per_epoch=1))
        swapped = list(trace)
        swapped[5], swapped[6] = swapped[6], swapped[5]
        msg = explain_trace(trace, swapped, who="p")
        assert msg.startswith("p: order of callback methods: event #5 should be after_epoch")

    def test_fields_restrict(self):
        """Only the chosen counters are compared."""
        exp = [TraceEvent("after_run", 1, 0, 1)]
        obs = [TraceEvent("after_run", 1, 0, 2)]
        assert explain_trace(exp, obs, who="p", fields=("local_step",)) is None
        assert explain_trace(exp, obs, who="p", fields=("global_step",)) is not None


class TestExplainValues:
    """`explain_values` compares reads of a hyper-parameter."""

    def test_value(self):
        """A wrong value names the read's event and both values."""
        e = TraceEvent("trigger_epoch", 2, 0, 2)
        msg = explain_values([(e, 0.5)], [(e, 0.25)], who="lr", rule="the rule")
        assert msg == (
            "lr: value at trigger_epoch (epoch_num 2, local_step 0, global_step 2): expected 0.5, "
            "got 0.25\n  rule: the rule"
        )

    def test_float32_rounding(self):
        """float32 rounding is not a difference."""
        e = TraceEvent("trigger_epoch", 2, 0, 2)
        assert explain_values([(e, 0.1)], [(e, 0.10000000149011612)], who="lr", rule="r") is None

    def test_count(self):
        """Missing reads are counted."""
        e = TraceEvent("trigger_epoch", 2, 0, 2)
        assert "1 reads, expected 2" in explain_values(
            [(e, 1.0), (e, 1.0)], [(e, 1.0)], who="lr", rule="r"
        )

    def test_counts_helper(self):
        """count_differences lists every method off."""
        a = [TraceEvent("before_train", 0, -1, 0)]
        assert count_differences(a, a + a) == ["before_train is called 2 times, expected 1"]


@pytest.mark.parametrize("kind", list(EventKind))
def test_every_method_has_a_rule(kind):
    """Each callback method has a rule citing the spec."""
    from towerkit.conformance._diff import KIND_RULES

    assert "spec 00" in KIND_RULES[kind]
