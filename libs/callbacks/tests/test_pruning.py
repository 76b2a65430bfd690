"""Pruning decided from what a run saved; checkpoints ahead of a run moved aside, never lost."""

import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_savers import indexes, listing, state_entries, train, values

from towerkit.callbacks import (
    EPOCH_ENDS_KEPT,
    InheritedCheckpoints,
    ModelSaver,
    PeriodicTrigger,
    plan_inherited,
    plan_pruning,
)
from towerkit.sessinit import GlobPathError, SaverRestore, resolve_checkpoint


@st.composite
def runs(draw):
    """(inherited steps, this run's steps in save order, max_to_keep, epoch ends, times)."""
    inherited = draw(st.sets(st.integers(0, 80), max_size=8))
    own = sorted(draw(st.sets(st.integers(0, 80), min_size=1, max_size=12)) - inherited)
    if not own:
        own = [81]
    max_to_keep = draw(st.integers(0, 5))
    ends = draw(st.sets(st.sampled_from(sorted(inherited | set(own))), max_size=6))
    return sorted(inherited), own, max_to_keep, ends


def plan_of(inherited, own, max_to_keep, ends):
    saved = [(s, 0.0) for s in (*inherited, *own)]
    return plan_pruning(
        saved,
        max_to_keep=max_to_keep,
        epoch_ends=ends,
        preserve_every_s=3600,
        next_preserve_time=1e12,
        own=own,
    )


class TestPlanPruningOwn:
    """`plan_pruning(..., own=...)`: this run's checkpoints are never outranked."""

    @given(runs())
    def test_partition_and_newest_kept(self, run):
        """A partition of the input; this run's newest checkpoint is always kept."""
        inherited, own, max_to_keep, ends = run
        plan = plan_of(inherited, own, max_to_keep, ends)
        assert sorted(plan.keep + plan.delete + plan.preserve) == sorted({*inherited, *own})
        assert own[-1] in plan.keep
        kept_own = [s for s in plan.keep if s in own]
        assert kept_own == sorted(kept_own), "this run's in the order it saved them"
        assert plan.keep[-len(kept_own) :] == tuple(kept_own), "after the inherited ones"

    @given(runs(), st.integers(1, 1000))
    def test_inherited_steps_do_not_matter(self, run, shift):
        """Which of this run's checkpoints are deleted does not depend on the inherited steps."""
        inherited, own, max_to_keep, ends = run
        own_ends = {s for s in ends if s in own}
        a = plan_of(inherited, own, max_to_keep, own_ends)
        moved = [s + 1000 + shift for s in inherited]  # every inherited one now "outranks"
        b = plan_of(moved, own, max_to_keep, own_ends)
        assert [s for s in a.delete if s in own] == [s for s in b.delete if s in own]

    @given(runs())
    def test_newest_kept_counts(self, run):
        """max_to_keep newest (in save order) plus the last epoch ends, nothing more."""
        inherited, own, max_to_keep, ends = run
        plan = plan_of(inherited, own, max_to_keep, ends)
        order = [*inherited, *own]
        newest = order if max_to_keep == 0 else order[-max_to_keep:]
        assert set(newest) <= set(plan.keep)
        assert len(plan.keep) <= len(newest) + EPOCH_ENDS_KEPT

    def test_issue_case(self):
        """A state file naming model-24 does not make this run's model-4/8/12 go."""
        plan = plan_of([24], [4, 8, 12], 1, set())
        assert plan.keep == (12,)


class TestPlanInherited:
    """`plan_inherited` splits found checkpoints at the run's starting step."""

    @given(
        st.lists(st.tuples(st.sampled_from(["model", "x"]), st.integers(0, 50)), max_size=12),
        st.integers(0, 50),
    )
    def test_split(self, found, start):
        """Each unique checkpoint lands on one side; ahead means a step after the start."""
        pairs = [(f"{n}-{s}", s) for n, s in found]
        plan = plan_inherited(pairs, start)
        assert sorted(plan.kept + plan.ahead) == sorted(set(pairs))
        assert all(s <= start for _, s in plan.kept)
        assert all(s > start for _, s in plan.ahead)
        assert [s for _, s in plan.ahead] == sorted(s for _, s in plan.ahead)

    def test_repr(self):
        """The record prints its fields."""
        assert repr(plan_inherited([("model-3", 3)], 0)) == (
            "InheritedCheckpoints(kept=(), ahead=(('model-3', 3),))"
        )
        assert isinstance(plan_inherited([], 0), InheritedCheckpoints)


