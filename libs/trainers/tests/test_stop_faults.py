"""Ends of a run that are not its last epoch: a callback stopping it, NaN, Ctrl-C.

An early stop keeps its epoch whole (statistics, monitors, savers) and a resume does not
run it again; a failing run never leaves a checkpoint that resuming, ``SmartInit(logdir)``
or the exporters would pick, nor one with non-finite variables.
"""

from __future__ import annotations

import logging
import math
import os
import signal

import numpy as np
import pytest
import tensorflow as tf
from resume_script import Model

from towerkit.callbacks import (
    Callback,
    CheckNumerics,
    EarlyStopping,
    JSONWriter,
    ModelSaver,
    ScalarPrinter,
    StopTraining,
    read_stats_file,
)
from towerkit.sessinit import SmartInit, load_checkpoint_vars
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    NumpyInput,
    SimpleTrainer,
    launch_train_with_config,
)

pytestmark = pytest.mark.slow

STEPS = 4
"""Steps per epoch: 64 datapoints in batches of 16."""
SERIES = {1: 5.0, 2: 4.0, 3: 3.0, 4: 3.0, 5: 3.0, 6: 2.0, 7: 1.0, 8: 0.0}
"""The statistic ``val`` put at the end of each epoch: no gain in epochs 4 and 5."""


class PutSeries(Callback):
    """Puts ``SERIES[epoch]`` as the statistic ``val`` at the end of each epoch."""

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar("val", SERIES[self.epoch_num])


class SeenEpochs(Callback):
    """Records each epoch whose ``trigger_epoch`` it saw (it comes after the one that stops)."""

    def __init__(self):
        self.seen = []

    def _trigger_epoch(self):
        self.seen.append(self.epoch_num)


class Poison(Callback):
    """Writes NaN into the first layer's weights after global step `at`."""

    accepts_coarse_steps = True

    def __init__(self, at):
        self.at = at

    def _setup_graph(self):
        (w,) = [v for v in tf1.global_variables() if v.op.name == "fc0/W"]
        self.op = tf1.assign(w, tf.fill(tf.shape(w), math.nan))

    def _trigger_step(self):
        if self.global_step == self.at:
            self.trainer.sess.run(self.op)


class Interrupt(Callback):
    """Sends this process SIGINT (Ctrl-C) after global step `at`."""

    accepts_coarse_steps = True

    def __init__(self, at):
        self.at = at

    def _trigger_step(self):
        if self.global_step == self.at:
            os.kill(os.getpid(), signal.SIGINT)


class Terminate(Callback):
    """Sends this process SIGTERM (a preemption) after global step `at`."""

    accepts_coarse_steps = True

    def __init__(self, at):
        self.at = at

    def _trigger_step(self):
        if self.global_step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    return NumpyInput([x, y], batch_size=16, seed=0)


def train(logdir, callbacks, k=1, max_epoch=8, seed=None):
    """One run of the same command: an `AutoResumeTrainConfig` in `logdir`."""
    config = AutoResumeTrainConfig(
        model=Model(),
        data=data(),
        callbacks=callbacks,
        extra_callbacks=[],
        monitors=[JSONWriter(), ScalarPrinter()],
        max_epoch=max_epoch,
        logdir=str(logdir),
        steps_per_execution=k,
    )
    with tf.Graph().as_default():
        if seed is not None:
            tf1.set_random_seed(seed)
        launch_train_with_config(config, SimpleTrainer())


def epochs_in_stats(logdir):
    return [r["epoch_num"] for r in read_stats_file(os.path.join(logdir, "stats.json"))]


def latest_step(logdir):
    return int(tf.train.latest_checkpoint(str(logdir)).rsplit("-", 1)[1])


