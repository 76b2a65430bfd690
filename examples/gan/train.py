"""A trainer composed from primitives: a two-cost, GAN-style trainer on synthetic 2-D data.

``SimpleTrainer`` minimizes one cost. A GAN has two players: a discriminator that
tells real points from generated ones, and a generator that tries to fool it. Its
trainer, written here from towerkit's parts, shows what a custom trainer needs:

- subclass ``TowerTrainer`` and build the graph in the trainer's graph: the input
  source, one ``TowerFunc`` that builds the model and returns both costs (called in a
  training ``TowerContext``), one optimizer step per cost, each restricted to its
  player's variables, and a second ``TowerFunc`` that samples from the generator in an
  inference tower;
- override ``run_step``: one discriminator step, then one generator step, each through
  ``hooked_sess.run`` so callbacks see every run (the global step counts both);
- train with ``train_with_defaults``: default callbacks and monitors, plus a
  ``ModelSaver`` and a callback of its own that measures how far the generated
  distribution is from the real one after every epoch.

The real data are points of a 2-D Gaussian (mean ``(2, -1)``); the generator maps
standard normal noise to points. Usage::

    python examples/gan/train.py [--logdir train_log/gan] [--epochs 8] [--steps 200]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

VERBOSE = "-v" in sys.argv[1:] or "--verbose" in sys.argv[1:]
"""Whether TensorFlow's start-up lines are shown (hidden by default, as the tools hide them)."""

from towerkit.tools import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly(verbose=VERBOSE)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from towerkit.callbacks import Callback, ModelSaver  # noqa: E402
from towerkit.towers import (  # noqa: E402
    OnlinePredictor,
    TowerContext,
    TowerFunc,
    add_moving_summary,
    build_placeholders,
)
from towerkit.trainers import NumpyInput, TowerTrainer  # noqa: E402

tf1 = tf.compat.v1

SEED = 0
REAL_MEAN = np.array([2.0, -1.0], dtype=np.float32)
REAL_STD = np.array([0.5, 0.25], dtype=np.float32)
"""The real distribution: independent normals with these means and standard deviations."""

BATCH_SIZE = 64
HIDDEN = 32


def real_points(n: int, seed: int = SEED) -> np.ndarray:
    """`n` points of the real distribution, shape (n, 2)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 2)) * REAL_STD + REAL_MEAN).astype(np.float32)


def noise(n: int, seed: int = SEED + 1) -> np.ndarray:
    """`n` standard normal noise vectors, shape (n, 2)."""
    return np.random.default_rng(seed).standard_normal((n, 2)).astype(np.float32)


def _dense(x: tf.Tensor, size: int, name: str, seed: int) -> tf.Tensor:
    with tf1.variable_scope(name):
        w = tf1.get_variable(
            "W", [x.shape[-1], size], initializer=tf1.glorot_uniform_initializer(seed=seed)
        )
        b = tf1.get_variable("b", [size], initializer=tf1.zeros_initializer())
        return tf.matmul(x, w) + b


class GANModel:
    """A generator and a discriminator, two small MLPs, and the two costs."""

    def inputs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec((None, 2), tf.float32, "real"),
            tf.TensorSpec((None, 2), tf.float32, "noise"),
        ]

    def generator(self, z: tf.Tensor) -> tf.Tensor:
        """Noise (n, 2) to points (n, 2); variables under ``gen/``."""
        with tf1.variable_scope("gen", reuse=tf1.AUTO_REUSE):
            h = tf.nn.relu(_dense(z, HIDDEN, "fc0", SEED + 10))
            h = tf.nn.relu(_dense(h, HIDDEN, "fc1", SEED + 11))
            return tf.identity(_dense(h, 2, "out", SEED + 12), name="sample")

    def discriminator(self, x: tf.Tensor) -> tf.Tensor:
        """Points (n, 2) to logits (n,) of "real"; variables under ``discrim/``."""
        with tf1.variable_scope("discrim", reuse=tf1.AUTO_REUSE):
            h = tf.nn.leaky_relu(_dense(x, HIDDEN, "fc0", SEED + 20))
            h = tf.nn.leaky_relu(_dense(h, HIDDEN, "fc1", SEED + 21))
            return tf.squeeze(_dense(h, 1, "out", SEED + 22), axis=1)

    def build_graph(self, real: tf.Tensor, z: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Both costs: the discriminator's and the (non-saturating) generator's."""
        fake = self.generator(z)
        logit_real = self.discriminator(real)
        logit_fake = self.discriminator(fake)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        d_loss = tf.add(
            tf.reduce_mean(xent(labels=tf.ones_like(logit_real), logits=logit_real)),
            tf.reduce_mean(xent(labels=tf.zeros_like(logit_fake), logits=logit_fake)),
            name="d_loss",
        )
        g_loss = tf.reduce_mean(
            xent(labels=tf.ones_like(logit_fake), logits=logit_fake), name="g_loss"
        )
        add_moving_summary(d_loss, g_loss)
        return d_loss, g_loss

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.AdamOptimizer(2e-3, beta1=0.5)


