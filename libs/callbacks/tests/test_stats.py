"""Pure statistics: the time-left estimate and the stat-monitor decision."""

import math
import re
import statistics

import attrs
import pytest
from callbacks_strategies import stat_series
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    StatMonitorRule,
    StatMonitorState,
    advance,
    estimate_time_left,
    should_change,
)
from towerkit.callbacks._stats import advance_rule


class TestEstimateTimeLeft:
    """`estimate_time_left` multiplies the epochs left by the average duration."""

    @given(
        st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=10),
        st.integers(0, 1000),
        st.booleans(),
    )
    def test_property(self, durations, epochs_left, median):
        """The estimate lies between epochs_left * min and epochs_left * max."""
        got = estimate_time_left(durations, epochs_left, median)
        avg = statistics.median(durations) if median else statistics.fmean(durations)
        assert got == pytest.approx(epochs_left * avg)
        assert epochs_left * min(durations) - 1e-6 <= got <= epochs_left * max(durations) + 1e-6

    def test_median_ignores_one_slow_epoch(self):
        """One slow epoch moves the mean, not the median."""
        assert estimate_time_left([1.0, 1.0, 100.0], 10) == 10.0
        assert estimate_time_left([1.0, 1.0, 100.0], 10, median=False) == 340.0

    def test_fail(self):
        """Empty or negative durations and negative epochs are rejected."""
        with pytest.raises(ValueError, match="'durations' must hold at least one"):
            estimate_time_left([], 3)
        with pytest.raises(
            ValueError, match=r"'durations' must be finite seconds >= 0; got \[-1.0, inf\]"
        ):
            estimate_time_left([1.0, -1.0, float("inf")], 3)
        with pytest.raises(ValueError, match="'epochs_left' must be >= 0; got -2"):
            estimate_time_left([1.0], -2)


def reference_should_change(history, threshold, last_k, reverse):
    """The documented rule, written out with a loop (a NaN is the worst value)."""
    if len(history) <= last_k:
        return False
    window = list(history)[-(last_k + 1) :]
    ref = window[0]
    for v in window[1:]:
        if math.isnan(v):
            continue  # the worst value improves on nothing
        if math.isnan(ref):
            return False  # any number improves on the worst value
        if not reverse and v < ref - threshold:
            return False
        if reverse and v > ref + threshold:
            return False
    return True


class TestShouldChange:
    """`should_change` follows the documented min/max rule over the last k + 1 observations."""

    @given(
        st.lists(st.floats(-100, 100) | st.just(math.nan), max_size=12),
        st.floats(0, 10),
        st.integers(1, 6),
        st.booleans(),
    )
    def test_matches_reference(self, history, threshold, last_k, reverse):
        """The decision equals a plain loop over the window, NaNs (diverged values) included."""
        assert should_change(history, threshold, last_k, reverse) == reference_should_change(
            history, threshold, last_k, reverse
        )

    @given(
        st.floats(-100, 100),
        st.lists(st.floats(-100, 100) | st.just(math.nan), min_size=1, max_size=6),
        st.randoms(use_true_random=False),
        st.booleans(),
    )
    def test_nan_order_does_not_matter(self, ref, newer, rnd, reverse):
        """Where the NaNs fall among the newer observations does not change the decision."""
        shuffled = list(newer)
        rnd.shuffle(shuffled)
        k = len(newer)
        assert should_change([ref, *newer], 0.0, k, reverse) == should_change(
            [ref, *shuffled], 0.0, k, reverse
        )

    @given(
        st.lists(st.floats(-100, 100), min_size=2, max_size=8),
        st.data(),
        st.booleans(),
    )
    def test_a_newer_nan_never_improves(self, history, data, reverse):
        """Turning a newer observation into NaN can only make a change more likely."""
        k = len(history) - 1
        i = data.draw(st.integers(1, k))
        diverged = [*history[:i], math.nan, *history[i + 1 :]]
        if should_change(history, 0.0, k, reverse):
            assert should_change(diverged, 0.0, k, reverse)
        assert should_change([*history[:1], *[math.nan] * k], 0.0, k, reverse)
        assert not should_change([math.nan, *history[1:]], 0.0, k, reverse)

    def test_needs_k_plus_one(self):
        """With k observations only, there is no reference yet."""
        assert not should_change([1.0, 1.0, 1.0], 0.0, 3)
        assert should_change([1.0, 1.0, 1.0, 1.0], 0.0, 3)


