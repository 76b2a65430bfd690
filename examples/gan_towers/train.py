"""A custom multi-device trainer: a two-cost GAN trainer on several towers, built from public parts.

The single-device GAN example (``examples/gan``) alternates a discriminator step and
a generator step. This one runs each step on several towers at once (2 by default),
one batch per tower, the way the multi-GPU trainers do, but with two costs, which
``SyncMultiGPUTrainerReplicated`` (one cost) cannot train. It is assembled from
``towerkit.trainers``' data-parallel building blocks:

- ``DataParallelBuilder.call_for_each_tower`` builds one training tower per device
  (GPUs when visible, logical CPU devices ``/cpu:k`` otherwise, from
  ``resolve_devices``); each tower returns the gradients of both costs;
- ``--mode replicated`` (the default): every tower has its own copy of the variables
  (``use_vs``), ``allreduce_grads`` gives every tower the mean gradient, each tower
  applies it to its copy; ``make_replicas_local`` keeps the copies out of
  checkpoints, ``sync_replicas_op`` makes them equal at the start;
- ``--mode ps``: the towers share one copy, spread over the devices by
  ``LeastLoadedDeviceSetter``; ``aggregate_grads`` averages the towers' gradients.

After each epoch the ``ReplicaGap`` callback puts the largest difference between
tower 0's variables and the other towers' copies (0 when they stayed in sync), and
``DistributionGap`` how far the generated points are from the real ones. Usage::

    python examples/gan_towers/train.py [--towers 2] [--mode replicated|ps]
        [--logdir train_log/gan_towers] [--epochs 8] [--steps 100]
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

from towerkit.callbacks import Callback, ModelSaver, RunOp  # noqa: E402
from towerkit.towers import (  # noqa: E402
    OnlinePredictor,
    TowerContext,
    TowerFunc,
    add_moving_summary,
    build_placeholders,
    get_current_tower_context,
)
from towerkit.trainers import (  # noqa: E402
    DataParallelBuilder,
    LeastLoadedDeviceSetter,
    NumpyInput,
    TowerTrainer,
    aggregate_grads,
    allreduce_grads,
    make_replicas_local,
    session_creator_for_devices,
    sync_replicas_op,
)

tf1 = tf.compat.v1

SEED = 0
REAL_MEAN = np.array([2.0, -1.0], dtype=np.float32)
REAL_STD = np.array([0.5, 0.25], dtype=np.float32)
"""The real distribution: independent normals with these means and standard deviations."""

BATCH_SIZE = 32
"""Per tower: a step sees ``BATCH_SIZE * towers`` points."""
HIDDEN = 32
MODES = ("replicated", "ps")


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
        add_moving_summary(d_loss, g_loss)  # in the first tower only
        return d_loss, g_loss

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.AdamOptimizer(2e-3, beta1=0.5)


class MultiTowerGANTrainer(TowerTrainer):
    """One discriminator step, then one generator step, each on every tower at once.

    Args:
        input: an input source of ``(real, noise)`` batches; each tower takes its own.
        model: a `GANModel`.
        towers: a number of towers, or a list of GPU ids.
        mode: ``'replicated'`` (a copy of the variables per tower) or ``'ps'``
            (one shared copy, spread over the devices).
    """

    def __init__(
        self, input: Any, model: GANModel, towers: int | Sequence[int] = 2, mode: str = "replicated"
    ) -> None:
        if mode not in MODES:
            msg = f"'mode' must be one of {MODES}; got {mode!r}"
            raise ValueError(msg)
        super().__init__()
        self.mode = mode
        self.builder = DataParallelBuilder(towers)
        devices = self.builder.devices
        n = self.builder.num_towers
        self.tower_func = TowerFunc(model.build_graph, model.inputs())
        self.sampler_func = TowerFunc(model.generator, model.inputs()[1:])

        def tower() -> tuple[list[Any], list[Any]]:
            """Build this tower's model; return its gradients of both costs."""
            d_loss, g_loss = self.tower_func(*input.get_input_tensors())
            ctx = get_current_tower_context()
            own = f"{ctx.vs_name}/" if ctx is not None and ctx.vs_name else ""
            opt = model.optimizer()
            d_grads = opt.compute_gradients(
                d_loss, var_list=tf1.trainable_variables(f"{own}discrim/")
            )
            g_grads = opt.compute_gradients(g_loss, var_list=tf1.trainable_variables(f"{own}gen/"))
            return d_grads, g_grads

        with self.graph.as_default():
            input.setup(self.tower_func.input_signature)
            self.register_callback(input.get_callbacks())
            d_opt, g_opt = model.optimizer(), model.optimizer()
            if mode == "replicated":
                per_tower = DataParallelBuilder.call_for_each_tower(
                    towers, tower, use_vs=[False] + [True] * (n - 1)
                )
                d_reduced = allreduce_grads([d for d, _ in per_tower], devices, average=True)
                g_reduced = allreduce_grads([g for _, g in per_tower], devices, average=True)
                # one apply per cost, over every tower's copy: the copies stay equal
                self.d_min = d_opt.apply_gradients(
                    [p for tower_pairs in d_reduced for p in tower_pairs], name="d_min"
                )
                self.g_min = g_opt.apply_gradients(
                    [p for tower_pairs in g_reduced for p in tower_pairs], name="g_min"
                )
                self.replicas = make_replicas_local(self.graph, n)
                self.sync_op = sync_replicas_op()
                self.register_callback(RunOp(self.sync_op, run_before=True, run_as_trigger=False))
            else:
                loads = [0] * n
                setters = [LeastLoadedDeviceSetter(d, devices, loads) for d in devices]
                per_tower = DataParallelBuilder.call_for_each_tower(towers, tower, setters)
                d_avg = aggregate_grads([d for d, _ in per_tower], colocation=True)
                g_avg = aggregate_grads([g for _, g in per_tower], colocation=True)
                self.d_min = d_opt.apply_gradients(d_avg, name="d_min")
                self.g_min = g_opt.apply_gradients(g_avg, name="g_min")
                self.replicas = []
            with TowerContext("sampler", is_training=False):
                (z,) = build_placeholders(self.sampler_func.input_signature)
                sample = self.sampler_func(z)
        self.sampler = OnlinePredictor([z], [sample])
        """noise (n, 2) -> generated points (n, 2), in the trainer's session."""

    def initialize(self, session_creator: Any, session_init: Any) -> None:
        """As `Trainer.initialize`, with a session that has every tower's device."""
        super().initialize(
            session_creator_for_devices(session_creator, self.builder.devices), session_init
        )

    def run_step(self) -> None:
        """One discriminator step, then one generator step (two global steps)."""
        self.hooked_sess.run(self.d_min)
        self.hooked_sess.run(self.g_min)


