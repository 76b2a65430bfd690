"""Models written the way a tensorpack user writes them, with ``towerkit.layers``.

Three small models, each trained on several towers and then loaded into a one-tower
predictor and exported:

- ``convnet``: a batch-norm convnet on scikit-learn's 8x8 digits, written with
  ``argscope``, ``LinearWrap``, ``BNReLU`` as an activation, ``Dropout`` and an L2
  weight decay on every ``W`` (``regularize_cost``), whose feature map's rows an LSTM
  reads in order (``towerkit.layers.rnn``, TensorFlow 1's ``rnn/lstm_cell`` names);
- ``resnet``: a residual block (``BNReLU``, a shortcut, ``GlobalAvgPooling``) whose
  ``BatchNorm`` layers can synchronize their batch statistics across the towers
  (``--sync nccl`` on GPUs, ``--sync horovod`` under horovod);
- ``gan``: a small DCGAN-like pair on the digits: a generator of ``FullyConnected``,
  ``BatchNorm`` and ``Conv2DTranspose``, a discriminator of ``Conv2D`` with leaky
  ReLU. Both players train in one cost, so any single-cost trainer trains them: the
  discriminator's cost sees the generated images through ``tf.stop_gradient``, and
  the generator's cost sees the discriminator through ``freeze_variables`` (its
  variables are constants there), so each player gets the gradient of its own cost.

The variables have the names tensorpack gives the same layers (``conv0/W``,
``conv0/bn/mean/EMA``, ``gen/deconv0/W``...), whichever trainer trained them. Usage::

    python examples/tp_style/train.py [--model convnet|resnet|gan] [--trainer replicated]
        [--epochs 2] [--steps 30] [--logdir train_log/tp_style]
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
from towerkit.layers import (  # noqa: E402
    BatchNorm,
    BNReLU,
    Conv2D,
    Conv2DTranspose,
    FullyConnected,
    GlobalAvgPooling,
    LinearWrap,
    MaxPooling,
    l2_regularizer,
    regularize_cost,
    rnn,
)
from towerkit.towers import add_moving_summary, argscope, freeze_variables  # noqa: E402
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

tf1 = tf.compat.v1

SEED = 0
BATCH_SIZE = 32
"""Per tower."""
NOISE = 16
"""The generator's noise size."""
TRAINERS = ("replicated", "ps", "async", "simple")


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits in [-1, 1] as (train images, train labels, validation images, validation labels)."""
    digits = load_digits()
    images = (digits.images / 8.0 - 1.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(SEED).permutation(len(images))
    images, labels = images[order], labels[order]
    return images[:1400], labels[:1400], images[1400:], labels[1400:]


def noise(n: int, seed: int = SEED + 1) -> np.ndarray:
    """`n` standard normal noise vectors, shape (n, NOISE)."""
    return np.random.default_rng(seed).standard_normal((n, NOISE)).astype(np.float32)


def _initializer() -> Any:
    """A seeded kernel initializer, so a model starts from the same values in every graph."""
    return tf1.variance_scaling_initializer(2.0, seed=SEED)


def leaky_relu(x: tf.Tensor, name: str | None = None) -> tf.Tensor:
    """``max(x, 0.2 x)``: the discriminator's non-linearity."""
    return tf.maximum(x, 0.2 * x, name=name)


