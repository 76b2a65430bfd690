"""Mid-epoch resume: the pure rule (`resume_plan` with positions), the positions file, the policy."""

from __future__ import annotations

import json
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainers_strategies import saved_runs

from towerkit.callbacks.plumbing import (
    POSITIONS_FILENAME,
    SavedPosition,
    dumps_positions,
    loads_positions,
    merge_positions,
    read_positions,
    write_positions,
)
from towerkit.trainers import (
    PREEMPTED_EXIT_STATUS,
    LogdirSnapshot,
    PreemptionPolicy,
    TrainingPreempted,
    resumable_position,
    resume_plan,
)
from towerkit.trainers._preempt import signal_number


def position_of(step: int, spe: int) -> SavedPosition:
    """Where an uninterrupted run from epoch 1 is after `step` steps (saved in its epoch)."""
    return SavedPosition(
        step=step, epoch=(step - 1) // spe + 1, done=(step - 1) % spe + 1, data_steps=step
    )


class TestPlanWithPositions:
    @given(saved_runs())
    def test_newest_exact_checkpoint_wins(self, run):
        """With positions, the plan restarts at the newest checkpoint it can continue exactly:
        a recorded epoch end, or a step inside an epoch whose start the statistics recorded."""
        spe = run["steps_per_epoch"]
        steps = [s for _, s in run["checkpoints"]]
        snap = LogdirSnapshot(
            checkpoints=run["checkpoints"],
            epochs=run["epochs"],
            positions=[position_of(s, spe) for s in steps],
        )
        plan = resume_plan(snap, steps_per_epoch=spe, writes_stats=True)
        recorded = {s for _, s in run["epochs"]}
        exact = [
            s
            for s in steps
            if s in recorded or (s % spe != 0 and (s - s % spe == 0 or s - s % spe in recorded))
        ]
        if not exact:
            assert plan.checkpoint is None
            return
        assert plan.checkpoint_step == max(exact)
        assert plan.checkpoint_step == (plan.starting_epoch - 1) * spe + plan.starting_step
        assert 0 <= plan.starting_step < spe
        assert plan.data_steps == plan.checkpoint_step
        assert plan.checkpoint_step <= run["killed_at"]
        kept = [e for e, s in run["epochs"] if s <= plan.keep_stats_until_step]
        assert kept == list(range(1, plan.starting_epoch)), "the statistics continue without a gap"

    @given(saved_runs())
    def test_without_statistics_every_position_counts(self, run):
        """A run writing no statistics resumes from its newest checkpoint with a position."""
        spe = run["steps_per_epoch"]
        steps = [s for _, s in run["checkpoints"]]
        snap = LogdirSnapshot(
            checkpoints=run["checkpoints"], positions=[position_of(s, spe) for s in steps]
        )
        plan = resume_plan(snap, steps_per_epoch=spe)
        if not steps:
            assert plan.checkpoint is None
            return
        assert plan.checkpoint_step == max(steps)
        assert plan.checkpoint_step == (plan.starting_epoch - 1) * spe + plan.starting_step

    def test_abandoned_lineage_is_not_resumed(self):
        """A mid-epoch checkpoint whose epoch start the statistics no longer hold is passed over."""
        snap = LogdirSnapshot(
            checkpoints=[("d/model-10", 10), ("d/model-25", 25)],
            epochs=[(1, 10)],
            positions=[SavedPosition(step=25, epoch=3, done=5, data_steps=25)],
        )
        plan = resume_plan(snap, steps_per_epoch=10, writes_stats=True)
        assert (plan.checkpoint, plan.starting_epoch, plan.starting_step) == ("d/model-10", 2, 0)

    def test_user_starting_epoch_wins_over_the_step(self):
        """always_resume=False with the user's starting_epoch: the epoch starts at its beginning."""
        snap = LogdirSnapshot(
            checkpoints=[("d/model-13", 13)],
            epochs=[(1, 10)],
            positions=[SavedPosition(step=13, epoch=2, done=3, data_steps=13)],
        )
        plan = resume_plan(
            snap,
            steps_per_epoch=10,
            starting_epoch=5,
            user_starting_epoch=True,
            always_resume=False,
        )
        assert (plan.checkpoint, plan.starting_epoch, plan.starting_step) == ("d/model-13", 5, 0)

    @given(st.integers(1, 6), st.integers(0, 8), st.integers(1, 8))
    def test_resumable_only_strictly_inside(self, epoch, done, spe):
        p = SavedPosition(step=(epoch - 1) * spe + done, epoch=epoch, done=done, data_steps=None)
        ok = resumable_position(p, {}, steps_per_epoch=spe, writes_stats=False)
        assert ok == (0 < done < spe)


