"""Run results: what a process recorded, through JSON between processes."""

from __future__ import annotations

import json

from conformance_strategies import trace_events, traces
from hypothesis import given
from hypothesis import strategies as st

from towerkit.conformance import RunResult


class TestRunResult:
    """`RunResult` holds the recordings of one run in one process."""

    def test_repr(self):
        """The repr starts with the scenario and rank."""
        assert repr(RunResult(scenario="s")).startswith("RunResult(scenario='s', rank=0, traces=()")

    def test_fail(self):
        """The scenario's name is required to be a str."""
        import pytest

        with pytest.raises(TypeError, match="'scenario' must be <class 'str'>"):
            RunResult(scenario=1)

    @given(
        traces(),
        st.lists(st.tuples(trace_events(), st.floats(-10, 10, allow_nan=False)), max_size=4),
        st.none() | st.text(max_size=20),
        st.integers(0, 3),
    )
    def test_json_round_trip(self, trace, values, error, rank):
        """Everything survives JSON, as between a job's processes and the suite."""
        result = RunResult(
            scenario="s",
            rank=rank,
            traces={"loop": trace},
            values={"lr": values},
            error=error,
            files=["checkpoint", "model-2.index"],
            best_steps=[("min-e.tfmodel", 2)],
            variables=[("before_train", "linear/b", [0.5])],
            towers=[("tower0", True)],
            predictor=[("pred", [1.0, 2.0])],
        )
        again = RunResult.from_data(json.loads(json.dumps(result.to_data())))
        assert again == result
        assert again.trace("loop") == tuple(trace)
        assert again.trace("missing") == ()

    def test_views(self):
        """Variables by moment, stats records."""
        result = RunResult(
            scenario="s",
            variables=[("before_train", "w", [1.0]), ("after_train", "w", [2.0])],
            stats='[{"epoch_num": 1}]',
        )
        assert result.variable_values("after_train") == {"w": (2.0,)}
        assert result.stats_records() == [{"epoch_num": 1}]
        assert RunResult(scenario="s").stats_records() is None
