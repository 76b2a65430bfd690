"""Real processes: SIGKILL mid-run then the same command again resumes; SIGINT ends cleanly."""

import json
import os
import signal
import subprocess
import sys

import pytest
from resume_script import STEPS_PER_EPOCH, lr_in_epoch

from towerkit.sessinit import get_all_checkpoints

SCRIPT = os.path.join(os.path.dirname(__file__), "resume_script.py")
MAX_EPOCH = 5

pytestmark = pytest.mark.slow


def run(logdir, *extra):
    """Run the training script; return the completed process (output captured)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, SCRIPT, str(logdir), str(MAX_EPOCH), *extra],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )


def stats(logdir):
    """The records of stats.json that carry an epoch."""
    with open(os.path.join(logdir, "stats.json")) as f:
        return [r for r in json.load(f) if "epoch_num" in r]


def check_complete(logdir):
    """The finished run: every epoch once, in order, with its global step and learning rate."""
    recs = stats(logdir)
    assert [r["epoch_num"] for r in recs] == list(range(1, MAX_EPOCH + 1))
    assert [r["global_step"] for r in recs] == [
        e * STEPS_PER_EPOCH for e in range(1, MAX_EPOCH + 1)
    ]
    assert [r["lr"] for r in recs] == pytest.approx(
        [lr_in_epoch(e) for e in range(1, MAX_EPOCH + 1)]
    )
    steps = [s for _, s in get_all_checkpoints(str(logdir))]
    assert steps[-1] == MAX_EPOCH * STEPS_PER_EPOCH
    with open(os.path.join(logdir, "after_train.txt")) as f:
        assert int(f.read()) == MAX_EPOCH * STEPS_PER_EPOCH


class TestAutoResume:
    """A job killed with SIGKILL continues from its last consistent checkpoint."""

    def test_killed_mid_epoch(self, tmp_path):
        """Killed in epoch 3 (global step 10): the rerun starts epoch 3 at global step 8."""
        logdir = tmp_path / "log"
        first = run(logdir, "--kill-at", "10")
        assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
        assert [r["epoch_num"] for r in stats(logdir)] == [1, 2]
        assert not (logdir / "after_train.txt").exists()
        second = run(logdir)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "starting at epoch 3" in second.stdout
        assert "from global step 8" in second.stdout
        check_complete(logdir)

    def test_killed_between_save_and_stats(self, tmp_path):
        """Killed after epoch 2's checkpoint but before its statistics: epoch 2 runs again."""
        logdir = tmp_path / "log"
        first = run(logdir, "--kill-after-save", "2")
        assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
        assert [r["epoch_num"] for r in stats(logdir)] == [1]
        assert [s for _, s in get_all_checkpoints(str(logdir))] == [4, 8]
        second = run(logdir)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "starting at epoch 2" in second.stdout
        check_complete(logdir)


class TestInterrupt:
    """SIGINT ends the job cleanly: after_train runs, files are whole, the process ends."""

    def test_sigint(self, tmp_path):
        """SIGINT at global step 6: the step finishes, after_train runs, KeyboardInterrupt ends it."""
        logdir = tmp_path / "log"
        proc = run(logdir, "--sigint-at", "6")
        assert proc.returncode in (-signal.SIGINT, 130), proc.stdout + proc.stderr
        assert "KeyboardInterrupt" in proc.stderr
        with open(logdir / "after_train.txt") as f:
            assert int(f.read()) == 6
        assert [r["epoch_num"] for r in stats(logdir)] == [1]
        assert 4 in [s for _, s in get_all_checkpoints(str(logdir))]
        assert not [p for p in os.listdir(logdir) if ".tmp" in p], "no half-written files"
