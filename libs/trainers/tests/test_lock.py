"""One writer per log directory: the lock file's pure parts, and two real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import prefork
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
    proc = prefork.popen(
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
    return prefork.run(
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


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.procs
@pytest.mark.timeout(300)  # four TensorFlow imports on a small machine, then 5 s of trials
class TestRace:
    """Real processes taking over the same stale lock at the same instant."""

    PROCS = 4
    TRIALS = 20

    def test_one_owner_per_trial(self, tmp_path):
        """In every trial exactly one process wins; the others are refused naming the winner
        (or saying it is starting, when they read the file before it wrote its name)."""
        stale = format_lock(LockOwner(pid=dead_pid(), host=socket.gethostname(), since=0))
        for i in range(self.TRIALS):
            (tmp_path / f"log-{i}").mkdir()
            (tmp_path / f"log-{i}" / LOCK_FILENAME).write_text(stale)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        script = os.path.join(os.path.dirname(__file__), "lock_race_script.py")
        procs = [
            prefork.popen(
                [sys.executable, script, str(tmp_path), str(self.TRIALS)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            for _ in range(self.PROCS)
        ]
        try:
            for p in procs:
                assert p.stdout.readline().strip() == "READY"
            (tmp_path / "go.tmp").write_text(str(time.time() + 0.5))
            os.replace(tmp_path / "go.tmp", tmp_path / "go")
            results = [json.loads(p.stdout.readline()) for p in procs]
        finally:
            for p in procs:
                p.kill()
                p.wait(30)
        for i in range(self.TRIALS):
            winners = [r["pid"] for r in results if i in r["won"]]
            assert len(winners) == 1, f"trial {i}: owners {winners}"
            for r in results:
                if r["pid"] != winners[0]:  # named, or caught before it wrote its name
                    message = r["refused"][str(i)]
                    assert f"pid {winners[0]} on host" in message or (
                        "its owner is just starting" in message
                    ), message


class TestKernelLock:
    """The kernel lock in this process: two holders never, a damaged file named."""

    def test_second_holder_refused_in_same_process(self, tmp_path):
        """Two locks on one directory exclude each other even within one process."""
        first = LogdirLock(str(tmp_path))
        first.acquire()
        with pytest.raises(LogdirLockedError, match=r"in use by this very process \(pid"):
            LogdirLock(str(tmp_path)).acquire()
        first.release()
        second = LogdirLock(str(tmp_path))
        second.acquire()
        assert second.held
        second.release()

    def test_dropped_lock_object_releases(self, tmp_path):
        """A lock object garbage-collected without release frees the directory (its file closes)."""
        import gc

        lock = LogdirLock(str(tmp_path))
        lock.acquire()
        del lock
        gc.collect()
        again = LogdirLock(str(tmp_path))
        again.acquire()
        again.release()

    def test_binary_garbage_free(self, tmp_path, caplog):
        """A lock file of binary garbage that no one holds is taken over with a warning naming it."""
        (tmp_path / LOCK_FILENAME).write_bytes(bytes(range(256)) * 4)
        lock = LogdirLock(str(tmp_path))
        with caplog.at_level("WARNING", logger="towerkit.trainers"):
            lock.acquire()
        assert f"taking over the unreadable lock file {tmp_path / LOCK_FILENAME}" in caplog.text
        assert parse_lock((tmp_path / LOCK_FILENAME).read_text()).pid == os.getpid()
        lock.release()

    def test_binary_garbage_held(self, tmp_path):
        """A held lock whose file is binary garbage: a clear error naming the file, no decode error."""
        holder = LogdirLock(str(tmp_path))
        holder.acquire()
        (tmp_path / LOCK_FILENAME).write_bytes(b"\xff\xfe\x00garbage\x80" * 50)
        with pytest.raises(LogdirLockedError) as info:
            LogdirLock(str(tmp_path)).acquire()
        assert "names no owner (unreadable" in str(info.value)
        assert repr(str(tmp_path / LOCK_FILENAME)) in str(info.value)
        holder.release()

    def test_lock_file_is_a_directory(self, tmp_path):
        """A directory where the lock file goes is named, with what to do."""
        (tmp_path / LOCK_FILENAME).mkdir()
        with pytest.raises(LogdirLockedError, match=r"is a directory: remove it"):
            LogdirLock(str(tmp_path)).acquire()

    @pytest.mark.procs
    def test_forked_child_does_not_keep_it(self, tmp_path):
        """A child forked while the lock is held (an input worker) does not hold it after."""
        lock = LogdirLock(str(tmp_path))
        lock.acquire()
        r, w = os.pipe()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: say it runs, wait until the parent has checked, exit
            os.close(w)
            os.write(ready_w, b"x")
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"x"  # the child runs (past the fork hooks)
        os.close(ready_r)
        try:
            lock._close()  # the parent lets go without removing the file (as SIGKILL would)
            again = LogdirLock(str(tmp_path))
            again.acquire()  # the child still runs: were it holding the lock, this would fail
            again.release()
        finally:
            os.write(w, b"x")
            os.close(w)
            os.waitpid(pid, 0)
