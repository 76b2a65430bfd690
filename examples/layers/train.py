"""A model built with graph-mode layers and argscope, trained on several towers, then exported.

The way a tensorpack user writes models: ``tf.compat.v1.layers`` (``conv2d``,
``batch_normalization``, ``dense``, from tf-keras: ``pip install
'towerkit-towers[layers]'``) with shared defaults set by ``argscope``. The model
classifies scikit-learn's 8x8 digits; the first convolution can be frozen
(``freeze_variables``) to show that variable tools apply to these layers.

It trains on 2 towers with ``SyncMultiGPUTrainerReplicated`` by default (GPUs when
visible, logical CPU devices otherwise; batch-norm statistics are updated by the
first tower and copied to the others), or with ``--trainer ps``, ``async`` or
``simple``. The checkpoint then loads into a one-tower ``OfflinePredictor`` and is
exported as a compact graph and a SavedModel. Usage::

    python examples/layers/train.py [--trainer replicated] [--epochs 4] [--steps 50]
        [--logdir train_log/layers] [--freeze]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

VERBOSE = "-v" in sys.argv[1:] or "--verbose" in sys.argv[1:]
"""Whether TensorFlow's start-up lines are shown (hidden by default, as the tools hide them)."""

from towerkit.tools import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly(verbose=VERBOSE)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from towerkit.callbacks import ModelSaver  # noqa: E402
from towerkit.export import ModelExporter, OfflinePredictor, PredictConfig  # noqa: E402
from towerkit.sessinit import SmartInit  # noqa: E402
from towerkit.towers import (  # noqa: E402
    add_moving_summary,
    argscope,
    enable_argscope_for_module,
    enable_tf_layers,
    freeze_variables,
    get_current_tower_context,
)
from towerkit.trainers import (  # noqa: E402
    AsyncMultiGPUTrainer,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
    TrainConfig,
    launch_train_with_config,
)

enable_tf_layers()  # tf.compat.v1.layers from tf-keras; tf.keras stays as it was
tf1 = tf.compat.v1
layers = tf1.layers
enable_argscope_for_module(layers)

SEED = 0
BATCH_SIZE = 64
"""Per tower."""
TRAINERS = ("replicated", "ps", "async", "simple")


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits as (train images, train labels, validation images, validation labels)."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(SEED).permutation(len(images))
    images, labels = images[order], labels[order]
    return images[:1400], labels[:1400], images[1400:], labels[1400:]


class LayersModel(ModelDesc):
    """conv 3x3x16 - BN - relu - max-pool, conv 3x3x32 - BN - relu, dense 10.

    Args:
        freeze_first: build the first convolution under ``freeze_variables``
            (not trained, no gradient through it).
    """

    def __init__(self, freeze_first: bool = False) -> None:
        self.freeze_first = freeze_first

    def inputs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec((None, 8, 8, 1), tf.float32, "image"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, image: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        ctx = get_current_tower_context()
        training = bool(ctx is not None and ctx.is_training)
        init = tf1.glorot_uniform_initializer(seed=SEED)
        with (
            argscope([layers.conv2d], kernel_size=3, padding="same", kernel_initializer=init),
            argscope([layers.batch_normalization], training=training, momentum=0.9),
        ):
            if self.freeze_first:
                with freeze_variables(stop_gradient=True, skip_collection=True):
                    x = layers.conv2d(image, filters=16, name="conv0")
            else:
                x = layers.conv2d(image, filters=16, name="conv0")
            x = tf.nn.relu(layers.batch_normalization(x, name="bn0"))
            x = layers.max_pooling2d(x, 2, 2, name="pool0")
            x = layers.conv2d(x, filters=32, name="conv1")
            x = tf.nn.relu(layers.batch_normalization(x, name="bn1"))
        logits = layers.dense(layers.flatten(x), 10, kernel_initializer=init, name="fc")
        tf.nn.softmax(logits, name="prob")
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
            name="cross_entropy_loss",
        )
        wrong = tf.cast(
            tf.logical_not(tf.nn.in_top_k(targets=label, predictions=logits, k=1)), tf.float32
        )
        add_moving_summary(cost, tf.reduce_mean(wrong, name="train_error"))
        return cost

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.AdamOptimizer(3e-3)