class TestPositionsFile:
    @given(
        st.lists(
            st.builds(
                SavedPosition,
                step=st.integers(0, 10**9),
                epoch=st.integers(1, 10**6),
                done=st.integers(0, 10**6),
                data_steps=st.one_of(st.none(), st.integers(0, 10**9)),
            ),
            unique_by=lambda p: p.step,
        )
    )
    def test_round_trip(self, positions):
        back = loads_positions(dumps_positions(positions))
        assert back == tuple(sorted(positions, key=lambda p: p.step))

    def test_merge_keeps_only_kept_steps(self):
        old = [SavedPosition(step=s, epoch=1, done=s, data_steps=s) for s in (1, 2, 3)]
        new = SavedPosition(step=3, epoch=1, done=3, data_steps=99)
        merged = merge_positions(old, new, keep=[2, 3])
        assert [(p.step, p.data_steps) for p in merged] == [(2, 2), (3, 99)]

    def test_files_atomic_and_damage_tolerated(self, tmp_path, caplog):
        """Written whole; a damaged file means no mid-epoch resume, with a warning naming it."""
        write_positions(str(tmp_path), [SavedPosition(step=4, epoch=1, done=4, data_steps=4)])
        assert json.loads((tmp_path / POSITIONS_FILENAME).read_text())["positions"][0]["step"] == 4
        assert [p.step for p in read_positions(str(tmp_path))] == [4]
        assert [n for n in tmp_path.iterdir() if n.name.startswith(".")] == []
        (tmp_path / POSITIONS_FILENAME).write_text('{"format": 1, "positions": [{"step": -1}]')
        with caplog.at_level("WARNING"):
            assert read_positions(str(tmp_path)) == ()
        assert POSITIONS_FILENAME in caplog.text
        assert "damaged" in caplog.text
        write_positions(str(tmp_path), [])
        assert not (tmp_path / POSITIONS_FILENAME).exists()

    def test_bad_entries_named(self):
        with pytest.raises(ValueError, match=r"position \{'step': 1, 'epoch': 0"):
            loads_positions('{"format": 1, "positions": [{"step": 1, "epoch": 0, "done": 0}]}')
        with pytest.raises(ValueError, match="got format 2"):
            loads_positions('{"format": 2, "positions": []}')


class TestPreemptionPolicy:
    def test_names_and_numbers(self):
        p = PreemptionPolicy(signals=["TERM", int(signal.SIGUSR1), "SIGTERM"], grace_s=5)
        assert p.signals == (signal.SIGTERM, signal.SIGUSR1)
        assert p.names() == ["SIGTERM", "SIGUSR1"]
        assert PreemptionPolicy(signals=()).signals == ()

    def test_bad_input(self):
        with pytest.raises(ValueError, match="unknown signal 'SIGNOPE'"):
            PreemptionPolicy(signals=["SIGNOPE"])
        with pytest.raises(ValueError, match="SIGINT is Ctrl-C's"):
            signal_number("SIGINT")
        with pytest.raises(
            ValueError, match=r"'grace_s' must be a number of seconds > 0; got 0\.0"
        ):
            PreemptionPolicy(grace_s=0)
        with pytest.raises(TypeError, match="a signal must be a name or a number"):
            signal_number(1.5)  # type: ignore[arg-type]

    def test_preempted_is_a_quiet_exit(self):
        err = TrainingPreempted(42)
        assert isinstance(err, SystemExit)
        assert not isinstance(err, Exception)
        assert err.code == PREEMPTED_EXIT_STATUS == 143
        assert "global step 42" in str(err)
