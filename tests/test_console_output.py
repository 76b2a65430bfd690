"""What a real short run shows on a terminal (through a pty) and in a pipe, and what stats.json holds."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time

import pytest

pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_console_output")]
"""These tests spawn Python processes that load TensorFlow."""


SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    from towerkit.callbacks import ProgressBar, ScheduledHyperParamSetter
    from towerkit.towers import add_moving_summary
    from towerkit.trainers import (ModelDesc, NumpyInput, SimpleTrainer, TrainConfig,
                                   launch_train_with_config)

    tf1 = tf.compat.v1
    ProgressBar.mininterval = 0.02  # redraw often: the epochs are short

    class Linear(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32, "x"),
                    tf.TensorSpec((None,), tf.float32, "y")]

        def build_graph(self, x, y):
            w = tf1.get_variable("w", [3, 1], initializer=tf1.zeros_initializer())
            b = tf1.get_variable("b", [1], initializer=tf1.zeros_initializer())
            pred = tf.squeeze(tf.matmul(x, w) + b, 1)
            cost = tf.reduce_mean(tf.square(pred - y), name="cost")
            add_moving_summary(cost)
            return cost

        def optimizer(self):
            lr = tf1.get_variable("learning_rate", initializer=0.1, trainable=False)
            return tf1.train.GradientDescentOptimizer(lr)

    x = np.random.default_rng(0).random((4096, 3), dtype=np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    config = TrainConfig(
        model=Linear(), data=NumpyInput([x, y], batch_size=8),
        callbacks=[ScheduledHyperParamSetter("learning_rate", [(2, 0.05)])],
        max_epoch=3, logdir=sys.argv[1])
    launch_train_with_config(config, SimpleTrainer())
    """
)

EPOCH_LINE = re.compile(
    r"^epoch (\d)/3  \d+\.\d s  cost (\d\.\d+(e-\d+)?)  learning_rate (0\.1|0\.05)$", re.M
)
"""The one line of an epoch: its number, wall time, the cost's moving average, the rate."""

TABLE = [
    "trainable variables:",
    "  name  shape  count",
    "  w     3x1        3",
    "  b     1          1",
    "2 trainable variables, 4 parameters (16 bytes)",
]


def _env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "COLUMNS": "120"}


def run_on_terminal(script: str, logdir: str, timeout: float = 300) -> tuple[int, str]:
    """Run `script` with stdout and stderr on a pseudo-terminal; its exit status and output."""
    master, slave = pty.openpty()
    # a terminal of 30 rows and 120 columns (a new pty has none, and tqdm fits its width)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, script, logdir], stdout=slave, stderr=slave, env=_env(), close_fds=True
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    code = proc.wait(timeout=60)
    return code, b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("console") / "train.py"
    path.write_text(SCRIPT)
    return str(path)


@pytest.fixture(scope="module")
def on_terminal(script, tmp_path_factory) -> tuple[int, str, str]:
    logdir = str(tmp_path_factory.mktemp("tty") / "log")
    code, out = run_on_terminal(script, logdir)
    return code, out, logdir


@pytest.fixture(scope="module")
def piped(script, tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], str]:
    logdir = str(tmp_path_factory.mktemp("pipe") / "log")
    done = subprocess.run(
        [sys.executable, script, logdir],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
        check=False,
    )
    return done, logdir


class TestTerminal:
    """On a terminal: the bar shows the running cost, then one line per epoch stays."""

    def test_epoch_lines(self, on_terminal):
        """One compact line per epoch, with the cost and the learning rate."""
        code, out, _ = on_terminal
        assert code == 0, out[-3000:]
        lines = out.replace("\r\n", "\n").split("\n")
        # the bar's frames are redrawn with \r in one terminal line; the epoch line follows
        ends = [line.rsplit("\r", 1)[-1] for line in lines]
        epochs = [m.group(1) for line in ends if (m := EPOCH_LINE.match(line))]
        assert epochs == ["1", "2", "3"], out[-3000:]

    def test_bar_shows_cost(self, on_terminal):
        """Bar frames show the epoch, the steps and the latest cost."""
        _, out, _ = on_terminal
        frames = re.findall(
            r"epoch (\d)/3: +\d+%\|[^\r\n]*\| (\d+)/512 [^\r\n]*cost=([\d.e+-]+)", out
        )
        assert {f[0] for f in frames} == {"1", "2", "3"}, out[-3000:]
        assert all(float(f[2]) >= 0 for f in frames)

    def test_variable_table(self, on_terminal):
        """The table of trainable variables and their total, once, before the first epoch."""
        _, out, _ = on_terminal
        text = out.replace("\r\n", "\n")
        assert "\n".join(TABLE) in text
        assert text.index(TABLE[0]) < text.index("epoch 1/3")


class TestPiped:
    """In a pipe or a log file: no bar frames, one plain line per epoch."""

    def test_epoch_lines_no_frames(self, piped):
        """stderr holds the table, then exactly one line per epoch, and no carriage return."""
        done, _ = piped
        assert done.returncode == 0, done.stderr[-3000:]
        assert "\r" not in done.stderr
        assert "step/s" not in done.stderr
        epochs = [m.group(1) for m in EPOCH_LINE.finditer(done.stderr)]
        assert epochs == ["1", "2", "3"], done.stderr[-3000:]
        assert "\n".join(TABLE) in done.stderr
        rate = [m.group(4) for m in EPOCH_LINE.finditer(done.stderr)]
        assert rate == ["0.1", "0.05", "0.05"]

    def test_full_precision_in_stats(self, piped):
        """stats.json keeps the cost that the line rounds to 4 digits."""
        done, logdir = piped
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        shown = [float(m.group(2)) for m in EPOCH_LINE.finditer(done.stderr)]
        for rec, value in zip(records, shown):
            assert float(f"{rec['cost']:.4g}") == value


class TestLearningRateEveryEpoch:
    """A setter's value is in every record of stats.json, the first epoch's included."""

    def test_every_epoch_has_the_rate(self, piped):
        """Epoch 1 holds the starting 0.1 (never set by the schedule); epochs 2-3 hold 0.05."""
        _, logdir = piped
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        assert [r["epoch_num"] for r in records] == [1, 2, 3]
        assert [r["learning_rate"] for r in records] == pytest.approx([0.1, 0.05, 0.05])
