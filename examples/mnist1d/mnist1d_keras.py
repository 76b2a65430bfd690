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


def uniform(fan_in: int, init: str, *names: str) -> dict[str, Any]:
    """The initializer arguments `names` of a layer with `fan_in` inputs, under ``Recipe.init``.

    ``paper``: PyTorch's default start, uniform in ±1/sqrt(fan_in), for each of `names`;
    ``own``: none (Keras's defaults).
    """
    if init == "own":
        return {}
    bound = 1.0 / math.sqrt(fan_in)
    return {name: keras.initializers.RandomUniform(-bound, bound) for name in names}


WEIGHTS = ("kernel_initializer", "bias_initializer")


def dense(units: int, fan_in: int, init: str, activation: str | None = None) -> Any:
    return keras.layers.Dense(units, activation=activation, **uniform(fan_in, init, *WEIGHTS))


def conv(fan_in: int, kernel: int, init: str) -> Any:
    return keras.layers.Conv1D(
        CHANNELS, kernel, strides=2, activation="relu", **uniform(fan_in * kernel, init, *WEIGHTS)
    )


def build(model: str, init: str = "paper") -> Any:
    """The Keras model called `model` (one of the recipe's ``MODELS``), outputting logits."""
    signal = keras.Input((LENGTH,), name="signal")
    if model == "logistic":
        logits = dense(CLASSES, LENGTH, init)(signal)
    elif model == "mlp":
        h = dense(HIDDEN, LENGTH, init, "relu")(signal)
        h = keras.layers.Add()([h, dense(HIDDEN, HIDDEN, init, "relu")(h)])
        logits = dense(CLASSES, HIDDEN, init)(h)
    elif model == "cnn":
        x = keras.layers.Reshape((LENGTH, 1))(signal)
        for fan_in, kernel in ((1, 5), (CHANNELS, 3), (CHANNELS, 3)):
            x = conv(fan_in, kernel, init)(keras.layers.ZeroPadding1D(1)(x))
        logits = dense(CLASSES, 5 * CHANNELS, init)(keras.layers.Flatten()(x))
    elif model == "gru":
        x = keras.layers.Reshape((LENGTH, 1))(signal)
        starts = uniform(GRU_UNITS, init, *WEIGHTS, "recurrent_initializer")
        gru = keras.layers.GRU(GRU_UNITS, return_sequences=True, **starts)
        x = keras.layers.Bidirectional(gru)(x)
        logits = dense(CLASSES, LENGTH * 2 * GRU_UNITS, init)(keras.layers.Flatten()(x))
    else:
        msg = f"'model' must be one of logistic, mlp, cnn, gru; got {model!r}"
        raise ValueError(msg)
    return keras.Model(signal, logits, name=model)


def train(model: str, split: Split, recipe: Recipe, seed: int, data: str) -> RunResult:
    """Train `model` with ``fit`` for ``recipe.steps`` steps, validating every ``eval_every``."""
    start = time.perf_counter()
    keras.utils.set_random_seed(seed)
    net = build(model, recipe.init)
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
