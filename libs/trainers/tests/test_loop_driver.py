"""The loop driver: its step segments and epoch starts (pure), and the drive with its hooks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import Callback, Callbacks, LoopBounds, StopTraining
from towerkit.trainers._interrupt import StopControl
from towerkit.trainers._loop_driver import (
    PLAIN_HOOKS,
    LoopDriver,
    LoopHooks,
    LoopRun,
    epoch_starts,
    step_segments,
)
from towerkit.trainers._stop import StopEvent
from towerkit.trainers.parallel._elastic_core import (
    LoopCommit,
    commit_after_step,
    remaining_epochs,
)


@st.composite
def epochs_and_k(draw):
    """(steps_per_epoch, k, done) with k dividing the epoch and done at a call's end."""
    k = draw(st.integers(1, 4))
    spe = k * draw(st.integers(1, 8))
    done = k * draw(st.integers(0, spe // k - 1))
    return spe, k, done


class TestStepSegments:
    @given(epochs_and_k(), st.one_of(st.none(), st.integers(1, 10)))
    def test_the_steps_are_the_epochs_calls(self, ek, every):
        """Cut or not, the segments hold each call's last step once, in order."""
        spe, k, done = ek
        steps = [s for seg, _ in step_segments(done, spe, k, every) for s in seg]
        assert steps == list(range(done + k - 1, spe, k))

    @given(epochs_and_k(), st.integers(1, 10))
    def test_hooks_after_multiples_of_every_inside_the_epoch(self, ek, every):
        """A hook after each call ending at a multiple of `every`, never at the epoch's end."""
        spe, k, done = ek
        segments = step_segments(done, spe, k, every)
        hooked = [after for _, after in segments[:-1]]
        assert segments[-1][1] == 0
        assert hooked == [d for d in range(done + k, spe, k) if d % every == 0]
        for seg, after in segments[:-1]:
            assert seg[-1] + 1 == after

    @given(epochs_and_k())
    def test_without_hook_one_segment(self, ek):
        spe, k, done = ek
        assert step_segments(done, spe, k, None) == ((range(done + k - 1, spe, k), 0),)

    @given(st.integers(1, 30), st.integers(1, 10), st.integers(0, 30))
    def test_elastic_commits_as_before(self, spe, every, done):
        """With K = 1 the hooks fall where elastic's commits did (`commit_after_step`)."""
        done = min(done, spe - 1)
        got = [after for _, after in step_segments(done, spe, 1, every) if after]
        want = [s + 1 for s in range(done, spe) if commit_after_step(s + 1, spe, every)]
        assert got == want

    @given(st.integers(1, 8), st.one_of(st.none(), st.integers(1, 8)))
    def test_an_epoch_of_no_step_has_no_call(self, k, every):
        """steps_per_epoch=0 (an evaluation-only run): entered at 0, no call, no hook."""
        assert [list(r) for r, _ in step_segments(0, 0, k, every)] == [[]]
        assert all(after == 0 for _, after in step_segments(0, 0, k, every))

    @pytest.mark.parametrize(
        ("done", "spe", "k", "every", "what"),
        [
            (6, 6, 1, None, "after 6 steps"),
            (1, 6, 2, None, "after 1 steps"),
            (0, 6, 0, 1, "k=0"),
            (1, 0, 1, None, "an epoch of 0 steps, 1 per call, cannot be entered after 1 steps"),
        ],
    )
    def test_refuses(self, done, spe, k, every, what):
        with pytest.raises(ValueError, match=what):
            step_segments(done, spe, k, every)


class TestEpochStarts:
    @given(st.integers(1, 5), st.integers(0, 6), st.integers(0, 9))
    def test_first_epoch_after_done_others_whole(self, start, more, done):
        bounds = LoopBounds(starting_epoch=start, max_epoch=start + more, steps_per_epoch=10)
        got = list(epoch_starts(bounds, done))
        assert got == [(start, done)] + [(e, 0) for e in range(start + 1, start + more + 1)]

    def test_lazy(self):
        bounds = LoopBounds(starting_epoch=1, max_epoch=9999999, steps_per_epoch=1)
        assert next(epoch_starts(bounds)) == (1, 0)


class Recorder(Callback):
    """Records the loop's callbacks with the driver's position."""

    def __init__(self, driver, log, stop_at=None):
        self.driver = driver
        self.log = log
        self.stop_at = stop_at

    def _at(self, what):
        self.log.append((what, self.driver.epoch_num, self.driver.local_step))

    def _before_epoch(self):
        self._at("before_epoch")

    def _trigger_step(self):
        self._at("step")
        if self.stop_at == (self.driver.epoch_num, self.driver.local_step):
            raise StopTraining("asked to")

    def _trigger_epoch(self):
        self._at("trigger_epoch")


def drive(bounds, epochs, hooks=PLAIN_HOOKS, *, k=1, stop=None, stop_at=None):
    """Drive a loop of recording callbacks; the log, with the hooks' calls in it."""
    driver = LoopDriver()
    driver.steps_per_execution = k
    driver.start(bounds)
    log: list[tuple] = []
    cbs = Callbacks([Recorder(driver, log, stop_at)])
    run = LoopRun(cbs, lambda: None, lambda: False, stop or StopControl())
    if hooks.after_steps is not None or hooks.after_epoch is not None:
        hooks = LoopHooks(
            begin_epoch=hooks.begin_epoch,
            after_steps=lambda e, d: log.append(("commit", e, d)),
            every=hooks.every,
            after_epoch=lambda e: log.append(("commit", e + 1, 0)),
            epoch_end_first=hooks.epoch_end_first,
            rewind_local_step=hooks.rewind_local_step,
        )
    driver.drive(run, epochs, hooks)
    return log, driver


def elastic_reference(commit, starting, max_epoch, spe, every, begun):
    """What the elastic loop called before it ran through the driver, as a log."""
    log = []
    for epoch, first in remaining_epochs(commit, starting, max_epoch, spe):
        if epoch not in begun:
            begun.add(epoch)
            log.append(("before_epoch", epoch, first - 1))
        for step in range(first, spe):
            log.append(("step", epoch, step))
            if commit_after_step(step + 1, spe, every):
                log.append(("commit", epoch, step + 1))
        log.append(("trigger_epoch", epoch, spe - 1))
        log.append(("commit", epoch + 1, 0))
    return log


class TestDrive:
    def test_plain_order_and_counters(self):
        bounds = LoopBounds(starting_epoch=2, max_epoch=3, steps_per_epoch=4)
        log, driver = drive(bounds, epoch_starts(bounds, 2), k=2)
        assert log == [
            ("before_epoch", 2, -1),
            ("step", 2, 3),
            ("trigger_epoch", 2, 3),
            ("before_epoch", 3, -1),
            ("step", 3, 1),
            ("step", 3, 3),
            ("trigger_epoch", 3, 3),
        ]
        assert (driver.epoch_num, driver.local_step) == (3, 3)
        driver.start_global_step = 10
        assert driver.global_step(3) == 16
        driver.rebase(20, 3)
        assert driver.global_step(3) == 20

    @given(
        st.integers(1, 6),
        st.integers(1, 3),
        st.integers(0, 3),
        st.integers(1, 7),
        st.data(),
    )
    def test_elastic_hooks_as_the_elastic_loop_did(self, spe, starting, more, every, data):
        """Driven with elastic's hooks from a commit (a roll-back included), the driver calls
        what the elastic loop called: before_epoch once per epoch, a commit every `every`
        steps and after each epoch's end."""
        from towerkit.trainers.parallel._elastic import elastic_hooks

        max_epoch = starting + more
        epoch = data.draw(st.integers(starting, max_epoch))
        done = data.draw(st.integers(0, spe - 1))
        commit = LoopCommit(0, epoch, done)
        begun = set(data.draw(st.sets(st.integers(starting, max_epoch))))
        bounds = LoopBounds(starting_epoch=starting, max_epoch=max_epoch, steps_per_epoch=spe)
        hooks = elastic_hooks(None, None, every)  # its commits are replaced by the log's
        seen = set(begun)
        begin = hooks.begin_epoch
        for e in seen:
            assert begin(e)  # mark them begun, as a pass before a roll-back would have
        log, _ = drive(bounds, remaining_epochs(commit, starting, max_epoch, spe), hooks)
        assert log == elastic_reference(commit, starting, max_epoch, spe, every, set(seen))

    def test_callback_stop_is_raised_mid_epoch(self):
        bounds = LoopBounds(starting_epoch=1, max_epoch=2, steps_per_epoch=3)
        with pytest.raises(StopTraining, match="asked to"):
            drive(bounds, epoch_starts(bounds), stop_at=(1, 1))

    @pytest.mark.parametrize(("end_first", "ends_epoch"), [(True, True), (False, False)])
    def test_preemption_in_the_last_step(self, end_first, ends_epoch):
        """The plain loop ends the epoch before stopping; elastic's hooks stop at once."""
        bounds = LoopBounds(starting_epoch=1, max_epoch=2, steps_per_epoch=2)
        control = StopControl()
        control.take(StopEvent.PREEMPT_SIGNAL)
        control.take(StopEvent.AGREED)
        assert control.preempted
        hooks = LoopHooks(epoch_end_first=end_first)
        log: list[tuple] = []
        driver = LoopDriver()
        driver.start(bounds)
        cbs = Callbacks([Recorder(driver, log)])
        with pytest.raises(StopTraining):
            driver.drive(LoopRun(cbs, lambda: None, lambda: False, control), [(1, 1)], hooks)
        assert (("trigger_epoch", 1, 1) in log) is ends_epoch

    def test_drive_needs_bounds(self):
        with pytest.raises(ValueError, match="start"):
            LoopDriver().drive(
                LoopRun(Callbacks([]), lambda: None, lambda: False, StopControl()), []
            )

    def test_hooks_refuse_bad_every(self):
        with pytest.raises(ValueError, match="'every' must be an int >= 1"):
            LoopHooks(every=0)
