"""The paper's four models written with towerkit.layers, trained by ``launch_train_with_config``.

Each layer starts as PyTorch's layers do in the paper's code (weights and biases
uniform in ±1/sqrt(fan-in), the GRU's in ±1/sqrt(hidden units)), and Adam has the
paper's epsilon; the batches come in the same order every pass, as in the paper's
loop. ``train`` returns the test accuracy after every ``eval_every`` steps. With
``Recipe(init="own")`` the layers keep their own initializers (tensorpack's).
"""

from __future__ import annotations

import math
import time
from typing import Any

import tensorflow as tf
from mnist1d_recipe import BATCH_SIZE, MODELS, Recipe, RunResult
from mnist1d_signals import Split

from towerkit.callbacks import Callback, ClassificationError, InferenceRunner
from towerkit.layers import Conv2D, FullyConnected, rnn
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

LENGTH = 40
"""Positions in a signal."""

CLASSES = 10
HIDDEN = 100
"""The MLP's hidden units (the paper's ``MLPBase`` default)."""

CHANNELS = 25
"""The CNN's channels in each of its three convolutions."""

GRU_UNITS = 6
"""Units of each direction of the bidirectional GRU."""


def uniform(fan_in: int, paper: bool) -> Any:
    """PyTorch's default start for a layer with `fan_in` inputs: uniform in ±1/sqrt(fan_in).

    None (the layer's own default) unless `paper`.
    """
    if not paper:
        return None
    bound = 1.0 / math.sqrt(fan_in)
    return tf1.random_uniform_initializer(-bound, bound)


def dense(name: str, x: Any, units: int, paper: bool, activation: Any = None) -> Any:
    """``FullyConnected``, started as PyTorch's ``nn.Linear`` when `paper`."""
    init = uniform(int(x.shape[-1]), paper)
    return FullyConnected(
        name, x, units, activation=activation, kernel_initializer=init, bias_initializer=init
    )


def conv(name: str, x: Any, kernel: int, paper: bool) -> Any:
    """A 1-D convolution (stride 2, one zero on each side, relu) as a ``Conv2D`` over a height of 1."""
    init = uniform(int(x.shape[-1]) * kernel, paper)
    x = tf.pad(x, [[0, 0], [0, 0], [1, 1], [0, 0]])
    return Conv2D(
        name,
        x,
        CHANNELS,
        (1, kernel),
        strides=(1, 2),
        padding="valid",
        activation=tf.nn.relu,
        kernel_initializer=init,
        bias_initializer=init,
    )


def logistic(signal: Any, paper: bool = True) -> Any:
    """Logistic regression: one dense layer from the 40 positions to the 10 classes."""
    return dense("linear", signal, CLASSES, paper)


def mlp(signal: Any, paper: bool = True) -> Any:
    """Dense 100 - relu, plus a residual dense 100 - relu, dense 10 (the paper's ``MLPBase``)."""
    h = dense("fc1", signal, HIDDEN, paper, tf.nn.relu)
    h = h + dense("fc2", h, HIDDEN, paper, tf.nn.relu)
    return dense("fc3", h, CLASSES, paper)


def cnn(signal: Any, paper: bool = True) -> Any:
    """Three convolutions of 25 channels (kernels 5, 3, 3; stride 2), then dense 10 over 5 x 25."""
    x = tf.reshape(signal, [-1, 1, LENGTH, 1])
    x = conv("conv1", x, 5, paper)
    x = conv("conv2", x, 3, paper)
    x = conv("conv3", x, 3, paper)
    return dense("linear", tf.reshape(x, [-1, 5 * CHANNELS]), CLASSES, paper)


def gru(signal: Any, paper: bool = True) -> Any:
    """A bidirectional GRU of 6 units a direction over the 40 positions, then dense 10 over all outputs."""
    init = uniform(GRU_UNITS, paper)

    def cell() -> Any:
        # The reset gate after the state's product, as PyTorch's GRU (the paper's) and
        # Keras's compute it; TensorFlow 1's cell (reset_after=False) applies it before.
        return rnn.GRUCell(
            GRU_UNITS, kernel_initializer=init, bias_initializer=init, reset_after=True
        )

    x = tf.reshape(signal, [-1, LENGTH, 1])
    (fw, bw), _ = rnn.bidirectional_dynamic_rnn(cell(), cell(), x, dtype=tf.float32, scope="gru")
    h = tf.reshape(tf.concat([fw, bw], axis=-1), [-1, LENGTH * 2 * GRU_UNITS])
    return dense("linear", h, CLASSES, paper)


BUILDERS = {"logistic": logistic, "mlp": mlp, "cnn": cnn, "gru": gru}


class Mnist1dModel(ModelDesc):
    """One of the paper's models (`MODELS`) with its cross-entropy cost and Adam."""

    def __init__(self, model: str, recipe: Recipe, seed: int) -> None:
        if model not in MODELS:
            msg = f"'model' must be one of {MODELS}; got {model!r}"
            raise ValueError(msg)
        self.model, self.recipe, self.seed = model, recipe, seed

    def inputs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec((None, LENGTH), tf.float32, "signal"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, signal: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        # The graph's seed makes each initializer's seed, in the order they are made.
        tf1.set_random_seed(self.seed)
        logits = BUILDERS[self.model](signal, paper=self.recipe.init == "paper")
        correct = tf.nn.in_top_k(predictions=logits, targets=label, k=1)
        tf.cast(tf.logical_not(correct), tf.float32, name="incorrect_vector")
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
            name="cross_entropy_loss",
        )

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.AdamOptimizer(self.recipe.learning_rate, epsilon=self.recipe.epsilon)


class Curve(Callback):
    """Keeps the test accuracy (%) that the `InferenceRunner` before it put after each epoch."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def _trigger_epoch(self) -> None:
        self.values.append(
            100.0 * (1.0 - float(self.trainer.monitors.get_latest("validation_error")))
        )


def train(model: str, split: Split, recipe: Recipe, seed: int, data: str) -> RunResult:
    """Train `model` on `split` for ``recipe.steps`` steps; test after every ``eval_every``.

    An epoch here is ``eval_every`` steps; the batches run through the training set in
    order, 40 a pass, and start again. No progress bar and no monitors (Keras's run
    beside it prints nothing either): the curve is read from the trainer's history.
    """
    curve = Curve()
    config = TrainConfig(
        model=Mnist1dModel(model, recipe, seed),
        data=NumpyInput([split.x, split.y], batch_size=BATCH_SIZE, shuffle=False),
        callbacks=[InferenceRunner([[split.x_test, split.y_test]], [ClassificationError()]), curve],
        extra_callbacks=[],
        monitors=[],
        steps_per_epoch=recipe.eval_every,
        max_epoch=recipe.steps // recipe.eval_every,
    )
    start = time.perf_counter()
    launch_train_with_config(config, SimpleTrainer())
    seconds = time.perf_counter() - start
    return RunResult(
        framework="towerkit", model=model, data=data, seed=seed, curve=curve.values, seconds=seconds
    )