def aside_dirs(d):
    return [n for n in listing(d) if re.fullmatch(r"superseded-\d{8}-\d{6}(-\d+)?", n)]


def assert_state_complete(d, newest):
    """Every checkpoint the state file names is complete; this run's newest is present."""
    named = state_entries(d)
    assert f"model-{newest}" in named
    for name in named:
        assert os.path.isfile(d / f"{name}.index"), name
        assert os.path.isfile(d / f"{name}.data-00000-of-00001"), name
        assert values(d / name)["w"] is not None
    assert resolve_checkpoint(str(d)) == str(d / f"model-{newest}")


class TestKeepAfterLongerRun:
    """A second run with logdir "keep" in a directory whose state file is ahead of it."""

    def test_second_run_keeps_its_checkpoints(self, tmp_path, caplog):
        """Its model-4/8/12 survive; the first run's model-24 is moved aside, not lost."""
        train([ModelSaver(max_to_keep=1)], tmp_path, steps=4, max_epoch=6)
        assert indexes(tmp_path) == [20, 24]
        with caplog.at_level("WARNING", logger="towerkit.callbacks"):
            train([ModelSaver(max_to_keep=3)], tmp_path, steps=4, max_epoch=3)
        assert indexes(tmp_path) == [4, 8, 12]
        assert state_entries(tmp_path) == ["model-4", "model-8", "model-12"]
        assert_state_complete(tmp_path, 12)
        (aside,) = aside_dirs(tmp_path)
        assert "moved aside" in caplog.text
        assert "model-24" in caplog.text
        assert values(resolve_checkpoint(str(tmp_path / aside)))["w"] == 24.0

    def test_every_step_saves(self, tmp_path):
        """Frequent saves in the second run: the state file never names a deleted one."""
        train([ModelSaver(max_to_keep=1)], tmp_path, steps=3, max_epoch=5)
        train([PeriodicTrigger(ModelSaver(max_to_keep=2), every_k_steps=1)], tmp_path, steps=3)
        assert_state_complete(tmp_path, 9)
        assert indexes(tmp_path) == [6, 8, 9]

    def test_resume_behind_keeps_older(self, tmp_path):
        """Resuming at step 6 from model-6: model-4 stays (behind), model-8..12 go aside."""
        train([ModelSaver(max_to_keep=5)], tmp_path, steps=2, max_epoch=6)
        train(
            [ModelSaver(max_to_keep=5)],
            tmp_path,
            steps=2,
            starting=4,
            max_epoch=4,
            session_init=SaverRestore(str(tmp_path / "model-6")),
        )
        assert indexes(tmp_path) == [4, 6, 8]
        assert_state_complete(tmp_path, 8)
        (aside,) = aside_dirs(tmp_path)
        assert sorted(n for n in os.listdir(tmp_path / aside) if n.endswith(".index")) == [
            "model-10.index",
            "model-12.index",
            "model-8.index",
        ]
        assert values(tmp_path / aside / "model-8")["w"] == 8.0


class TestGlobPath:
    """A checkpoint directory TensorFlow would glob is refused before anything is written."""

    @pytest.mark.parametrize("name", ["lr[0.1]", "a]b", "back\\slash"])
    def test_refused(self, tmp_path, name):
        """The error names the character; nothing is written."""
        d = tmp_path / name
        with pytest.raises(GlobPathError, match=r"'checkpoint_dir' .* holds .*glob"):
            train([ModelSaver(checkpoint_dir=str(d))], tmp_path / "log", max_epoch=1)
        assert not d.exists()