class ReplicaGap(Callback):
    """After each epoch, put ``replica_gap``: the largest |tower k copy - tower 0 variable|."""

    def _setup_graph(self) -> None:
        replicas = getattr(self.trainer, "replicas", [])
        masters = {v.op.name: v for v in tf1.global_variables()}
        self._pairs = []
        for r in replicas:
            name = r.op.name.split("/", 1)[1]
            if name in masters:
                self._pairs.append((masters[name], r))

    def _trigger(self) -> None:
        gap = 0.0
        if self._pairs:
            values = self.trainer.sess.run(self._pairs)
            gap = max(float(np.max(np.abs(m - r))) for m, r in values)
        self.trainer.monitors.put_scalar("replica_gap", gap)


class DistributionGap(Callback):
    """After each epoch, put how far 2,000 generated points are from the real distribution."""

    def __init__(self, samples: int = 2000) -> None:
        self._z = noise(samples, seed=SEED + 2)

    def _trigger(self) -> None:
        (points,) = self.trainer.sampler(self._z)
        self.trainer.monitors.put_scalar(
            "mean_gap", float(np.linalg.norm(points.mean(axis=0) - REAL_MEAN))
        )


def train(
    logdir: str,
    epochs: int,
    steps: int,
    towers: int | Sequence[int] = 2,
    mode: str = "replicated",
    overwrite: bool = False,
) -> MultiTowerGANTrainer:
    """Train for `epochs` epochs of `steps` steps on `towers` towers; return the trainer."""
    n = BATCH_SIZE * steps
    source = NumpyInput([real_points(n), noise(n)], batch_size=BATCH_SIZE, seed=SEED)
    with tf.Graph().as_default():
        trainer = MultiTowerGANTrainer(source, GANModel(), towers=towers, mode=mode)
        trainer.train_with_defaults(
            callbacks=[ModelSaver(max_to_keep=2), ReplicaGap(), DistributionGap()],
            steps_per_epoch=steps,
            max_epoch=epochs,
            logdir=logdir,
            logdir_action="overwrite" if overwrite else "error",
        )
    return trainer


def main(argv: Sequence[str] | None = None) -> int:
    """Train, then print how far the copies and the generated distribution are."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show TensorFlow's start-up lines"
    )
    parser.add_argument("--logdir", default=os.path.join("train_log", "gan_towers"))
    parser.add_argument("--towers", type=int, default=2, help="towers (default 2)")
    parser.add_argument("--mode", choices=MODES, default="replicated")
    parser.add_argument("--epochs", type=int, default=8, help="epochs (default 8)")
    parser.add_argument("--steps", type=int, default=100, help="steps per epoch (default 100)")
    parser.add_argument("--overwrite", action="store_true", help="move an existing logdir aside")
    args = parser.parse_args(argv)
    if min(args.epochs, args.steps, args.towers) < 1:
        parser.error("--epochs, --steps and --towers must be >= 1")
    logging.getLogger("towerkit").setLevel(logging.INFO)
    logging.getLogger("towerkit").addHandler(logging.StreamHandler())
    tf.get_logger().setLevel(logging.ERROR)
    trainer = train(
        os.path.abspath(args.logdir),
        args.epochs,
        args.steps,
        args.towers,
        args.mode,
        args.overwrite,
    )
    gaps = trainer.monitors.get_history("mean_gap")
    print(f"{trainer.builder.num_towers} towers on {list(trainer.builder.devices)} ({args.mode})")
    print("mean gap per epoch: " + " ".join(f"{v:.3f}" for _, v in gaps))
    print(f"largest difference between copies: {trainer.monitors.get_latest('replica_gap'):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
