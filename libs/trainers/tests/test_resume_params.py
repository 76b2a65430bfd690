"""Hyper-parameter setters across a resume: the resumed run's stats.json equals the uninterrupted run's."""

import json

import pytest
import tensorflow as tf
from helpers import blobs, mlp_cost

from towerkit.callbacks import JSONWriter, ModelSaver, ScheduledHyperParamSetter
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    launch_train_with_config,
)


class Blobs(ModelDesc):
    """The helpers' MLP with a float32 learning rate that does not start on the schedule."""

    def inputs(self):
        return [tf.TensorSpec([None, 32], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]

    def build_graph(self, x, y):
        return mlp_cost(x, y)

    def optimizer(self):
        lr = tf1.get_variable("learning_rate", initializer=0.5, trainable=False)
        return tf1.train.GradientDescentOptimizer(lr)


def run(logdir, max_epoch, schedule, interp):
    """Train with ModelSaver listed before the setter (as tensorpack programs do); stats.json."""
    with tf.Graph().as_default():
        config = AutoResumeTrainConfig(
            model=Blobs(),
            data=NumpyInput(list(blobs(64)), batch_size=32, seed=0),
            callbacks=[ModelSaver(), ScheduledHyperParamSetter("learning_rate", schedule, interp)],
            monitors=[JSONWriter()],
            extra_callbacks=[],
            max_epoch=max_epoch,
            logdir=logdir,
        )
        launch_train_with_config(config, SimpleTrainer())
    with open(logdir / "stats.json", encoding="utf-8") as f:
        return json.load(f)


SCHEDULE = [(0, 0.003), (2, 0.0007), (5, 0.0001)]


@pytest.mark.parametrize("interp", [None, "linear"])
@pytest.mark.parametrize("stops", [(2,), (3,), (1, 4, 5)])
def test_stats_equal_after_resume(tmp_path, interp, stops):
    """Runs stopped after the epochs in `stops` and resumed write the uninterrupted run's stats.json."""
    whole = run(tmp_path / "whole", 6, SCHEDULE, interp)
    assert [r["epoch_num"] for r in whole] == [1, 2, 3, 4, 5, 6]
    assert "learning_rate" in whole[0]
    for stop in stops:
        run(tmp_path / "parts", stop, SCHEDULE, interp)
    assert run(tmp_path / "parts", 6, SCHEDULE, interp) == whole
