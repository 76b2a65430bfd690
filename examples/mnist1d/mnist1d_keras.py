"""The same four models in Keras 3, trained by ``Model.fit`` under the same recipe: the reference run.

Only the recipe's venv holds Keras 3 (``nox -s recipes`` installs it); towerkit's
libs never import it. Weights start as in the paper's PyTorch code (uniform in
±1/sqrt(fan-in); Keras's own default is Glorot), Adam has the paper's epsilon (1e-8;
Keras's default is 1e-7), and ``fit`` keeps the batches in order (``shuffle=False``).
"""

from __future__ import annotations

import math
import time
from typing import Any

import keras
from mnist1d_recipe import BATCH_SIZE, BATCHES_PER_PASS, Recipe, RunResult
from mnist1d_signals import Split
from mnist1d_towerkit import CHANNELS, CLASSES, GRU_UNITS, HIDDEN, LENGTH


def uniform(fan_in: int) -> Any:
    """PyTorch's default start for a layer with `fan_in` inputs: uniform in ±1/sqrt(fan_in)."""
    bound = 1.0 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


def dense(units: int, fan_in: int, activation: str | None = None) -> Any:
    return keras.layers.Dense(
        units,
        activation=activation,
        kernel_initializer=uniform(fan_in),
        bias_initializer=uniform(fan_in),
    )


def conv(fan_in: int, kernel: int) -> Any:
    return keras.layers.Conv1D(
        CHANNELS,
        kernel,
        strides=2,
        activation="relu",
        kernel_initializer=uniform(fan_in * kernel),
        bias_initializer=uniform(fan_in * kernel),
    )


def build(model: str) -> Any:
    """The Keras model called `model` (one of the recipe's ``MODELS``), outputting logits."""
    signal = keras.Input((LENGTH,), name="signal")
    if model == "logistic":
        logits = dense(CLASSES, LENGTH)(signal)
    elif model == "mlp":
        h = dense(HIDDEN, LENGTH, "relu")(signal)
        h = keras.layers.Add()([h, dense(HIDDEN, HIDDEN, "relu")(h)])
        logits = dense(CLASSES, HIDDEN)(h)
    elif model == "cnn":
        x = keras.layers.Reshape((LENGTH, 1))(signal)
        for fan_in, kernel in ((1, 5), (CHANNELS, 3), (CHANNELS, 3)):
            x = conv(fan_in, kernel)(keras.layers.ZeroPadding1D(1)(x))
        logits = dense(CLASSES, 5 * CHANNELS)(keras.layers.Flatten()(x))
    elif model == "gru":
        x = keras.layers.Reshape((LENGTH, 1))(signal)
        init = uniform(GRU_UNITS)
        gru = keras.layers.GRU(
            GRU_UNITS,
            return_sequences=True,
            kernel_initializer=init,
            recurrent_initializer=init,
            bias_initializer=init,
        )
        x = keras.layers.Bidirectional(gru)(x)
        logits = dense(CLASSES, LENGTH * 2 * GRU_UNITS)(keras.layers.Flatten()(x))
    else:
        msg = f"'model' must be one of logistic, mlp, cnn, gru; got {model!r}"
        raise ValueError(msg)
    return keras.Model(signal, logits, name=model)


def train(model: str, split: Split, recipe: Recipe, seed: int, data: str) -> RunResult:
    """Train `model` with ``fit`` for ``recipe.steps`` steps, validating every ``eval_every``."""
    start = time.perf_counter()
    keras.utils.set_random_seed(seed)
    net = build(model)
    net.compile(
        optimizer=keras.optimizers.Adam(recipe.learning_rate, epsilon=recipe.epsilon),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = net.fit(
        split.x,
        split.y,
        batch_size=BATCH_SIZE,
        epochs=recipe.passes,
        shuffle=False,
        validation_data=(split.x_test, split.y_test),
        validation_batch_size=len(split.x_test),
        validation_freq=recipe.eval_every // BATCHES_PER_PASS,
        verbose=0,
    )
    seconds = time.perf_counter() - start
    curve = [100.0 * a for a in history.history["val_accuracy"]]
    return RunResult(
        framework="keras", model=model, data=data, seed=seed, curve=curve, seconds=seconds
    )
