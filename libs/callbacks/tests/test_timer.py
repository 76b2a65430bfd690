"""The time trigger: the pure timer, ModelSaver(every_n_minutes) and TimedTrigger with a fake clock."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_savers import listing, train, values

from towerkit.callbacks import (
    Callback,
    ModelSaver,
    TimedTrigger,
    TimerState,
    WallClockInterval,
    advance_timer,
)
from towerkit.callbacks.plumbing import read_positions


class TestAdvanceTimer:
    """advance_timer fires when the interval has passed since the last firing."""

    @given(
        st.floats(0.1, 100),
        st.lists(st.floats(0, 50), max_size=30),
    )
    def test_monotone_clock(self, seconds, gaps):
        """With a clock that never goes back: each firing is at least `seconds` after the
        previous one (or the start), and a reading that does not fire is less than that."""
        interval, state = WallClockInterval(seconds), TimerState(0.0)
        now, last = 0.0, 0.0
        for gap in gaps:
            now += gap
            due, state = advance_timer(interval, state, now)
            assert due == (now - last >= seconds)
            if due:
                last = now
            assert state == TimerState(last)

    @given(st.floats(0.1, 100), st.floats(-1e6, 1e6), st.floats(0, 1e6))
    def test_clock_going_back(self, seconds, last, back):
        """A reading before the last firing never fires, and restarts the count there."""
        now = last - back - 1.0
        assert advance_timer(WallClockInterval(seconds), TimerState(last), now) == (
            False,
            TimerState(now),
        )

    def test_repr(self):
        """Reprs show seconds."""
        assert repr(WallClockInterval.from_minutes(1.5)) == "WallClockInterval(seconds=90.0)"
        assert repr(TimerState(3)) == "TimerState(last=3.0)"

    @pytest.mark.parametrize(
        ("minutes", "error", "match"),
        [
            (0, ValueError, r"'every_n_minutes' must be a finite number of minutes > 0; got 0"),
            (-2.0, ValueError, r"> 0; got -2.0"),
            (math.inf, ValueError, r"> 0; got inf"),
            (math.nan, ValueError, r"> 0; got nan"),
            ("5", TypeError, r"must be a number of minutes > 0; got str '5'"),
            (True, TypeError, r"got bool True"),
        ],
    )
    def test_fail(self, minutes, error, match):
        """Bad periods are refused at construction, by the record and by both shells."""
        with pytest.raises(error, match=match):
            WallClockInterval.from_minutes(minutes)
        with pytest.raises(error, match=match):
            ModelSaver(every_n_minutes=minutes)
        with pytest.raises(error, match=match):
            TimedTrigger(Callback(), minutes)
        with pytest.raises(
            ValueError, match=r"WallClockInterval: 'seconds' must be a finite number > 0"
        ):
            WallClockInterval(0)

    def test_clock_must_be_callable(self):
        """A clock that is not a function is refused."""
        with pytest.raises(
            TypeError, match=r"'clock' must be a function returning seconds; got int"
        ):
            ModelSaver(every_n_minutes=1, clock=5)
        with pytest.raises(
            TypeError, match=r"'clock' must be a function returning seconds; got int"
        ):
            TimedTrigger(Callback(), 1, clock=5)


class FakeClock(Callback):
    """A clock that moves `minutes_per_step` minutes at each step (put it first in the callbacks)."""

    def __init__(self, minutes_per_step=1.0):
        self.now = 0.0
        self.per_step = minutes_per_step * 60.0

    def __call__(self):
        return self.now

    def _trigger_step(self):
        self.now += self.per_step


class SaveNowAt(Callback):
    """Calls saver.save_now() after a given global step, as the trainer does on a preemption signal."""

    def __init__(self, saver, step):
        self.saver, self.step = saver, step

    def _trigger_step(self):
        if self.trainer.global_step == self.step:
            self.saver.save_now()


def saved_steps(d):
    return sorted(
        int(n[len("model-") : -len(".index")]) for n in listing(d) if n.endswith(".index")
    )


class TestModelSaverEveryNMinutes:
    """ModelSaver saves when N minutes have passed since its last save, beside its trigger."""

    def test_timed_and_epoch_saves(self, tmp_path):
        """1 minute a step, every 2.5 minutes, epochs of 10 steps: saves at 3, 6, 9, 10 (the
        epoch; the count restarts), 13, 16, 19, 20; each holds its step, and mid-epoch ones their position."""
        clock = FakeClock()
        saver = ModelSaver(max_to_keep=0, every_n_minutes=2.5, clock=clock)
        train([clock, saver], tmp_path, steps=10, max_epoch=2)
        assert saver.every_n_minutes == 2.5
        assert saved_steps(tmp_path) == [3, 6, 9, 10, 13, 16, 19, 20]
        assert all(values(tmp_path / f"model-{s}")["w"] == s for s in (3, 13, 20))
        positions = {p.step: (p.epoch, p.done) for p in read_positions(str(tmp_path))}
        assert positions[13] == (2, 3)
        assert positions[10] == (1, 10)

    def test_counts_from_any_save(self, tmp_path):
        """A save_now (a preemption save) restarts the count: 2 (save_now), 5, 8, then the epoch at 10."""
        clock = FakeClock()
        saver = ModelSaver(max_to_keep=0, every_n_minutes=3, clock=clock)
        train([clock, SaveNowAt(saver, 2), saver], tmp_path, steps=10, max_epoch=1)
        assert saved_steps(tmp_path) == [2, 5, 8, 10]

    def test_no_timer_no_step_hook(self):
        """Without every_n_minutes the saver has no per-step hook (the loop's fast path)."""
        assert not ModelSaver().has_hook("_trigger_step")
        assert ModelSaver(every_n_minutes=1).has_hook("_trigger_step")
        assert ModelSaver().every_n_minutes is None


class Count(Callback):
    """Records the global step of each trigger()."""

    def __init__(self):
        self.steps = []

    def _trigger(self):
        self.steps.append(self.trainer.global_step)


class TestTimedTrigger:
    """TimedTrigger calls trigger() every N minutes since the callback was last triggered."""

    def test_beside_the_epoch_trigger(self, tmp_path):
        """1 minute a step, every 2 minutes, epochs of 5: 2, 4, 5 (the epoch's own), 7, 9, 10."""
        clock, count = FakeClock(), Count()
        timed = TimedTrigger(count, 2, clock=clock)
        train([clock, timed], tmp_path, steps=5, max_epoch=2)
        assert count.steps == [2, 4, 5, 7, 9, 10]
        assert str(timed) == "TimedTrigger(Count, every_n_minutes=2)"
        assert timed.interval == WallClockInterval(120.0)

    def test_slow_clock(self, tmp_path):
        """A clock slower than the epochs: only the epoch triggers."""
        clock, count = FakeClock(0.1), Count()
        train([clock, TimedTrigger(count, 1, clock=clock)], tmp_path, steps=5, max_epoch=3)
        assert count.steps == [5, 10, 15]
