"""Pure resume decisions and log-directory decisions."""

import json
import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainers_strategies import crashed_runs, saved_runs

from towerkit.callbacks import read_stats_file
from towerkit.trainers import (
    LOGDIR_ACTIONS,
    LogdirNotEmptyError,
    LogdirSnapshot,
    ResumePlan,
    plan_logdir,
    resume_plan,
)
from towerkit.trainers._resume import epoch_records, old_copies, read_stats, truncate_stats


class TestResumePlan:
    """`resume_plan` picks a consistent (checkpoint, epoch, statistics) moment."""

    @given(crashed_runs())
    def test_consistent_after_any_crash(self, run):
        """After a kill anywhere, the plan's step is its epoch's end and the kept stats are whole."""
        spe = run["steps_per_epoch"]
        snap = LogdirSnapshot(checkpoints=run["checkpoints"], epochs=run["epochs"])
        plan = resume_plan(snap, steps_per_epoch=spe)
        kept = [
            e
            for e, s in run["epochs"]
            if plan.keep_stats_until_step is None or s <= plan.keep_stats_until_step
        ]
        assert kept == list(range(1, len(kept) + 1)), "kept epochs are 1..k"
        if not run["checkpoints"]:
            assert plan.checkpoint is None
            assert plan.starting_epoch == 1
            assert kept == []
            return
        assert (plan.checkpoint, plan.checkpoint_step) in run["checkpoints"]
        assert plan.checkpoint_step == (plan.starting_epoch - 1) * spe, "the right global step"
        assert plan.checkpoint_step <= run["killed_at"]
        recorded = {s for _, s in run["epochs"]}
        if any(s in recorded for _, s in run["checkpoints"]):
            assert kept == list(range(1, plan.starting_epoch)), "stats continue without a gap"
            newest = max(s for _, s in run["checkpoints"] if s in recorded)
            assert plan.checkpoint_step == newest

    def test_prefers_user_when_not_always(self):
        """always_resume=False: each user-given option wins separately."""
        snap = LogdirSnapshot(checkpoints=[("d/model-6", 6)], epochs=[(1, 3), (2, 6)])
        p = resume_plan(snap, steps_per_epoch=3, user_session_init=True, always_resume=False)
        assert (p.checkpoint, p.starting_epoch, p.keep_stats_until_step) == (None, 3, None)
        p = resume_plan(
            snap,
            steps_per_epoch=3,
            starting_epoch=7,
            user_starting_epoch=True,
            always_resume=False,
        )
        assert (p.checkpoint, p.starting_epoch) == ("d/model-6", 7)
        p = resume_plan(snap, steps_per_epoch=3, user_session_init=True, user_starting_epoch=True)
        assert (p.checkpoint, p.starting_epoch) == ("d/model-6", 3)

    def test_older_checkpoint_drops_later_stats(self):
        """A checkpoint older than the stats: stats after it are dropped, its next epoch runs."""
        snap = LogdirSnapshot(checkpoints=[("d/model-4", 4)], epochs=[(1, 2), (2, 4), (3, 6)])
        p = resume_plan(snap, steps_per_epoch=2)
        assert (p.checkpoint_step, p.starting_epoch, p.keep_stats_until_step) == (4, 3, 4)
        assert "recorded in the statistics" in p.reason

    def test_mid_epoch_checkpoints_not_resumed(self):
        """Checkpoints within an epoch are skipped; in the first epoch only, training starts afresh."""
        snap = LogdirSnapshot(checkpoints=[("d/model-1", 1), ("d/model-7", 7)], epochs=[(1, 3)])
        p = resume_plan(snap, steps_per_epoch=3)
        assert (p.checkpoint, p.starting_epoch, p.keep_stats_until_step) == (None, 1, 0)
        assert p.ignored == ("d/model-1", "d/model-7")
        assert "not resumable: ['d/model-1', 'd/model-7']" in p.reason

    def test_unrecorded_epoch_end(self):
        """A run that writes statistics only resumes from a checkpoint they recorded."""
        snap = LogdirSnapshot(checkpoints=[("d/model-3", 3)])
        assert resume_plan(snap, steps_per_epoch=3).checkpoint == "d/model-3"
        p = resume_plan(snap, steps_per_epoch=3, writes_stats=True)
        assert (p.checkpoint, p.starting_epoch) == (None, 1)

    @given(saved_runs())
    def test_exact_under_any_save_schedule(self, run):
        """Whatever the saves and the kill, the resumed run restarts at a recorded epoch end."""
        spe = run["steps_per_epoch"]
        snap = LogdirSnapshot(checkpoints=run["checkpoints"], epochs=run["epochs"])
        plan = resume_plan(snap, steps_per_epoch=spe, writes_stats=True)
        done = plan.starting_epoch - 1
        assert plan.checkpoint_step == done * spe, "restart at the end of the epoch before"
        assert plan.checkpoint_step <= run["killed_at"]
        kept = [e for e, s in run["epochs"] if s <= (plan.keep_stats_until_step or 0)]
        assert kept == list(range(1, done + 1)), "the statistics continue without a gap"
        if run["epoch_ends_saved"]:
            assert done >= run["last_recorded"] - 1, "at most one finished epoch runs again"
        if done:
            assert (plan.checkpoint, plan.checkpoint_step) in run["checkpoints"]

    def test_fail(self):
        """Bad input is refused with the field named."""
        with pytest.raises(ValueError, match="'steps_per_epoch' must be an int > 0; got 0"):
            resume_plan(LogdirSnapshot(), steps_per_epoch=0)
        with pytest.raises(
            ValueError,
            match=r"'checkpoints' must hold \(path, step >= 0\) pairs; entries at fault: 'a'",
        ):
            LogdirSnapshot(checkpoints=[("a", -1)])
        with pytest.raises(ValueError, match=r"entries at fault: \(1, 'x'\)"):
            LogdirSnapshot(epochs=[(1, "x")])
        with pytest.raises(ValueError, match="'starting_epoch' must be >= 1"):
            ResumePlan(checkpoint=None, starting_epoch=0)

    def test_repr(self):
        """Records print their fields."""
        p = ResumePlan(checkpoint="d/model-3", checkpoint_step=3, starting_epoch=2)
        assert repr(p) == (
            "ResumePlan(checkpoint='d/model-3', checkpoint_step=3, starting_epoch=2, "
            "keep_stats_until_step=None, reason='', ignored=(), starting_step=0, data_steps=None, notes=())"
        )
        assert p.resumes
        assert not attrs.evolve(p, checkpoint=None).resumes


