"""BatchNorm(sync_statistics='nccl') trained by the replicated trainer on two logical CPUs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import ModelSaver
from towerkit.layers import BatchNorm
from towerkit.trainers import (
    ModelDesc,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
    TrainConfig,
    launch_train_with_config,
)

pytestmark = pytest.mark.procs

tf1 = tf.compat.v1

BATCH = (4, 3, 3, 2)


class SyncModel(ModelDesc):
    """One synchronized BatchNorm whose averages take the last step's statistics (momentum 0)."""

    def inputs(self):
        return [tf.TensorSpec(BATCH, tf.float32, "x")]

    def build_graph(self, x):
        y = BatchNorm("bn", x, sync_statistics="nccl", momentum=0.0)
        return tf.reduce_mean(tf.square(y - 0.5), name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.01)


def _batches(steps):
    """Two towers' batches per step, far apart: tower-local statistics would show."""
    rng = np.random.default_rng(0)
    out = []
    for k in range(2 * steps):
        shift = 5.0 if k % 2 else -3.0
        out.append((rng.normal(size=BATCH).astype(np.float32) + shift,))
    return out


@pytest.mark.parametrize(
    "make_trainer",
    [lambda: SyncMultiGPUTrainerReplicated(2), lambda: SyncMultiGPUTrainerParameterServer(2)],
    ids=["replicated", "parameter-server"],
)
def test_towers_share_the_batch_statistics(tmp_path, make_trainer):
    """The main tower's averages hold the mean and variance of both towers' batches."""
    steps = 3
    batches = _batches(steps)
    logdir = str(tmp_path / "log")
    with tf.Graph().as_default():
        config = TrainConfig(
            model=SyncModel(),
            dataflow=batches,
            callbacks=[ModelSaver()],
            steps_per_epoch=steps,
            max_epoch=1,
            logdir=logdir,
        )
        launch_train_with_config(config, make_trainer())
    ckpt = tf1.train.latest_checkpoint(logdir)
    mean = tf1.train.load_variable(ckpt, "bn/mean/EMA")
    var = tf1.train.load_variable(ckpt, "bn/variance/EMA")
    last = np.concatenate([b[0] for b in batches[-2:]])
    # the last step normalized the two last batches together (whichever tower took which)
    np.testing.assert_allclose(mean, last.mean(axis=(0, 1, 2)), rtol=1e-4)
    np.testing.assert_allclose(var, last.var(axis=(0, 1, 2)), rtol=1e-3)
