"""The pure core of elastic horovod training: commits, when to commit, where to go on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers.parallel._elastic_core import (
    LoopCommit,
    check_commit_every,
    commit_after_step,
    final_global_step,
    reform_within,
    remaining_epochs,
)

LOOPS = st.tuples(st.integers(1, 6), st.integers(1, 4), st.integers(0, 4), st.integers(0, 50))
"""(steps_per_epoch, epochs, starting_epoch - 1, global step at the start)."""


def run_with_failures(spe, starting, max_epoch, start_gs, every_k, failures):
    """The loop of `run_elastic_loop`, driven by the core, with a rank lost at given steps.

    ``failures`` lists how many steps run before each loss (a loss rolls back to the
    last commit). Returns the events: ("step", global step), ("end", epoch), ("commit", c).
    """
    committed = LoopCommit(start_gs, starting, 0)
    events = []
    pending = list(failures)
    ran = 0
    while True:
        pos = committed
        gs = pos.global_step
        try:
            for epoch, first in remaining_epochs(pos, starting, max_epoch, spe):
                for step in range(first, spe):
                    if pending and ran == pending[0]:
                        pending.pop(0)
                        raise RuntimeError("rank lost")
                    ran += 1
                    gs += 1
                    events.append(("step", gs))
                    if commit_after_step(step + 1, spe, every_k):
                        committed = LoopCommit(gs, epoch, step + 1)
                        events.append(("commit", committed))
                events.append(("end", epoch))
                committed = LoopCommit(gs, epoch + 1, 0)
                events.append(("commit", committed))
            return events
        except RuntimeError:
            continue


class TestLoopCommit:
    @given(st.integers(0, 10**9), st.integers(0, 10**6), st.integers(0, 10**4))
    def test_array_round_trip(self, gs, epoch, done):
        """A commit survives its broadcast vector."""
        c = LoopCommit(gs, epoch, done)
        assert LoopCommit.from_array(c.to_array()) == c

    def test_bad(self):
        with pytest.raises(ValueError, match="global_step must be >= 0"):
            LoopCommit(-1, 1, 0)
        with pytest.raises(ValueError, match="3 values"):
            LoopCommit.from_array([1, 2, 3, 4])

    @given(st.integers(1, 8), st.integers(0, 40))
    def test_after_step_walks_epochs(self, spe, n):
        """n steps from an epoch's start land on epoch + n // spe, step n % spe."""
        c = LoopCommit(0, 1, 0)
        for _ in range(n):
            c = c.after_step(spe)
        assert (c.global_step, c.epoch, c.steps_done) == (n, 1 + n // spe, n % spe)


class TestDecisions:
    @given(st.integers(1, 20), st.integers(1, 20))
    def test_commit_points(self, spe, k):
        """Inside an epoch every k steps, never after its last step (the epoch end commits)."""
        points = [d for d in range(1, spe + 1) if commit_after_step(d, spe, k)]
        assert points == [d for d in range(k, spe, k)]

    @pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
    def test_bad_commit_every(self, bad):
        with pytest.raises(ValueError, match="'commit_every_k_steps' must be an int >= 1"):
            check_commit_every(bad)

    @given(LOOPS, st.data())
    def test_remaining(self, loop, data):
        """The rest of the loop from any commit: the commit's epoch from its step, then whole epochs."""
        spe, epochs, start0, gs = loop
        starting, max_epoch = start0 + 1, start0 + epochs
        epoch = data.draw(st.integers(starting, max_epoch + 1))
        done = 0 if epoch > max_epoch else data.draw(st.integers(0, spe - 1))
        c = LoopCommit(gs, epoch, done)
        rest = remaining_epochs(c, starting, max_epoch, spe)
        assert [e for e, _ in rest] == list(range(epoch, max_epoch + 1))
        assert all(first == 0 for _, first in rest[1:])
        left = sum(spe - first for _, first in rest)
        assert final_global_step(c, max_epoch, spe) == gs + left

    @given(LOOPS)
    def test_outside_refused(self, loop):
        spe, epochs, start0, gs = loop
        with pytest.raises(ValueError, match="outside the loop"):
            remaining_epochs(LoopCommit(gs, start0, 0), start0 + 1, start0 + epochs, spe)
        with pytest.raises(ValueError, match="outside the loop"):
            remaining_epochs(LoopCommit(gs, start0 + 1, spe), start0 + 1, start0 + epochs, spe)

    @given(LOOPS, st.integers(1, 7), st.lists(st.integers(0, 60), max_size=5))
    def test_failures_end_as_uninterrupted(self, loop, k, losses):
        """Rolled back at any steps, the loop ends at the uninterrupted global step, each epoch once."""
        spe, epochs, start0, gs = loop
        starting, max_epoch = start0 + 1, start0 + epochs
        clean = run_with_failures(spe, starting, max_epoch, gs, k, [])
        events = run_with_failures(spe, starting, max_epoch, gs, k, sorted(set(losses)))
        ends = [e for kind, e in events if kind == "end"]
        assert ends == list(range(starting, max_epoch + 1))
        steps = [s for kind, s in events if kind == "step"]
        assert steps[-1] == [s for kind, s in clean if kind == "step"][-1] == gs + epochs * spe
        assert events[-1] == ("commit", LoopCommit(gs + epochs * spe, max_epoch + 1, 0))
        # a rollback never crosses an epoch's end: global steps only repeat inside an epoch
        for i, s in enumerate(steps[1:], 1):
            if s <= steps[i - 1]:
                assert (s - gs - 1) // spe == (steps[i - 1] - gs - 1) // spe


class TestReformWithin:
    """How long a rank waits for horovod's ring to re-form before it ends with one line."""

    @given(st.floats(0.01, 1e5, allow_nan=False), st.floats(0.01, 1e5, allow_nan=False))
    def test_sum(self, elastic, gloo):
        """The driver's wait for hosts, then a gloo timeout for the old ring and the new."""
        env = {"HOROVOD_ELASTIC_TIMEOUT": repr(elastic), "HOROVOD_GLOO_TIMEOUT_SECONDS": repr(gloo)}
        assert reform_within(env) == elastic + 2 * gloo
        assert reform_within({}) == 600.0 + 2 * 30.0
        assert reform_within({"HOROVOD_GLOO_TIMEOUT_SECONDS": " "}) == 660.0

    @pytest.mark.parametrize("bad", ["soon", "0", "-5", "inf", "nan"])
    def test_fail(self, bad):
        """A setting that is not a positive number of seconds is named."""
        with pytest.raises(
            ValueError,
            match=f"HOROVOD_ELASTIC_TIMEOUT must be a positive number of seconds; got '{bad}'",
        ):
            reform_within({"HOROVOD_ELASTIC_TIMEOUT": bad})