class TestEarlyStopping:
    """EarlyStopping at the end of epoch 5, with one and with two steps per session call."""

    @pytest.mark.parametrize("k", [1, 2])
    def test_epoch_whole_and_not_repeated(self, tmp_path, caplog, k):
        """The stopping epoch is written, saved and seen; one line says who stopped and why;
        the same command again resumes after it and ends where an unstopped run ends."""
        logdir = tmp_path / "log"
        seen = SeenEpochs()
        with caplog.at_level(logging.INFO):
            train(logdir, [ModelSaver(), PutSeries(), EarlyStopping("val", patience=2), seen], k)
        assert seen.seen == [1, 2, 3, 4, 5], "the callbacks after EarlyStopping see epoch 5"
        assert epochs_in_stats(logdir) == [1, 2, 3, 4, 5]
        assert latest_step(logdir) == 5 * STEPS
        lines = [r.getMessage() for r in caplog.records if "training stopped" in r.getMessage()]
        assert lines == [
            f"training stopped at epoch 5, global step {5 * STEPS}: EarlyStopping('val', "
            "mode='min', patience=2): val has not improved for 2 epochs; the best, 3, was at "
            "epoch 3"
        ]
        seen = SeenEpochs()
        train(logdir, [ModelSaver(), PutSeries(), EarlyStopping("val", patience=2), seen], k)
        assert seen.seen == [6, 7, 8], "the resumed run starts after the stopping epoch"
        assert epochs_in_stats(logdir) == [1, 2, 3, 4, 5, 6, 7, 8]
        assert latest_step(logdir) == 8 * STEPS

    @pytest.mark.parametrize("stop", ["epoch_end", "inside_epoch"])
    def test_resumed_run_stops_where_an_uninterrupted_one_does(self, tmp_path, stop):
        """A run ended after epoch 4 (or preempted inside epoch 5) resumes with the wait on.

        Epoch 4 did not improve on epoch 3; the resumed run's epoch 5 does not either,
        so it stops at epoch 5 as `test_epoch_whole_and_not_repeated`'s run does: the
        wait of 1 came from stats.json, not from this run.
        """
        logdir = tmp_path / "log"
        callbacks = [ModelSaver(), PutSeries(), EarlyStopping("val", patience=2)]
        if stop == "epoch_end":
            train(logdir, callbacks, max_epoch=4)
        else:
            with pytest.raises(SystemExit) as ended:
                train(logdir, [*callbacks, Terminate(4 * STEPS + 2)])
            assert ended.value.code == 143
            assert latest_step(logdir) == 4 * STEPS + 2
        assert epochs_in_stats(logdir) == [1, 2, 3, 4]
        early = EarlyStopping("val", patience=2)
        seen = SeenEpochs()
        train(logdir, [ModelSaver(), PutSeries(), early, seen])
        assert seen.seen == [5]
        assert early.stopped_epoch == 5
        assert (early.best, early.best_epoch, early.state.wait) == (3.0, 3, 2)
        assert epochs_in_stats(logdir) == [1, 2, 3, 4, 5]

    def test_after_epoch_stop_keeps_trigger_epoch(self, tmp_path):
        """StopTraining raised in after_epoch: the epoch's trigger_epoch still runs everywhere."""
        from towerkit.callbacks import StopTraining

        class StopInAfterEpoch(Callback):
            def _after_epoch(self):
                if self.epoch_num == 2:
                    msg = "enough"
                    raise StopTraining(msg)

        logdir = tmp_path / "log"
        seen = SeenEpochs()
        train(logdir, [StopInAfterEpoch(), ModelSaver(), PutSeries(), seen])
        assert seen.seen == [1, 2]
        assert epochs_in_stats(logdir) == [1, 2]
        assert latest_step(logdir) == 2 * STEPS


