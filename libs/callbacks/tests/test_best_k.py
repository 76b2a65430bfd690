"""The best-k bookkeeping: plan_best_k, resume_best_k and the record, as pure functions."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    BestEntry,
    BestKPlan,
    BestKResume,
    BestKState,
    plan_best_k,
    rank_entries,
    resume_best_k,
)
from towerkit.callbacks._best_k import best_k_json, parse_best_k

values = st.one_of(
    st.sampled_from([0.0, 1.0, 1.0, 2.5, -3.0]),  # ties are common
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
modes = st.sampled_from(["min", "max"])


def fold(k, mode, series):
    """Offer series[i] at step i + 1; returns the final state and every plan."""
    state, plans = BestKState(k=k, mode=mode), []
    for i, v in enumerate(series):
        plan = plan_best_k(state, name=f"c-{i + 1}", step=i + 1, epoch=i + 1, value=v)
        plans.append((state, plan))
        state = plan.state
    return state, plans


def expected_top(k, mode, series):
    """The top k by value (lowest first for min), ties to the earlier step, finite values only."""
    finite = [(v, i + 1) for i, v in enumerate(series) if math.isfinite(v)]
    key = (lambda p: (p[0], p[1])) if mode == "min" else (lambda p: (-p[0], p[1]))
    return [step for _, step in sorted(finite, key=key)[:k]]


class TestPlanBestK:
    """Which candidate joins the best k and which kept one it displaces."""

    @given(st.integers(1, 5), modes, st.lists(values, max_size=25))
    def test_fold_keeps_the_top_k(self, k, mode, series):
        """Offering a series one by one keeps exactly the top k of its finite values, ties to the earlier."""
        state, _ = fold(k, mode, series)
        assert [e.step for e in state.kept] == expected_top(k, mode, series)

    @given(st.integers(1, 5), modes, st.lists(values, max_size=25))
    def test_each_plan(self, k, mode, series):
        """Never more than k; a prune only with an admission, at most one, never the candidate;
        a refused candidate leaves the state as it was; NaN and infinities are never admitted."""
        for i, (before, plan) in enumerate(fold(k, mode, series)[1]):
            assert isinstance(plan, BestKPlan)
            assert len(plan.state.kept) <= k
            if not plan.admitted:
                assert plan.state == before
                assert plan.prune == ()
                continue
            assert math.isfinite(series[i])
            assert any(e.step == i + 1 for e in plan.state.kept)
            assert len(plan.prune) <= 1
            assert all(p in before.kept and p not in plan.state.kept for p in plan.prune)
            assert len(before.kept) < k or len(plan.prune) == 1
            assert set(before.kept) - set(plan.prune) <= set(plan.state.kept)

    def test_ties_keep_the_earlier(self):
        """An equal value never displaces a kept one, in either mode."""
        for mode in ("min", "max"):
            state, _ = fold(2, mode, [1.0, 1.0, 1.0])
            assert [e.step for e in state.kept] == [1, 2]

    def test_nan_refused_with_reason(self):
        """A NaN is not a candidate, and the reason says so."""
        plan = plan_best_k(BestKState(k=1, mode="min"), name="x", step=1, epoch=1, value=math.nan)
        assert not plan.admitted
        assert plan.reason == "nan is not finite: not a candidate"

    def test_step_kept_already(self):
        """The same step offered twice is kept once."""
        state, _ = fold(3, "min", [2.0])
        plan = plan_best_k(state, name="c-1", step=1, epoch=1, value=0.0)
        assert not plan.admitted
        assert plan.reason == "global step 1 is kept already"

    def test_reasons(self):
        """An admission says its place; a refusal names the worst kept."""
        state, plans = fold(2, "max", [1.0, 3.0, 0.5])
        assert plans[1][1].reason == "number 1 of the best 2"
        assert plans[2][1].reason == "not better than the worst of the best 2 (1 at global step 1)"
        assert state.worst == state.kept[-1]
        assert BestKState(k=2, mode="max").worst is None


class TestRecords:
    """BestEntry and BestKState validate when built."""

    def test_repr(self):
        """Reprs list the fields."""
        e = BestEntry(name="m-4", step=4, epoch=2, value=1)
        assert repr(e) == "BestEntry(name='m-4', step=4, epoch=2, value=1.0)"
        assert repr(BestKState(k=2, mode="min", kept=[e])) == (
            "BestKState(k=2, mode='min', kept=(BestEntry(name='m-4', step=4, epoch=2, value=1.0),))"
        )

    def test_fail(self):
        """Bad fields are named with what was expected."""
        with pytest.raises(
            ValueError, match=r"BestEntry: 'value' must be a finite number; got nan"
        ):
            BestEntry(name="a", step=1, epoch=1, value=math.nan)
        with pytest.raises(ValueError, match=r"BestEntry: 'step' must be an int >= 0; got -1"):
            BestEntry(name="a", step=-1, epoch=1, value=0.0)
        with pytest.raises(ValueError, match=r"BestKState: 'k' must be an int > 0; got 0"):
            BestKState(k=0, mode="min")
        with pytest.raises(ValueError, match=r"'mode' must be in \('min', 'max'\)"):
            BestKState(k=1, mode="best")
        a = BestEntry(name="a", step=1, epoch=1, value=2.0)
        b = BestEntry(name="b", step=2, epoch=2, value=1.0)
        with pytest.raises(ValueError, match=r"'kept' is inconsistent: not ranked best first"):
            BestKState(k=2, mode="min", kept=[a, b])
        with pytest.raises(ValueError, match=r"2 entries for k = 1"):
            BestKState(k=1, mode="min", kept=[b, a])
        with pytest.raises(ValueError, match=r"steps kept twice: \[1\]"):
            BestKState(k=2, mode="min", kept=[a, BestEntry(name="c", step=1, epoch=1, value=3.0)])
        with pytest.raises(ValueError, match=r"'mode' must be 'min' or 'max'; got 'up'"):
            rank_entries([a], "up")


entries = st.lists(
    st.builds(
        BestEntry,
        name=st.just(""),
        step=st.integers(0, 60),
        epoch=st.integers(0, 30),
        value=st.floats(-10, 10, allow_nan=False),
    ),
    max_size=12,
    unique_by=lambda e: e.step,
).map(
    lambda es: [
        BestEntry(name=f"m-{e.step}", step=e.step, epoch=e.epoch, value=e.value) for e in es
    ]
)


class TestResumeBestK:
    """The record read back at the start of a run."""

    @given(entries, st.integers(1, 5), modes, st.integers(0, 60))
    def test_partition(self, es, k, mode, start):
        """Every entry is kept, pruned or ahead, once; kept and pruned are at or behind the start,
        the kept are the best k of those, and the pruned rank after every kept one."""
        r = resume_best_k(es, k=k, mode=mode, start_step=start)
        assert isinstance(r, BestKResume)
        assert sorted((*r.state.kept, *r.prune, *r.ahead), key=lambda e: e.step) == sorted(
            es, key=lambda e: e.step
        )
        behind = rank_entries([e for e in es if e.step <= start], mode)
        assert r.state.kept == behind[:k]
        assert r.prune == behind[k:]
        assert all(e.step > start for e in r.ahead)


class TestRecordText:
    """The record file's text round-trips, and a foreign text is refused with what is wrong."""

    @given(entries, st.integers(1, 5), modes, st.text(min_size=1, max_size=10))
    def test_round_trip(self, es, k, mode, stat):
        """parse_best_k(best_k_json(state)) gives the state's entries back."""
        state = resume_best_k(es, k=k, mode=mode, start_step=60).state
        assert parse_best_k(best_k_json(state, stat)) == (stat, mode, state.kept)

    @pytest.mark.parametrize(
        ("text", "match"),
        [
            ("{", "not JSON"),
            ("[]", "expected an object with 'format': 1"),
            ('{"format": 1, "monitor_stat": "a", "mode": "up", "kept": []}', "'mode'"),
            (
                '{"format": 1, "monitor_stat": "a", "mode": "min", "kept": [{"name": "x"}]}',
                "an entry of 'kept' is not a",
            ),
        ],
    )
    def test_fail(self, text, match):
        """Each kind of bad text is named."""
        with pytest.raises(ValueError, match=match):
            parse_best_k(text)