class TestPlanLogdir:
    """`plan_logdir` decides, and refuses a non-empty directory unless told."""

    @given(st.lists(st.text(min_size=1, max_size=5), max_size=30), st.sampled_from(LOGDIR_ACTIONS))
    def test_total(self, entries, action):
        """Every listing and action gives a decision or the not-empty error."""
        try:
            got = plan_logdir(entries, action)
        except LogdirNotEmptyError:
            assert entries
            assert action == "error"
        else:
            assert got == ("use" if not entries or action == "keep" else "move")

    def test_many_entries(self):
        """A long listing is cut after 3 names, with the rest counted, and the directory named."""
        with pytest.raises(LogdirNotEmptyError) as info:
            plan_logdir([f"f{i:02d}" for i in range(25)], "error", path="/runs/linear")
        assert str(info.value) == (
            "the logdir '/runs/linear' is not empty (it holds 'f00', 'f01', 'f02' and 22 more): "
            "pass logdir_action='overwrite' to move it aside to '/runs/linear.old-<timestamp>' "
            "and start afresh, 'keep' to write into it, use AutoResumeTrainConfig to resume "
            "from it, or choose another logdir"
        )

    @given(st.lists(st.text(min_size=1, max_size=300), min_size=1, max_size=500))
    def test_message_fits_a_screen(self, entries):
        """However many entries, and however long, the message names at most 3 of them."""
        with pytest.raises(LogdirNotEmptyError) as info:
            plan_logdir(entries, "error", path="d")
        shown = sorted(entries)[:3]
        assert all(repr(e) in str(info.value) for e in shown)
        assert len(str(info.value)) <= 330 + sum(len(repr(e)) for e in shown)
        assert ("more)" in str(info.value)) == (len(entries) > 3)


