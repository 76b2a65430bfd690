"""What a new user meets in the first hour, run as a program that configures no logging.

Each test runs a short training program in its own Python process (TensorFlow prints
some warnings once per process) and reads what it printed and what it left on disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_first_hour")]
"""These tests spawn Python processes that load TensorFlow."""

PROGRAM = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    from towerkit.callbacks import ModelSaver
    from towerkit.layers import BatchNorm, FullyConnected
    from towerkit.trainers import (AutoResumeTrainConfig, ModelDesc, NumpyInput,
                                   SimpleTrainer, TrainConfig, launch_train_with_config)

    tf1 = tf.compat.v1
    logdir, precision, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 4), tf.float32, "x"),
                    tf.TensorSpec((None, 1), tf.float32, "y")]

        def build_graph(self, x, y):
            h = BatchNorm("bn", FullyConnected("fc0", x, 8, activation=tf.nn.relu))
            pred = tf.cast(FullyConnected("fc1", h, 1), tf.float32)
            return tf.reduce_mean(tf.square(pred - tf.cast(y, tf.float32)), name="cost")

        def optimizer(self):
            return tf1.train.GradientDescentOptimizer(0.01)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = x[:, :1] - x[:, 1:2]
    kwargs = dict(model=Model(), data=NumpyInput([x, y], batch_size=16), steps_per_epoch=4,
                  max_epoch=epochs, precision=precision)
    if logdir == "none":
        config = TrainConfig(logdir=None, **kwargs)
    else:
        config = AutoResumeTrainConfig(logdir=logdir, callbacks=[ModelSaver()], **kwargs)
    launch_train_with_config(config, SimpleTrainer())
    """
)


def train(cwd, logdir: str, precision: str = "float32", epochs: int = 1):
    """Run the program in `cwd`; its completed process (output and status)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    (cwd / "program.py").write_text(PROGRAM)
    return subprocess.run(
        [sys.executable, "program.py", logdir, precision, str(epochs)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_logdir_none_trains_and_writes_nothing(tmp_path):
    """``TrainConfig(logdir=None)`` trains with the monitors that write no file: the epoch
    line is printed, no file appears, and towerkit's BatchNorm and optimizer build without
    a TensorFlow deprecation warning from towerkit's own code."""
    done = train(tmp_path, "none")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "epoch 1/1" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["program.py"]
    deprecated = [
        line for line in out.splitlines() if "deprecat" in line.lower() and "towerkit" in line
    ]
    assert not deprecated, deprecated


def test_a_resumed_run_says_so_once(tmp_path):
    """A rerun that resumes prints one console line naming the checkpoint and where it
    starts, with no logging configured; the first run says nothing of the kind."""
    logdir = str(tmp_path / "run")
    first = train(tmp_path, logdir, epochs=1)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "resuming from" not in first.stdout + first.stderr
    again = train(tmp_path, logdir, epochs=2)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [line for line in (again.stdout + again.stderr).splitlines() if "resuming from" in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith("AutoResumeTrainConfig: resuming from ")
    assert "model-4" in lines[0], lines[0]
    assert "starting at epoch 2" in lines[0], lines[0]


def test_float16_on_a_cpu_warns_once(tmp_path):
    """``precision="mixed_float16"`` where TensorFlow sees no GPU trains, and warns once
    with the cost and the precision to use on CPUs; float32 does not warn."""
    done = train(tmp_path, str(tmp_path / "half"), precision="mixed_float16")
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if "on a machine with no GPU" in line]
    assert len(warned) == 1, done.stderr[-3000:]
    assert "'mixed_bfloat16'" in warned[0]
    assert "steps/s" in warned[0]
    plain = train(tmp_path, str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "on a machine with no GPU" not in plain.stderr
