"""Real processes: SIGKILL mid-run then the same command again resumes; SIGINT ends cleanly."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import prefork
import pytest
from resume_script import STEPS_PER_EPOCH, lr_in_epoch

from towerkit.sessinit import get_all_checkpoints

SCRIPT = os.path.join(os.path.dirname(__file__), "resume_script.py")
MAX_EPOCH = 5

pytestmark = [
    pytest.mark.procs,
    pytest.mark.timeout(600),
]  # timeout: each test runs training processes to their end or their signal


def run(logdir, *extra):
    """Run the training script; return the completed process (output captured)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return prefork.run(
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


BLOCKING = os.path.join(os.path.dirname(__file__), "blocking_script.py")


class BlockedJob:
    """The blocking script as a running process whose output lines are read as they come."""

    def __init__(self, logdir, *args):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        self.proc = prefork.popen(
            [sys.executable, BLOCKING, str(logdir), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, into):
        for line in stream:
            into.append(line)

    def wait_for(self, text, where, timeout):
        """Wait until a line of `where` contains `text`; fail with the output after `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in list(where)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} within {timeout} s: {self.output()}")

    def output(self):
        return "".join(self.stdout) + "".join(self.stderr)

    def finish(self, timeout):
        """The exit status within `timeout` s (the process is killed and the test fails after)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"still running {timeout} s later: {self.output()}") from None
        finally:
            for t in self._readers:
                t.join(5)


class TestBlockedInput:
    """A producer that blocks forever: Ctrl-C works as documented, a timeout ends the run."""

    def test_two_sigints_abort_a_step_waiting_for_data(self, tmp_path):
        """First Ctrl-C is logged at once, the second aborts the blocked step; after_train runs."""
        logdir = tmp_path / "log"
        job = BlockedJob(logdir, "iterable")
        job.wait_for("BLOCKED", job.stdout, 300)
        job.wait_for("STEP 3", job.stdout, 60)
        time.sleep(1.0)  # the step now waits in the queue's dequeue
        job.proc.send_signal(signal.SIGINT)
        job.wait_for("training stops after the current step (press Ctrl-C again", job.stderr, 10)
        assert job.proc.poll() is None, "the first Ctrl-C only asks to stop"
        start = time.monotonic()
        job.proc.send_signal(signal.SIGINT)
        code = job.finish(30)
        assert time.monotonic() - start < 10, job.output()
        assert code in (-signal.SIGINT, 130), job.output()
        err = "".join(job.stderr)
        assert "signal 2 again: training aborts now" in err
        assert "training aborted at global step 3" in err
        assert "KeyboardInterrupt" in err
        assert (logdir / "after_train.txt").read_text() == "3"

    def test_timeout_names_the_input(self, tmp_path):
        """IterableInput(timeout=2): the run fails after about 2 s with InputTimeoutError."""
        job = BlockedJob(tmp_path / "log", "iterable", "--timeout", "2")
        job.wait_for("BLOCKED", job.stdout, 300)
        start = time.monotonic()
        code = job.finish(60)
        assert code == 1, job.output()
        assert time.monotonic() - start < 30
        err = "".join(job.stderr)
        assert re.search(
            r"InputTimeoutError: IterableInput\(Blocking\): the iterable gave no datapoint for "
            r"2\.\d s \(timeout=2 s\), waiting for datapoint #3 of pass 1",
            err,
        ), err

    def test_step_blocked_out_of_reach_exits_130(self, tmp_path):
        """A step blocked in a tf.data generator: the second Ctrl-C exits the process (130)."""
        job = BlockedJob(tmp_path / "log", "generator")
        job.wait_for("BLOCKED", job.stdout, 300)
        time.sleep(1.0)
        job.proc.send_signal(signal.SIGINT)
        job.wait_for("training stops after the current step", job.stderr, 10)
        start = time.monotonic()
        job.proc.send_signal(signal.SIGINT)
        code = job.finish(60)
        assert code == 130, job.output()
        assert time.monotonic() - start < 30
        assert "still blocked 10 s after the second Ctrl-C" in "".join(job.stderr)
