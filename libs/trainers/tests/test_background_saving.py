"""ModelSaver(background=True) under a real trainer: Ctrl-C and the end wait for the write."""

import os
import signal
import threading

import numpy as np
import pytest
import tensorflow as tf
from resume_script import Model

from towerkit.callbacks import Callback, ModelSaver
from towerkit.sessinit import get_all_checkpoints, load_checkpoint_vars
from towerkit.towers.compat import tf1
from towerkit.trainers import NumpyInput, SimpleTrainer, TrainConfig, launch_train_with_config


class BigModel(Model):
    """The 8-16-3 MLP with a 64 MB variable beside it (a write that takes a while)."""

    def build_graph(self, x, y):
        tf1.get_variable(
            "big", shape=[16_000_000], initializer=tf1.ones_initializer(), trainable=False
        )
        return super().build_graph(x, y)


class InterruptAfterSave(Callback):
    """Sends SIGINT right after the saver's turn at the end of epoch 1 (its write in flight)."""

    def _trigger(self):
        if self.trainer.epoch_num == 1:
            os.kill(os.getpid(), signal.SIGINT)


def writer_threads():
    return [t for t in threading.enumerate() if t.name.startswith("towerkit-save")]


def train(logdir, callbacks, max_epoch=2):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    config = TrainConfig(
        model=BigModel(),
        data=NumpyInput([x, y], batch_size=8, shuffle=False),
        callbacks=callbacks,
        steps_per_epoch=4,
        max_epoch=max_epoch,
        logdir=str(logdir),
        logdir_action="keep",
    )
    with tf.Graph().as_default():
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
    return trainer


def test_ctrl_c_waits_for_the_write_in_flight(tmp_path, default_sigint):
    """Ctrl-C while the epoch's checkpoint is written on the thread: the run ends by
    KeyboardInterrupt once that checkpoint is published whole."""
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, [ModelSaver(background=True), InterruptAfterSave()], max_epoch=3)
    assert not writer_threads()
    assert [s for _, s in get_all_checkpoints(str(tmp_path))] == [4], "Ctrl-C saves nothing more"
    for prefix, step in get_all_checkpoints(str(tmp_path)):
        values = load_checkpoint_vars(prefix)
        assert values["global_step"] == step
        assert np.all(values["big"] == 1.0)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")], "no temporary left"


def test_the_end_of_training_waits(tmp_path):
    """train() returns with the last epoch's checkpoint on disk and the thread gone."""
    train(tmp_path, [ModelSaver(background=True)])
    assert not writer_threads()
    assert [s for _, s in get_all_checkpoints(str(tmp_path))] == [4, 8]