def make_trainer(name: str, towers: int = 2) -> Any:
    """The trainer called `name` (one of `TRAINERS`) on `towers` towers."""
    if name == "replicated":
        return SyncMultiGPUTrainerReplicated(towers)
    if name == "ps":
        return SyncMultiGPUTrainerParameterServer(towers, ps_device="gpu")
    if name == "async":
        return AsyncMultiGPUTrainer(towers)
    if name == "simple":
        return SimpleTrainer()
    msg = f"'trainer' must be one of {TRAINERS}; got {name!r}"
    raise ValueError(msg)


def train(
    logdir: str,
    trainer: str | Callable[[], Any] = "replicated",
    epochs: int = 4,
    steps: int = 50,
    freeze_first: bool = False,
    overwrite: bool = False,
) -> tuple[Any, str]:
    """Train; return the trainer and the path of the last checkpoint.

    `trainer` is one of `TRAINERS` by name, or a function of no argument that makes
    the trainer (called inside the run's graph, which a trainer belongs to): e.g.
    ``HorovodTrainer``, or a distributed trainer on this process's server.
    """
    x_train, y_train, _, _ = load_data()
    with tf.Graph().as_default():
        config = TrainConfig(
            model=LayersModel(freeze_first),
            data=NumpyInput([x_train, y_train], batch_size=BATCH_SIZE, shuffle=True, seed=SEED),
            callbacks=[ModelSaver(max_to_keep=1)],
            steps_per_epoch=steps,
            max_epoch=epochs,
            logdir=logdir,
            logdir_action="overwrite" if overwrite else "error",
        )
        used = make_trainer(trainer) if isinstance(trainer, str) else trainer()
        launch_train_with_config(config, used)
    return used, os.path.join(logdir, f"model-{epochs * steps}")


def predictor(checkpoint: str) -> OfflinePredictor:
    """A one-tower predictor ``image -> prob`` from `checkpoint`, whatever trained it."""
    return OfflinePredictor(
        PredictConfig(
            model=LayersModel(),
            session_init=SmartInit(checkpoint),
            input_names=["image"],
            output_names=["prob"],
        )
    )


def export(checkpoint: str, out: str) -> tuple[str, str]:
    """Export `checkpoint` as a compact frozen graph and a SavedModel under `out`."""
    exporter = ModelExporter(
        PredictConfig(
            model=LayersModel(),
            session_init=SmartInit(checkpoint),
            input_names=["image"],
            output_names=["prob"],
        )
    )
    os.makedirs(out, exist_ok=True)
    compact = exporter.export_compact(os.path.join(out, "layers.pb"), overwrite=True)
    serving = exporter.export_serving(os.path.join(out, "saved_model"), overwrite=True)
    return compact, serving


def main(argv: Sequence[str] | None = None) -> int:
    """Train, predict the validation set with one tower, export."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show TensorFlow's start-up lines"
    )
    parser.add_argument("--logdir", default=os.path.join("train_log", "layers"))
    parser.add_argument("--trainer", choices=TRAINERS, default="replicated")
    parser.add_argument("--epochs", type=int, default=4, help="epochs (default 4)")
    parser.add_argument("--steps", type=int, default=50, help="steps per epoch (default 50)")
    parser.add_argument("--freeze", action="store_true", help="freeze the first convolution")
    parser.add_argument("--overwrite", action="store_true", help="move an existing logdir aside")
    args = parser.parse_args(argv)
    if min(args.epochs, args.steps) < 1:
        parser.error("--epochs and --steps must be >= 1")
    logging.getLogger("towerkit").setLevel(logging.INFO)
    logging.getLogger("towerkit").addHandler(logging.StreamHandler())
    tf.get_logger().setLevel(logging.ERROR)
    logdir = os.path.abspath(args.logdir)
    _, checkpoint = train(
        logdir, args.trainer, args.epochs, args.steps, args.freeze, args.overwrite
    )
    _, _, x_val, y_val = load_data()
    (prob,) = predictor(checkpoint)(x_val)
    print(f"validation error (one tower): {float(np.mean(prob.argmax(axis=1) != y_val)):.3f}")
    compact, serving = export(checkpoint, os.path.join(logdir, "export"))
    print(f"exported {compact} and {serving}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
