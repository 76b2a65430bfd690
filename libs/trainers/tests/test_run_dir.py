"""`RunDir`, the trainer's run directory part: real directories, lock files and failures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import LogdirLockedError, LogdirNotEmptyError, TrainerStateError
from towerkit.trainers._lock import LOCK_FILENAME
from towerkit.trainers._run_dir import RunDir


def never() -> bool:
    return False


def write_then_fail(run, path, err):
    """Write `path` inside `run`'s failed-start cleanup, then raise `err` there."""
    with run.failed_start_cleanup():
        path.write_text("x")
        raise err


class TestTake:
    """`RunDir.take` and `keep_path`: the directory is chosen once."""

    def test_creates_and_locks(self, tmp_path):
        """The chief's directory is made and locked until `release`."""
        run = RunDir(never)
        run.take(tmp_path / "run", "error", lock=True)
        assert run.path == str(tmp_path / "run")
        assert run.chosen
        (tmp_path / "run" / "stats.json").write_text("[]")
        # the lock is taken on a directory that exists: a second run there is refused
        second = RunDir(never)
        with pytest.raises(LogdirLockedError):
            second.take(tmp_path / "run", "keep", lock=True)
        run.release()
        assert not (tmp_path / "run" / LOCK_FILENAME).exists()

    def test_fail_twice(self, tmp_path):
        """A second choice is refused, naming the directory taken."""
        run = RunDir(never)
        run.take(None, "error", lock=True)
        assert run.path is None
        with pytest.raises(TrainerStateError, match=r"set_logdir\('x'\): the log directory is"):
            run.take("x", "error", lock=True)

    def test_fail_not_empty(self, tmp_path):
        """``"error"`` refuses a directory holding files, and nothing is chosen."""
        (tmp_path / "old.txt").write_text("x")
        run = RunDir(never)
        with pytest.raises(LogdirNotEmptyError):
            run.take(tmp_path, "error", lock=True)
        assert run.path is None

    def test_keep_path_touches_nothing(self, tmp_path):
        """A non-chief process keeps the path; no directory is made, no lock taken."""
        run = RunDir(never)
        run.keep_path(tmp_path / "run", "error")
        assert run.path == str(tmp_path / "run")
        assert not (tmp_path / "run").exists()
        with pytest.raises(TrainerStateError, match="already set"):
            run.keep_path(tmp_path / "run", "error")
        with pytest.raises(TrainerStateError, match="writes no log directory"):
            RunDir(never).take_over()


class TestPathOnly:
    """`RunDir.take(path_only=True)`: a process whose chief owns the directory."""

    def test_keeps_the_path_only(self, tmp_path):
        """The path is kept; nothing is made, checked or locked."""
        (tmp_path / "old.txt").write_text("x")
        run = RunDir(never)
        run.take(tmp_path, "error", lock=False, path_only=True)
        assert run.path == str(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]

    def test_none_is_none(self):
        """No directory stays no directory."""
        run = RunDir(never)
        run.take(None, "error", lock=False, path_only=True)
        assert run.path is None
        assert run.chosen


class TestFailedStart:
    """`RunDir.failed_start_cleanup`: a start that fails gives the directory back."""

    def test_gives_back_before_a_step(self, tmp_path):
        """Before a step: the directory the run made is removed, the error goes on."""
        run = RunDir(never)
        run.take(tmp_path / "run", "error", lock=True)
        with pytest.raises(RuntimeError, match="boom"):
            write_then_fail(run, tmp_path / "run" / "events.out", RuntimeError("boom"))
        assert not (tmp_path / "run").exists()

    def test_keeps_what_a_step_wrote(self, tmp_path):
        """After a step: what the run wrote stays (release still gives the lock back)."""
        run = RunDir(lambda: True)
        run.take(tmp_path / "run", "error", lock=True)
        with pytest.raises(RuntimeError):
            write_then_fail(run, tmp_path / "run" / "events.out", RuntimeError("boom"))
        assert (tmp_path / "run" / "events.out").exists()
        run.release()

    def test_keeps_what_was_there(self, tmp_path):
        """A resumed run's files stay when its start fails; only what it added goes."""
        (tmp_path / "model-10.index").write_text("x")
        run = RunDir(never)
        run.take(tmp_path, "keep", lock=True)
        with pytest.raises(KeyboardInterrupt):
            write_then_fail(run, tmp_path / "new.txt", KeyboardInterrupt())
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model-10.index"]


class TestTrainLogdir:
    """`RunDir.check_train_logdir`: ``train(logdir=...)`` against what was taken."""

    def test_fresh(self, tmp_path):
        """A fresh trainer with no directory chosen takes the one given."""
        assert RunDir(never).check_train_logdir(tmp_path, fresh=True)

    def test_fail(self, tmp_path):
        """A directory given past the first phase, or another than the one taken, is refused."""
        run = RunDir(never)
        run.take(tmp_path / "a", "error", lock=False)
        assert not run.check_train_logdir(None, fresh=True)
        assert not run.check_train_logdir(tmp_path / "a", fresh=True)
        with pytest.raises(TrainerStateError, match="differs from the log directory"):
            run.check_train_logdir(tmp_path / "b", fresh=True)
        with pytest.raises(TrainerStateError, match="needs a fresh trainer"):
            run.check_train_logdir(tmp_path / "a", fresh=False)


class TestResumePosition:
    """Where a resumed run starts."""

    @given(st.integers(0, 10_000), st.one_of(st.none(), st.integers(0, 10_000)), st.integers(0, 99))
    def test_data_steps(self, in_epoch, data_steps, steps):
        """The data steps go on from the recorded count; unknown stays unknown."""
        run = RunDir(never)
        run.set_resume_position(in_epoch, data_steps)
        assert run.resumed_in_epoch == in_epoch
        assert run.data_steps(steps) == (None if data_steps is None else data_steps + steps)

    def test_fail(self):
        """Negative counts and non-ints are refused, named; nothing is recorded."""
        run = RunDir(never)
        with pytest.raises(ValueError, match="'steps_in_epoch' must be an int >= 0; got -1"):
            run.set_resume_position(-1, 0)
        with pytest.raises(ValueError, match="'data_steps' must be an int >= 0; got True"):
            run.set_resume_position(0, True)
        assert (run.resumed_in_epoch, run.data_steps_at_start) == (0, 0)

    @given(st.integers(0, 50), st.integers(1, 50), st.integers(1, 8))
    def test_check_position(self, done, steps_per_epoch, k):
        """A position fits when it is within the epoch and a whole number of calls."""
        run = RunDir(never)
        run.set_resume_position(done, 0)
        fits = done <= steps_per_epoch and done % k == 0
        if fits:
            run.check_resume_position(steps_per_epoch, 3, k)
        else:
            with pytest.raises(ValueError, match=f"resumes after {done} steps of epoch 3"):
                run.check_resume_position(steps_per_epoch, 3, k)
