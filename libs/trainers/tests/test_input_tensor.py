"""`TensorInput`: input tensors built by a function of the program, trained on."""

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    InputSignatureError,
    InputSizeUnknownError,
    ModelDesc,
    SimpleTrainer,
    TensorInput,
    TrainConfig,
    launch_train_with_config,
)


class Linear(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.float32, "y")]

    def build_graph(self, x, y):
        w = tf1.get_variable("w", [2], initializer=tf1.zeros_initializer())
        err = tf.linalg.matvec(x, w) - y
        return tf.reduce_mean(tf.square(err), name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


class Batches(Callback):
    """The x of every step, as the tower read it."""

    def __init__(self):
        self.xs = []

    def _before_run(self, ctx):
        return self.graph.get_tensor_by_name("x_read:0")

    def _after_run(self, ctx, values):
        self.xs.append(values.results)


def counter_batches():
    """A batch of 4 built in the graph from a counter: x = [[k, k]] * 4 at the k-th run."""
    step = tf1.get_variable(
        "reader_step", [], tf.float32, initializer=tf1.zeros_initializer(), trainable=False
    )
    with tf.control_dependencies([tf1.assign_add(step, 1.0)]):
        k = tf.identity(step)
    x = tf.identity(tf.fill([4, 2], k), name="x_read")
    return [x, 3.0 * x[:, 0]]


def test_trains_on_the_tensors(graph):
    batches = Batches()
    config = TrainConfig(
        model=Linear(),
        data=TensorInput(counter_batches, size=3),
        callbacks=[batches],
        monitors=[],
        extra_callbacks=[],
        max_epoch=2,
    )
    trainer = SimpleTrainer()
    launch_train_with_config(config, trainer)
    assert trainer.global_step == 6, "size=3 steps per epoch"
    firsts = [float(x[0, 0]) for x in batches.xs]
    assert firsts == sorted(firsts), "each run reads the next batch"
    assert len(set(firsts)) == 6


def test_size_unknown(graph):
    source = TensorInput(counter_batches)
    with pytest.raises(InputSizeUnknownError, match=r"size of TensorInput\(counter_batches\)"):
        source.size()


def test_tensors_must_match_the_signature(graph):
    config = TrainConfig(
        model=Linear(),
        data=TensorInput(lambda: [tf.zeros([4, 3]), tf.zeros([4], tf.int32)], size=1),
        monitors=[],
        extra_callbacks=[],
        max_epoch=1,
    )
    with pytest.raises(
        InputSignatureError,
        match=r"#0 'x': expected float32\(None, 2\), got float32\(4, 3\); "
        r"#1 'y': expected float32\(None,\), got int32\(4,\)",
    ):
        launch_train_with_config(config, SimpleTrainer())


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((np.zeros(2),), TypeError, "'get_tensor_fn' must be a function of no argument"),
        ((counter_batches, 2.5), TypeError, "'size' must be an int or None; got float"),
        ((counter_batches, 0), ValueError, "'size' must be at least 1"),
    ],
)
def test_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        TensorInput(*args)


def test_not_a_list(graph):
    source = TensorInput(lambda: tf.zeros([4, 2]))
    source.setup(Linear().get_input_signature())
    with pytest.raises(TypeError, match="must return a list or tuple of tensors, one per input"):
        source.get_input_tensors()