def _classification_cost(logits: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
    """Cross-entropy, with ``prob`` (softmax) and a moving ``train_error`` summary."""
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


class ConvNetModel(ModelDesc):
    """conv 3x3x16 (BN-ReLU) - max-pool - conv 3x3x32 - BN - ReLU - dropout - LSTM 32 over
    the 4 rows - fc 10 on its last state, L2 on W."""

    def inputs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec((None, 8, 8, 1), tf.float32, "image"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, image: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        with (
            argscope([Conv2D, FullyConnected], kernel_initializer=_initializer()),
            argscope(Conv2D, kernel_size=3, activation=BNReLU, use_bias=False),
        ):
            features = (
                LinearWrap(image)
                .Conv2D("conv0", 16)
                .MaxPooling("pool0", 2)
                .Conv2D("conv1", 32, activation=None)
                .BatchNorm("bn")
                .apply(tf.nn.relu)
                .Dropout("drop", rate=0.25)()
            )
            rows = tf.reshape(features, [-1, 4, 4 * 32])  # [batch, time = row, depth]
            _, state = rnn.dynamic_rnn(rnn.LSTMCell(32), rows, dtype=tf.float32)
            logits = FullyConnected("fc", state.h, 10)
        cost = _classification_cost(logits, label)
        wd_cost = regularize_cost(".*/W", l2_regularizer(1e-4), name="wd_cost")
        add_moving_summary(wd_cost)
        return tf.add_n([cost, wd_cost], name="cost")

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.AdamOptimizer(3e-3)


class ResNetModel(ModelDesc):
    """conv 3x3x16 (BN-ReLU), one residual block of two 3x3x16 convolutions, GAP, fc 10.

    Args:
        sync: the ``sync_statistics`` of every ``BatchNorm`` (None: each tower
            normalizes with its own batch's statistics).
    """

    def __init__(self, sync: str | None = None) -> None:
        self.sync = sync

    def inputs(self) -> list[tf.TensorSpec]:
        return ConvNetModel().inputs()

    def build_graph(self, image: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        with (
            argscope([Conv2D, FullyConnected], kernel_initializer=_initializer()),
            argscope(Conv2D, kernel_size=3, use_bias=False),
            argscope([Conv2D, BatchNorm, MaxPooling, GlobalAvgPooling], data_format="NHWC"),
            argscope(BatchNorm, sync_statistics=self.sync),
        ):
            x = Conv2D("conv0", image, 16, activation=BNReLU)
            with tf1.variable_scope("res"):
                y = Conv2D("conv1", x, 16, activation=BNReLU)
                y = Conv2D("conv2", y, 16)
                y = BatchNorm("bn", y)
            x = tf.nn.relu(x + y, name="block_output")
            x = GlobalAvgPooling("gap", x)
            logits = FullyConnected("linear", x, 10)
        return _classification_cost(logits, label)

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.AdamOptimizer(1e-2)


class GANModel(ModelDesc):
    """Generator: fc 2x2x32 (BN-ReLU), deconv 4x4x16 stride 2 (BN-ReLU), deconv 4x4x1 stride 2,
    tanh; discriminator: conv 4x4x16 stride 2, conv 4x4x32 stride 2 (leaky ReLU), fc 1."""

    def inputs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec((None, 8, 8, 1), tf.float32, "image"),
            tf.TensorSpec((None, NOISE), tf.float32, "noise"),
        ]

    def generator(self, z: tf.Tensor) -> tf.Tensor:
        """Noise (n, NOISE) to images (n, 8, 8, 1) in [-1, 1]; variables under ``gen/``."""
        with (
            tf1.variable_scope("gen"),
            argscope([FullyConnected, Conv2DTranspose], kernel_initializer=_initializer()),
            argscope(Conv2DTranspose, kernel_size=4, strides=2),
        ):
            x = FullyConnected("fc", z, 2 * 2 * 32, use_bias=False)
            x = BNReLU(tf.reshape(x, [-1, 2, 2, 32]))
            x = Conv2DTranspose("deconv0", x, 16, activation=BNReLU, use_bias=False)
            x = Conv2DTranspose("deconv1", x, 1, activation=tf.tanh)
        return tf.identity(x, name="sample")

    def discriminator(self, x: tf.Tensor) -> tf.Tensor:
        """Images to logits (n,) of "real"; variables under ``discrim/``."""
        with (
            argscope([Conv2D, FullyConnected], kernel_initializer=_initializer()),
            argscope(Conv2D, kernel_size=4, strides=2, activation=leaky_relu),
        ):
            logits = LinearWrap(x).Conv2D("conv0", 16).Conv2D("conv1", 32).FullyConnected("fc", 1)()
        return tf.squeeze(logits, axis=1)

    def build_graph(self, image: tf.Tensor, z: tf.Tensor) -> tf.Tensor:
        """The sum of both players' costs, each reaching its own player's variables only."""
        fake = self.generator(z)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        with tf1.variable_scope("discrim"):
            both = self.discriminator(tf.concat([image, tf.stop_gradient(fake)], 0))
        logit_real, logit_fake = tf.split(both, 2)
        d_loss = tf.add(
            tf.reduce_mean(xent(labels=tf.ones_like(logit_real), logits=logit_real)),
            tf.reduce_mean(xent(labels=tf.zeros_like(logit_fake), logits=logit_fake)),
            name="d_loss",
        )
        with tf1.variable_scope("discrim", reuse=True), freeze_variables(stop_gradient=True):
            logit_gen = self.discriminator(fake)
        g_loss = tf.reduce_mean(
            xent(labels=tf.ones_like(logit_gen), logits=logit_gen), name="g_loss"
        )
        add_moving_summary(d_loss, g_loss)
        return tf.add(d_loss, g_loss, name="cost")

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.AdamOptimizer(2e-3, beta1=0.5)


MODELS: dict[str, Callable[[], ModelDesc]] = {
    "convnet": ConvNetModel,
    "resnet": ResNetModel,
    "gan": GANModel,
}
"""Model name -> a function of no argument that makes it."""

PREDICTION = {
    "convnet": (["image"], ["prob"]),
    "resnet": (["image"], ["prob"]),
    "gan": (["noise"], ["sample"]),
}
"""Model name -> the input and output names of its predictor and exports."""

COST = {"convnet": "cross_entropy_loss", "resnet": "cross_entropy_loss", "gan": "d_loss"}
"""Model name -> the cost that falls as it trains (the discriminator's for the GAN)."""


def make_model(name: str, sync: str | None = None) -> ModelDesc:
    """The model called `name` (one of `MODELS`); `sync` applies to ``resnet`` only."""
    if name not in MODELS:
        msg = f"'model' must be one of {sorted(MODELS)}; got {name!r}"
        raise ValueError(msg)
    return ResNetModel(sync) if name == "resnet" else MODELS[name]()


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


def training_arrays(model: str) -> list[np.ndarray]:
    """The arrays `model` trains on, in the order of its inputs."""
    x_train, y_train, _, _ = load_data()
    if model == "gan":
        return [x_train, noise(len(x_train))]
    return [x_train, y_train]


def train(
    logdir: str,
    trainer: str | Callable[[], Any] = "replicated",
    epochs: int = 2,
    steps: int = 30,
    model: str = "convnet",
    sync: str | None = None,
    overwrite: bool = False,
) -> tuple[Any, str]:
    """Train `model`; return the trainer and the path of the last checkpoint.

    `trainer` is one of `TRAINERS` by name, or a function of no argument that makes
    the trainer (called inside the run's graph): e.g. ``HorovodTrainer``, or a
    distributed trainer on this process's server.
    """
    arrays = training_arrays(model)
    with tf.Graph().as_default():
        config = TrainConfig(
            model=make_model(model, sync),
            data=NumpyInput(arrays, batch_size=BATCH_SIZE, shuffle=True, seed=SEED),
            callbacks=[ModelSaver(max_to_keep=1)],
            steps_per_epoch=steps,
            max_epoch=epochs,
            logdir=logdir,
            logdir_action="overwrite" if overwrite else "error",
        )
        used = make_trainer(trainer) if isinstance(trainer, str) else trainer()
        launch_train_with_config(config, used)
    return used, os.path.join(logdir, f"model-{epochs * steps}")


def predict_config(model: str, session_init: Any, outputs: Sequence[str] | None = None) -> Any:
    """A one-tower `PredictConfig` of `model` (its prediction inputs and outputs by default)."""
    inputs, default_outputs = PREDICTION[model]
    if outputs is not None:
        inputs = [t.name for t in make_model(model).inputs()]
    return PredictConfig(
        model=make_model(model),
        session_init=session_init,
        input_names=inputs,
        output_names=list(default_outputs if outputs is None else outputs),
    )


def predictor(checkpoint: str, model: str = "convnet") -> OfflinePredictor:
    """A one-tower predictor (``image -> prob``, or ``noise -> sample``) from `checkpoint`."""
    from towerkit.sessinit import SmartInit

    return OfflinePredictor(predict_config(model, SmartInit(checkpoint)))


def export(checkpoint: str, out: str, model: str = "convnet") -> tuple[str, str]:
    """Export `checkpoint` as a compact frozen graph and a SavedModel under `out`."""
    from towerkit.sessinit import SmartInit

    exporter = ModelExporter(predict_config(model, SmartInit(checkpoint)))
    os.makedirs(out, exist_ok=True)
    compact = exporter.export_compact(os.path.join(out, f"{model}.pb"), overwrite=True)
    serving = exporter.export_serving(os.path.join(out, "saved_model"), overwrite=True)
    return compact, serving


def main(argv: Sequence[str] | None = None) -> int:
    """Train, predict with one tower, export."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show TensorFlow's start-up lines"
    )
    parser.add_argument("--logdir", default=os.path.join("train_log", "tp_style"))
    parser.add_argument("--model", choices=sorted(MODELS), default="convnet")
    parser.add_argument("--trainer", choices=TRAINERS, default="replicated")
    parser.add_argument("--sync", choices=["nccl", "horovod"], default=None)
    parser.add_argument("--epochs", type=int, default=2, help="epochs (default 2)")
    parser.add_argument("--steps", type=int, default=30, help="steps per epoch (default 30)")
    parser.add_argument("--overwrite", action="store_true", help="move an existing logdir aside")
    args = parser.parse_args(argv)
    if min(args.epochs, args.steps) < 1:
        parser.error("--epochs and --steps must be >= 1")
    logging.getLogger("towerkit").setLevel(logging.INFO)
    logging.getLogger("towerkit").addHandler(logging.StreamHandler())
    tf.get_logger().setLevel(logging.ERROR)
    logdir = os.path.abspath(args.logdir)
    _, checkpoint = train(
        logdir, args.trainer, args.epochs, args.steps, args.model, args.sync, args.overwrite
    )
    _, _, x_val, y_val = load_data()
    if args.model == "gan":
        (sample,) = predictor(checkpoint, "gan")(noise(len(x_val), SEED + 2))
        print(f"generated images: mean {sample.mean():.3f}, real mean {x_val.mean():.3f}")
    else:
        (prob,) = predictor(checkpoint, args.model)(x_val)
        print(f"validation error (one tower): {float(np.mean(prob.argmax(1) != y_val)):.3f}")
    compact, serving = export(checkpoint, os.path.join(logdir, "export"), args.model)
    print(f"exported {compact} and {serving}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