class TestStatMonitorState:
    """The state record of the stat monitor."""

    def test_repr(self):
        """The repr shows the history and the last step."""
        assert repr(StatMonitorState(history=[1, 2.5], last_step=4)) == (
            "StatMonitorState(history=(1.0, 2.5), last_step=4)"
        )

    def test_fail(self):
        """A non-integer step is rejected."""
        with pytest.raises(TypeError, match="'last_step' must be <class 'int'>"):
            StatMonitorState(last_step=1.5)


class TestAdvance:
    """`advance` counts new observations only and restarts after a change."""

    @given(stat_series(), st.floats(0, 1), st.integers(1, 4), st.booleans())
    def test_changes_spaced_by_k_plus_one(self, series, threshold, last_k, reverse):
        """Changes are at least last_k + 1 new observations apart, and each is justified."""
        state = StatMonitorState()
        new_since_change = []
        changes = []
        for i, (step, value) in enumerate(series):
            is_new = state.last_step is None or step != state.last_step
            state, change = advance(
                state, step, value, threshold=threshold, last_k=last_k, reverse=reverse
            )
            if is_new:
                new_since_change.append(value)
            if change:
                assert len(new_since_change) >= last_k + 1
                assert reference_should_change(new_since_change, threshold, last_k, reverse)
                changes.append(i)
                new_since_change = []
            else:
                assert state.history == tuple(new_since_change[-(last_k + 1) :])

    def test_repeated_step_is_not_new(self):
        """Seeing the same (step, value) again does not count."""
        s = StatMonitorState()
        for _ in range(5):
            s, change = advance(s, 7, 1.0, threshold=0.0, last_k=1)
            assert not change
        assert s.history == (1.0,)


class TestStatMonitorRule:
    """The stat monitor's rule validates itself; `advance_rule` is `advance` under it."""

    @given(
        st.one_of(st.integers(-3, 8), st.booleans(), st.floats(-2, 5), st.just("2")),
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-5, 5),
            st.booleans(),
            st.just("0.1"),
        ),
    )
    def test_accepts_exactly_the_valid(self, last_k, threshold):
        """A rule builds iff last_k is an int >= 1 and threshold a finite real >= 0; else the
        error names the first argument at fault, in the setter's wording."""
        k_ok = isinstance(last_k, int) and not isinstance(last_k, bool) and last_k >= 1
        t_ok = (
            isinstance(threshold, int | float)
            and not isinstance(threshold, bool)
            and math.isfinite(threshold)
            and threshold >= 0
        )
        if k_ok and t_ok:
            rule = StatMonitorRule(threshold=threshold, last_k=last_k)
            assert (rule.last_k, rule.threshold, rule.reverse) == (last_k, float(threshold), False)
            assert isinstance(rule.threshold, float)
            return
        want = (
            rf"'last_k' must be an int >= 1; got {re.escape(repr(last_k))}$"
            if not k_ok
            else rf"'threshold' must be a finite number >= 0; got {re.escape(repr(threshold))}$"
        )
        with pytest.raises(ValueError, match=want):
            StatMonitorRule(threshold=threshold, last_k=last_k)

    @given(stat_series(), st.floats(0, 1), st.integers(1, 4), st.booleans())
    def test_advance_rule_is_advance(self, series, threshold, last_k, reverse):
        """Folding `advance_rule` gives the states and decisions of folding `advance`."""
        rule = StatMonitorRule(threshold=threshold, last_k=last_k, reverse=reverse)
        a = b = StatMonitorState()
        for step, value in series:
            a, change_a = advance_rule(a, step, value, rule)
            b, change_b = advance(
                b, step, value, threshold=threshold, last_k=last_k, reverse=reverse
            )
            assert (a, change_a) == (b, change_b)

    def test_frozen(self):
        """The rule cannot change after construction."""
        rule = StatMonitorRule(threshold=0.5, last_k=2, reverse=True)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            rule.last_k = 3  # type: ignore[misc]