class TestFailingRunSaves:
    """A run that fails never makes a checkpoint that resuming or SmartInit(logdir) picks."""

    def test_nan_stopped_by_check_numerics(self, tmp_path, caplog):
        """NaN after step 6, CheckNumerics stops the run at the end of epoch 2: the latest
        checkpoint stays epoch 1's, finite, for SmartInit(logdir) and for the resume."""
        logdir = tmp_path / "log"
        with (
            caplog.at_level(logging.WARNING, logger="towerkit.callbacks"),
            pytest.raises(FloatingPointError, match="fc0/W"),
        ):
            train(logdir, [Poison(at=6), ModelSaver(), CheckNumerics()])
        assert latest_step(logdir) == STEPS
        assert not (logdir / f"model-{2 * STEPS}.index").exists()
        assert f"ModelSaver: not saved at global step {2 * STEPS}" in caplog.text
        assert "'fc0/W:0' (NaN)" in caplog.text
        for name, value in load_checkpoint_vars(tf.train.latest_checkpoint(str(logdir))).items():
            assert np.all(np.isfinite(value)), name
        with tf.Graph().as_default():
            w = tf1.get_variable("fc0/W", [8, 16])
            with tf1.Session() as sess:
                SmartInit(str(logdir)).init(sess)
                assert np.all(np.isfinite(sess.run(w)))
        config = AutoResumeTrainConfig(model=Model(), data=data(), max_epoch=8, logdir=str(logdir))
        assert config.plan_resume(STEPS).checkpoint.endswith(f"model-{STEPS}")

    def test_failure_mid_epoch_end_not_saved(self, tmp_path, caplog):
        """An exception at the last step of epoch 2: after_train does not save that state."""

        class Boom(Callback):
            def _trigger_step(self):
                if self.global_step == 2 * STEPS:
                    raise RuntimeError("boom")

        logdir = tmp_path / "log"
        with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match="boom"):
            train(logdir, [ModelSaver(), Boom()])
        assert latest_step(logdir) == STEPS
        assert "ModelSaver: training ended by RuntimeError at global step 8" in caplog.text

    def test_ctrl_c_at_epoch_end_not_saved(self, tmp_path, caplog, default_sigint):
        """Ctrl-C in the last step of epoch 2: the run stops, its state is not the latest."""
        logdir = tmp_path / "log"
        with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
            train(logdir, [ModelSaver(), Interrupt(at=2 * STEPS)])
        assert latest_step(logdir) == STEPS
        assert "ModelSaver: training ended by KeyboardInterrupt" in caplog.text


class StopAt(Callback):
    """Stops training after global step `at`: from trigger_step, or as a hook's request."""

    accepts_coarse_steps = True

    def __init__(self, at, how):
        self.at, self.how = at, how

    def _after_run(self, ctx, values):
        if self.how == "hook" and self.trainer.global_step >= self.at:
            ctx.request_stop()

    def _trigger_step(self):
        if self.how == "trigger_step" and self.global_step == self.at:
            raise StopTraining(f"StopAt: step {self.at}")


class TestStopWinsOverPreemption:
    """A callback's stop decided in the step a SIGTERM arrived in: the run ends as stopped."""

    @pytest.mark.parametrize("how", ["trigger_step", "hook"])
    @pytest.mark.parametrize("at", [2 * STEPS + 2, 3 * STEPS], ids=["mid-epoch", "epoch-end"])
    def test_same_end_as_the_stop_alone(self, tmp_path, caplog, how, at):
        """No TrainingPreempted, no preemption save: the checkpoints, their positions and
        stats.json are those of the same stop without the signal."""
        alone = tmp_path / "alone"
        train(alone, [ModelSaver(), StopAt(at, how)], seed=1)
        with caplog.at_level(logging.WARNING, logger="towerkit.trainers"):
            train(tmp_path / "both", [ModelSaver(), Terminate(at), StopAt(at, how)], seed=1)
        assert "the run ends as stopped" in caplog.text
        assert "preempted: saved" not in caplog.text
        both = tmp_path / "both"
        assert latest_step(both) == latest_step(alone)
        assert sorted(n for n in os.listdir(both) if n.startswith("model-")) == sorted(
            n for n in os.listdir(alone) if n.startswith("model-")
        )
        assert (both / "stats.json").read_text() == (alone / "stats.json").read_text()
        assert (both / "positions.json").read_text() == (alone / "positions.json").read_text()
        got = load_checkpoint_vars(tf.train.latest_checkpoint(str(both)))
        for name, value in load_checkpoint_vars(tf.train.latest_checkpoint(str(alone))).items():
            assert np.array_equal(got[name], value), name

    def test_a_preemption_without_a_stop_still_preempts(self, tmp_path):
        """The same SIGTERM alone: saved where it landed, status 143."""
        with pytest.raises(SystemExit) as ended:
            train(tmp_path, [ModelSaver(), Terminate(2 * STEPS + 2)])
        assert ended.value.code == 143
        assert latest_step(tmp_path) == 2 * STEPS + 2
