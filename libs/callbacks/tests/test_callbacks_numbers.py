"""Numbers as tensorpack's entry points took them (``int()``/``float()``): the pure functions
and each callback whose tensorpack counterpart converted its argument."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    MergeAllSummaries,
    ScheduledHyperParamSetter,
    SessionRunTimeout,
    SimpleMovingAverage,
    ThroughputTracker,
)
from towerkit.callbacks.plumbing import real_number, whole_number


class TestWholeNumber:
    """whole_number: what int() took, fractions refused."""

    @given(st.integers())
    def test_ints_and_their_spellings(self, n):
        """An int, its decimal string, its float (when exact) and a NumPy int are that int."""
        assert whole_number(n) == n
        assert whole_number(str(n)) == n
        assert whole_number(np.int64(n % 2**62)) == n % 2**62
        if abs(n) < 2**52:
            assert whole_number(float(n)) == n

    @given(st.floats(allow_nan=True, allow_infinity=True))
    def test_floats(self, x):
        """A float is a whole number exactly when it is finite and integral."""
        got = whole_number(x)
        if np.isfinite(x) and float(x).is_integer():
            assert got == int(x)
        else:
            assert got is None

    @pytest.mark.parametrize("value", [True, False, "2.0", "two", None, [3], b"3"])
    def test_not_whole(self, value):
        """A bool, a string int() refuses and other objects are not whole numbers."""
        assert whole_number(value) is None


class TestRealNumber:
    """real_number: what float() took."""

    @given(st.floats(allow_nan=False))
    def test_floats_and_strings(self, x):
        """A float and its repr are that float."""
        assert real_number(x) == x
        assert real_number(repr(x)) == x

    @pytest.mark.parametrize("value", [True, "fast", None, (1.0,)])
    def test_not_real(self, value):
        """A bool, a string float() refuses and other objects are not real numbers."""
        assert real_number(value) is None


class TestEntryPoints:
    """Each callback takes the numbers its tensorpack counterpart converted."""

    def test_schedule_of_strings(self):
        """ScheduledHyperParamSetter('lr', [('25', '1e-5')]): tensorpack's int()/float() per entry."""
        setter = ScheduledHyperParamSetter("learning_rate", [("0", "1e-3"), (25.0, "1e-5")])
        assert setter.schedule.points == ((0, 1e-3), (25, 1e-5))

    def test_schedule_of_lists_and_tuples(self):
        """A tuple of pairs, a list of lists (a TOML array) and a generator, as tensorpack's."""
        expected = ((1, 0.1), (5, 0.01))
        for schedule in (((1, 0.1), (5, 0.01)), [[1, 0.1], [5, 0.01]], iter([(1, 0.1), (5, 0.01)])):
            assert ScheduledHyperParamSetter("lr", schedule).schedule.points == expected

    def test_schedule_fraction_refused(self):
        """A fractional point is refused, not truncated as int() did."""
        with pytest.raises(TypeError, match=r"point 2\.5 is not an int"):
            ScheduledHyperParamSetter("learning_rate", [(2.5, 0.1)])

    def test_merge_all_summaries_period(self):
        """MergeAllSummaries(period='10') as tensorpack's int(period); 2.5 refused."""
        MergeAllSummaries(period="10")
        MergeAllSummaries(period=10.0)
        with pytest.raises(TypeError, match=r"'period' must be an int \(steps\); got float 2\.5"):
            MergeAllSummaries(period=2.5)

    def test_simple_moving_average_window(self):
        """SimpleMovingAverage(window_size=5.0) as tensorpack's int(window_size)."""
        sma = SimpleMovingAverage(["cost"], window_size=5.0)
        assert sma.stat_names == ("cost/SMA",)
        with pytest.raises(TypeError, match="'window_size' must be an int"):
            SimpleMovingAverage(["cost"], window_size="five")

    def test_session_run_timeout(self):
        """SessionRunTimeout('5000') as tensorpack's int(timeout_in_ms)."""
        assert SessionRunTimeout("5000").timeout_in_ms == 5000
        assert SessionRunTimeout(5000.0).timeout_in_ms == 5000

    def test_throughput_tracker(self):
        """ThroughputTracker(samples_per_step=32.0) as tensorpack's int(samples_per_step)."""
        ThroughputTracker(samples_per_step=32.0)
        with pytest.raises(
            TypeError, match=r"'samples_per_step' must be an int or None; got float 0\.5"
        ):
            ThroughputTracker(samples_per_step=0.5)