class TestOldCopies:
    """`old_copies` finds what 'overwrite' moved aside next to a logdir."""

    @given(
        st.lists(st.from_regex(r"[a-z]{1,6}(\.old-[0-9]{1,8})?", fullmatch=True), max_size=20),
        st.from_regex(r"[a-z]{1,6}", fullmatch=True),
    )
    def test_property(self, siblings, name):
        """Exactly the siblings named '<name>.old-...', sorted."""
        got = old_copies(name, siblings)
        assert got == sorted(s for s in siblings if s.split(".old-")[0] == name and ".old-" in s)

    def test_other_logdirs_left_out(self):
        """A logdir whose name starts like this one's is not counted."""
        assert old_copies("run", ["run.old-1", "run2.old-1", "run", "runs"]) == ["run.old-1"]


class TestStatsFile:
    """Reading and truncating stats.json, atomically."""

    def test_truncate(self, tmp_path):
        """Records after the step are dropped; the old file is kept as .bak."""
        recs = [{"epoch_num": e, "global_step": 2 * e, "loss": 1.0 / e} for e in (1, 2, 3)]
        (tmp_path / "stats.json").write_text(json.dumps(recs))
        dropped = truncate_stats(str(tmp_path), 4)
        assert [r["epoch_num"] for r in dropped] == [3]
        assert read_stats(str(tmp_path)) == recs[:2]
        assert json.loads((tmp_path / "stats.json.bak").read_text()) == recs
        assert truncate_stats(str(tmp_path), 4) == []
        assert epoch_records(read_stats(str(tmp_path))) == [(1, 2), (2, 4)]

    def test_bad_file(self, tmp_path):
        """A stats file that is not a JSON list is an error naming it."""
        (tmp_path / "stats.json").write_text("{")
        with pytest.raises(ValueError, match="is not valid JSON"):
            read_stats(str(tmp_path))
        (tmp_path / "stats.json").write_text("{}")
        with pytest.raises(
            ValueError,
            match=r"must hold a JSON list of records \(objects of numbers\); got an object at "
            r"line 1, column 1 \(char 0\); cannot resume from it",
        ):
            read_stats(str(tmp_path))
        assert read_stats(str(tmp_path / "nothing")) is None

    def test_truncate_non_finite(self, tmp_path):
        """NaN/Inf of an older file (bare tokens) are read; the file is rewritten strict and
        the backup is the old file byte for byte (still read back)."""
        old = (
            '[{"epoch_num": 1, "global_step": 2, "loss": NaN},\n'
            ' {"epoch_num": 2, "global_step": 4, "loss": Infinity},\n'
            ' {"epoch_num": 3, "global_step": 6, "loss": -0.0}]'
        )
        (tmp_path / "stats.json").write_text(old)
        dropped = truncate_stats(str(tmp_path), 4)
        assert [r["epoch_num"] for r in dropped] == [3]

        def refuse(token):
            raise AssertionError(f"bare {token}")

        kept = json.loads((tmp_path / "stats.json").read_text(), parse_constant=refuse)
        assert [r["loss"] for r in kept] == ["NaN", "Infinity"]
        assert (tmp_path / "stats.json.bak").read_text() == old
        bak = read_stats_file(str(tmp_path / "stats.json.bak"))
        assert math.isnan(bak[0]["loss"])
        assert bak[1]["loss"] == math.inf
        assert math.copysign(1.0, bak[2]["loss"]) == -1.0
        back = read_stats(str(tmp_path))
        assert math.isnan(back[0]["loss"])
        assert back[1]["loss"] == math.inf
        assert epoch_records(back) == [(1, 2), (2, 4)]
