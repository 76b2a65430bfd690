"""One writer per log directory: the lock file's pure parts, and two real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import (
    LOCK_FILENAME,
    LockOwner,
    LogdirLock,
    LogdirLockedError,
    format_lock,
    lock_verdict,
    parse_lock,
)

SCRIPT = os.path.join(os.path.dirname(__file__), "crash_script.py")

owners = st.builds(
    LockOwner,
    pid=st.integers(0, 2**22),
    host=st.text(min_size=1, max_size=20),
    since=st.floats(0, 2e9, allow_nan=False),
)


class TestLockOwner:
    """`LockOwner`, `format_lock` and `parse_lock`."""

    @given(owners)
    def test_round_trip(self, owner):
        """What format_lock writes, parse_lock reads back."""
        assert parse_lock(format_lock(owner)) == owner

    @given(owners, st.integers(0, 60))
    def test_half_written(self, owner, cut):
        """A lock file cut short (a writer killed mid-write) names no owner."""
        text = format_lock(owner)
        if cut < len(text) - 2:
            assert parse_lock(text[:cut]) is None

    @given(st.text(max_size=40))
    def test_garbage(self, text):
        """Any text parses to an owner or None, never an exception."""
        assert parse_lock(text) is None or isinstance(parse_lock(text), LockOwner)

    def test_repr(self):
        """The record prints its fields."""
        assert repr(LockOwner(pid=3, host="h", since=1)) == "LockOwner(pid=3, host='h', since=1.0)"

    def test_fail(self):
        """A negative pid is refused."""
        with pytest.raises(ValueError, match="'pid' must be >= 0"):
            LockOwner(pid=-1, host="h", since=0)


class TestLockVerdict:
    """`lock_verdict` decides from the owner, this host and pid, and the owner's liveness."""

    @given(owners, st.text(min_size=1, max_size=20), st.integers(0, 2**22), st.booleans())
    def test_properties(self, owner, host, pid, alive):
        """Never take a live lock of another process, nor any lock of another host."""
        verdict = lock_verdict(owner, host=host, pid=pid, alive=alive)
        if owner.host != host:
            assert verdict == "held"
        elif owner.pid == pid:
            assert verdict == "mine"
        else:
            assert verdict == ("held" if alive else "stale")

    def test_free(self):
        """No owner: free."""
        assert lock_verdict(None, host="h", pid=1, alive=True) == "free"


def start_holder(logdir):
    """A real training process that takes `logdir` and waits at before_train; and its pid."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, str(logdir), "epoch", "--hold"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        if line.startswith("HOLDING"):
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    pytest.fail(f"the holder did not start: {proc.stdout.read()}")


def run_second(logdir):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, SCRIPT, str(logdir), "epoch", "--max-epoch", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


@pytest.mark.procs
@pytest.mark.slow
class TestTwoProcesses:
    """Two real runs in one log directory."""

    def test_second_refused_then_stale_taken_over(self, tmp_path):
        """While the first runs, the second is refused naming it; once killed, its lock is taken over."""
        logdir = tmp_path / "log"
        holder = start_holder(logdir)
        try:
            lock = (logdir / LOCK_FILENAME).read_text()
            assert parse_lock(lock).pid == holder.pid
            before = sorted(os.listdir(logdir))
            second = run_second(logdir)
            err = second.stdout + second.stderr
            assert second.returncode != 0, err
            assert "LogdirLockedError" in err, err
            assert f"pid {holder.pid} on host {socket.gethostname()!r}" in err, err
            assert str(logdir) in err
            assert sorted(os.listdir(logdir)) == before, "the refused run touched nothing"
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(30)
        assert (logdir / LOCK_FILENAME).exists(), "a killed run leaves its lock"
        third = run_second(logdir)
        log = third.stdout + third.stderr
        assert third.returncode == 0, log
        assert f"taking over the lock of {logdir} from pid {holder.pid}" in log, log
        assert not (logdir / LOCK_FILENAME).exists(), "released at the end of training"


class TestLogdirLock:
    """`LogdirLock` in this process."""

    def test_release_on_exception(self, tmp_path):
        """A run failing in before_train gives the lock back (the directory can be used again)."""
        import numpy as np
        import tensorflow as tf

        from towerkit.callbacks import Callback
        from towerkit.trainers import ModelDesc, NumpyInput, SimpleTrainer, TrainConfig
        from towerkit.trainers import launch_train_with_config as launch

        class Boom(Callback):
            def _before_train(self):
                raise RuntimeError("boom")

        class Lin(ModelDesc):
            def inputs(self):
                return [tf.TensorSpec([None, 2], tf.float32, "x")]

            def build_graph(self, x):
                w = tf.compat.v1.get_variable("w", [2, 1])
                return tf.reduce_mean(tf.matmul(x, w), name="cost")

            def optimizer(self):
                return tf.compat.v1.train.GradientDescentOptimizer(0.1)

        logdir = tmp_path / "log"
        logdir.mkdir()
        (logdir / "notes.txt").write_text("kept")
        with tf.Graph().as_default():
            config = TrainConfig(
                model=Lin(),
                data=NumpyInput([np.ones((4, 2), np.float32)], batch_size=2),
                callbacks=[Boom()],
                extra_callbacks=[],
                monitors=[],
                max_epoch=1,
                logdir=str(logdir),
                logdir_action="keep",
            )
            with pytest.raises(RuntimeError, match="boom"):
                launch(config, SimpleTrainer())
        assert sorted(os.listdir(logdir)) == ["notes.txt"]
        lock = LogdirLock(str(logdir))
        lock.acquire()
        assert lock.held
        assert parse_lock((logdir / LOCK_FILENAME).read_text()).pid == os.getpid()
        lock.release()
        assert not (logdir / LOCK_FILENAME).exists()

    def test_other_host_refused(self, tmp_path):
        """A lock of another host is never taken over: its owner's liveness is unknown here."""
        owner = LockOwner(pid=1, host="elsewhere.example", since=0)
        (tmp_path / LOCK_FILENAME).write_text(format_lock(owner))
        with pytest.raises(LogdirLockedError, match=r"pid 1 on host 'elsewhere.example'"):
            LogdirLock(str(tmp_path)).acquire()
        assert parse_lock((tmp_path / LOCK_FILENAME).read_text()) == owner