class GANTrainer(TowerTrainer):
    """Alternate one discriminator step and one generator step, each a hooked run.

    Args:
        input: an input source of ``(real, noise)`` batches.
        model: a `GANModel` (``inputs``, ``build_graph`` returning both costs,
            ``generator``, ``optimizer``).
    """

    def __init__(self, input: Any, model: GANModel) -> None:
        super().__init__()
        self.model = model
        self.tower_func = TowerFunc(model.build_graph, model.inputs())
        self.sampler_func = TowerFunc(model.generator, model.inputs()[1:])
        with self.graph.as_default():
            self.register_callback(input.setup(self.tower_func.input_signature))
            with TowerContext("", is_training=True):
                d_loss, g_loss = self.tower_func(*input.get_input_tensors())
            d_vars = tf1.trainable_variables("discrim/")
            g_vars = tf1.trainable_variables("gen/")
            opt = model.optimizer()
            self.d_min = opt.minimize(d_loss, var_list=d_vars, name="d_min")
            self.g_min = opt.minimize(g_loss, var_list=g_vars, name="g_min")
            with TowerContext("sampler", is_training=False):
                (z,) = build_placeholders(self.sampler_func.input_signature)
                sample = self.sampler_func(z)
        self.sampler = OnlinePredictor([z], [sample])
        """noise (n, 2) -> generated points (n, 2), in the trainer's session."""

    def run_step(self) -> None:
        """One discriminator step, then one generator step (two global steps)."""
        self.hooked_sess.run(self.d_min)
        self.hooked_sess.run(self.g_min)


class DistributionGap(Callback):
    """After each epoch, put how far generated points are from the real distribution.

    ``mean_gap`` is the distance between the means of 2,000 generated points and
    of the real distribution, ``std_gap`` the largest difference of standard deviations.
    """

    def __init__(self, samples: int = 2000) -> None:
        self._z = noise(samples, seed=SEED + 2)

    def _trigger(self) -> None:
        (points,) = self.trainer.sampler(self._z)
        mean_gap = float(np.linalg.norm(points.mean(axis=0) - REAL_MEAN))
        std_gap = float(np.abs(points.std(axis=0) - REAL_STD).max())
        self.trainer.monitors.put_scalar("mean_gap", mean_gap)
        self.trainer.monitors.put_scalar("std_gap", std_gap)


def train(logdir: str, epochs: int, steps: int, overwrite: bool = False) -> GANTrainer:
    """Train the GAN for `epochs` epochs of `steps` steps; return the trainer."""
    n = BATCH_SIZE * steps
    source = NumpyInput([real_points(n), noise(n)], batch_size=BATCH_SIZE, seed=SEED)
    trainer = GANTrainer(source, GANModel())
    trainer.train_with_defaults(
        callbacks=[ModelSaver(max_to_keep=2), DistributionGap()],
        steps_per_epoch=steps,
        max_epoch=epochs,
        logdir=logdir,
        logdir_action="overwrite" if overwrite else "error",
    )
    return trainer


def main(argv: Sequence[str] | None = None) -> int:
    """Train, then print the generated distribution next to the real one."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show TensorFlow's start-up lines"
    )
    parser.add_argument("--logdir", default=os.path.join("train_log", "gan"))
    parser.add_argument("--epochs", type=int, default=8, help="epochs (default 8)")
    parser.add_argument("--steps", type=int, default=200, help="steps per epoch (default 200)")
    parser.add_argument("--overwrite", action="store_true", help="move an existing logdir aside")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.steps < 1:
        parser.error("--epochs and --steps must be >= 1")
    logging.getLogger("towerkit").setLevel(logging.INFO)
    logging.getLogger("towerkit").addHandler(logging.StreamHandler())
    tf.get_logger().setLevel(logging.ERROR)
    trainer = train(os.path.abspath(args.logdir), args.epochs, args.steps, args.overwrite)
    history = trainer.monitors.get_history("mean_gap")
    print(f"global step {trainer.global_step} after {args.epochs} epochs of {args.steps} steps")
    print("mean gap per epoch: " + " ".join(f"{v:.3f}" for _, v in history))
    print(f"real mean {REAL_MEAN.tolist()}, std {REAL_STD.tolist()}")
    print(f"last std gap {trainer.monitors.get_latest('std_gap'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
