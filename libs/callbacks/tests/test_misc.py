"""StartProcOrThread, InjectShell and EstimatedTimeLeft with real processes, threads and shells."""

import io
import logging
import multiprocessing
import re
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import Callback, EstimatedTimeLeft, InjectShell, StartProcOrThread
from towerkit.callbacks._misc import format_duration
from towerkit.towers.compat import tf1


def step_op(pause=0.0):
    steps = tf1.get_variable("steps", initializer=0.0, trainable=False)
    if pause:
        inc = tf1.py_func(lambda: np.float32(time.sleep(pause) or 1.0), [], tf.float32)
    else:
        inc = 1.0
    return tf1.assign_add(steps, inc).op


class StoppableThread(threading.Thread):
    """A thread that runs until stop() is called."""

    def __init__(self):
        super().__init__(daemon=True)
        self.halt = threading.Event()

    def run(self):
        self.halt.wait(60)

    def stop(self):
        self.halt.set()


class Alive(Callback):
    """Records, on each trigger, whether the given objects are alive."""

    def __init__(self, *items):
        self.items = items
        self.seen = []

    def _trigger(self):
        self.seen.append([x.is_alive() for x in self.items])


@pytest.mark.procs
class TestStartProcOrThread:
    """Started before training, stopped after it."""

    def test_process_and_threads(self, graph):
        """A process is terminated, a stoppable thread stopped, a plain thread left alone."""
        proc = multiprocessing.get_context("spawn").Process(
            target=time.sleep, args=(60,), daemon=True
        )
        stoppable = StoppableThread()
        release = threading.Event()
        plain = threading.Thread(target=release.wait, args=(60,), daemon=True)
        alive = Alive(proc, stoppable, plain)
        cb = StartProcOrThread([proc, stoppable, plain])
        LoopTrainer(graph, step_op(), [cb, alive], max_epoch=2).train()
        assert alive.seen == [[True, True, True]] * 2
        assert not proc.is_alive()
        assert proc.exitcode == -15, "terminated by SIGTERM"
        stoppable.join(5)
        assert not stoppable.is_alive()
        assert plain.is_alive(), "a plain thread cannot be stopped"
        release.set()
        plain.join(5)
        assert not cb.chief_only

    def test_keep_running(self, graph):
        """With stop_at_last=False the process outlives training."""
        proc = multiprocessing.get_context("spawn").Process(
            target=time.sleep, args=(60,), daemon=True
        )
        cb = StartProcOrThread(proc, stop_at_last=False)
        LoopTrainer(graph, step_op(), [cb], max_epoch=1).train()
        try:
            assert proc.is_alive()
            assert not cb.has_hook("_after_train")
        finally:
            proc.terminate()
            proc.join(5)

    def test_fail(self):
        """Every object must have a start() method."""
        with pytest.raises(TypeError, match=r"entries at fault: #1: int, #2: str"):
            StartProcOrThread([StoppableThread(), 1, "x"])
        with pytest.raises(ValueError, match=r"'startable' is empty"):
            StartProcOrThread([])


@pytest.mark.procs
class TestInjectShell:
    """A shell opens after an epoch when the file exists."""

    def test_shells(self, graph, tmp_path, monkeypatch, capsys, caplog):
        """pdb opens with `self` the callback; 'ipython' without IPython falls back to pdb."""
        monkeypatch.setitem(sys.modules, "IPython", None)  # as if IPython were not installed
        (tmp_path / "pause-a").touch()
        (tmp_path / "pause-b").touch()
        commands = (
            "p ('A', self.path.endswith('pause-a'), self.trainer.epoch_num)\nc\n"
            "p ('B', trainer.global_step)\nc\n"
        )
        monkeypatch.setattr(sys, "stdin", io.StringIO(commands))
        cbs = [InjectShell("pause-a", shell="pdb"), InjectShell("pause-b", shell="ipython")]
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            t = LoopTrainer(graph, step_op(), cbs, steps_per_epoch=2, max_epoch=1, logdir=tmp_path)
            t.train()
        out = capsys.readouterr().out
        assert "('A', True, 1)" in out
        assert "('B', 2)" in out
        assert "IPython is not installed; opening pdb instead" in caplog.text

    def test_no_file_no_shell(self, graph, tmp_path):
        """Without the file training goes on (a shell would fail on captured input)."""
        cb = InjectShell()
        LoopTrainer(graph, step_op(), [cb], max_epoch=2, logdir=tmp_path).train()
        assert cb.path == str(tmp_path / "INJECT_SHELL.tmp")

    def test_absolute_path(self, graph, tmp_path):
        """An absolute path is used as is."""
        cb = InjectShell(tmp_path / "x" / "f")
        LoopTrainer(graph, step_op(), [cb], max_epoch=1, logdir=tmp_path / "elsewhere").train()
        assert cb.path == str(tmp_path / "x" / "f")

    def test_fail(self):
        """Unknown shells and empty names are refused."""
        with pytest.raises(
            ValueError, match=r"'shell' must be one of \('ipython', 'pdb'\); got 'bash'"
        ):
            InjectShell(shell="bash")
        with pytest.raises(ValueError, match=r"'file' must be a non-empty path"):
            InjectShell("")


class Reader(Callback):
    """Reads the estimate after each epoch."""

    def __init__(self, cb):
        self.cb = cb
        self.estimates = []

    def _trigger(self):
        self.estimates.append(self.cb.last_estimate)


@pytest.mark.procs
class TestEstimatedTimeLeft:
    """The time left, from recent epochs' durations."""

    def test_estimates(self, graph, caplog):
        """After each epoch but the last: epochs left times a recent epoch's duration."""
        cb = EstimatedTimeLeft(last_k_epochs=2)
        reader = Reader(cb)
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            start = time.perf_counter()
            LoopTrainer(graph, step_op(0.03), [cb, reader], steps_per_epoch=2, max_epoch=3).train()
            total = time.perf_counter() - start
        first, second, last = reader.estimates
        assert 2 * 0.06 <= first <= 2 * total
        assert 0.06 <= second <= total
        assert last is None
        assert sum("Estimated time left" in r.getMessage() for r in caplog.records) == 2

    def test_fail(self):
        """last_k_epochs is a positive int."""
        with pytest.raises(ValueError, match=r"'last_k_epochs' must be >= 1; got 0"):
            EstimatedTimeLeft(0)
        with pytest.raises(TypeError, match=r"'last_k_epochs' must be an int; got str"):
            EstimatedTimeLeft("5")


UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


@given(st.floats(0, 1e7))
def test_format_duration(seconds):
    """The formatted parts add up to the rounded duration."""
    text = format_duration(seconds)
    parts = re.findall(r"(\d+)([dhms])", text)
    assert sum(int(n) * UNITS[u] for n, u in parts) == round(seconds)
