"""Train a small convnet on scikit-learn's handwritten digits, export it, reload it, plot it.

The data ship inside scikit-learn's wheel (1,797 grey 8x8 images of the digits 0-9),
so nothing is downloaded. The run:

1. splits the digits 60/20/20 (fixed seed, stratified) into training, validation and
   test sets;
2. trains a convnet (conv-relu-pool, conv-relu, fully connected) built from plain
   ``tf.compat.v1`` ops with ``launch_train_with_config(TrainConfig(...), SimpleTrainer())``,
   using the default callbacks and monitors plus ``ModelSaver``, an ``InferenceRunner``
   measuring ``ClassificationError`` on the validation set, ``MinSaver`` keeping the
   model with the lowest validation error and a ``ScheduledHyperParamSetter`` schedule of
   the learning rate (no ``EstimatedTimeLeft``: the whole run trains in seconds);
3. exports the best model as a compact frozen graph and as a SavedModel, reloads the
   SavedModel with plain TensorFlow and measures it on the test set, which played no
   part in training or in choosing the model; prints predictions next to the labels;
4. plots the training curves from ``stats.json`` into a PNG.

Usage::

    python examples/digits/train.py [--logdir train_log/digits] [--epochs 12] [--overwrite] [-v]

``--overwrite`` moves an existing ``--logdir`` aside (to ``<logdir>.old-<timestamp>``);
without it, a logdir that already holds a run is an error naming the folder and the flag.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()
"""When the script started, before TensorFlow is imported: the wall time counts from here."""

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked before TensorFlow loads: a mistake is reported at once.

    Exits with status 2 and one ``train.py: error: ...`` line on bad arguments, or when
    ``--logdir`` already holds a run and ``--overwrite`` is not given.
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--logdir", default=os.path.join("train_log", "digits"))
    parser.add_argument("--epochs", type=int, default=12, help="epochs to train (default 12)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="move an existing logdir aside to <logdir>.old-<timestamp> instead of failing",
    )
    parser.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "mixed_bfloat16", "mixed_float16"],
        help="what the training tower computes in; variables stay float32 (default float32)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show TensorFlow's start-up lines"
    )
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1; got {args.epochs}")
    if os.path.exists(args.logdir) and not os.path.isdir(args.logdir):
        parser.error(f"--logdir {args.logdir} is a file, not a folder: give a folder")
    if not args.overwrite and os.path.isdir(args.logdir) and os.listdir(args.logdir):
        parser.error(
            f"{args.logdir} already holds a run: pass --overwrite to move it aside "
            f"(to {args.logdir}.old-<timestamp>) and train afresh, or --logdir DIR to "
            "write elsewhere"
        )
    return args


def say(text: str) -> None:
    """Print what the demo does now (on standard output, at once)."""
    print(text, flush=True)


if __name__ == "__main__":
    parse_args()  # a mistake in the arguments is reported now, not after TensorFlow loads
    say("loading TensorFlow (10 to 40 s) ...")

from towerkit.tools import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly(verbose="-v" in sys.argv[1:] or "--verbose" in sys.argv[1:])

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from towerkit.callbacks import (  # noqa: E402
    ClassificationError,
    InferenceRunner,
    MinSaver,
    ModelSaver,
    ScheduledHyperParamSetter,
)
from towerkit.export import ModelExporter, PredictConfig  # noqa: E402
from towerkit.sessinit import SmartInit  # noqa: E402
from towerkit.towers import add_moving_summary, get_current_tower_context  # noqa: E402
from towerkit.trainers import (  # noqa: E402
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

tf1 = tf.compat.v1

SEED = 0
"""Seeds the split, the shuffling and the initial weights: a run is reproducible."""

BATCH_SIZE = 32
"""Training images per step."""

DROPOUT = 0.3
"""The fraction of the last convolution's outputs dropped in training (not in inference)."""

WEIGHT_DECAY = 1e-4
"""The factor of the L2 penalty on the weights (not the biases)."""

LR_SCHEDULE = [(0, 3e-3), (6, 1e-3), (9, 3e-4)]
"""(epoch, learning rate): the value set after the end of that epoch (0: before the first)."""


Split = tuple[np.ndarray, np.ndarray]
"""Images (n, 8, 8, 1) float32 in [0, 1] and their int32 labels."""


def load_data() -> tuple[Split, Split, Split]:
    """The digits split 60/20/20 into (train, validation, test), stratified, fixed seed.

    Training fits the weights; validation picks the checkpoint (``MinSaver``); the test
    set is used once, at the end, to measure the chosen model.
    """
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    x_rest, x_test, y_rest, y_test = train_test_split(
        images, labels, test_size=0.2, random_state=SEED, stratify=labels
    )
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=0.25, random_state=SEED, stratify=y_rest
    )
    return (x_train, y_train), (x_val, y_val), (x_test, y_test)


SHIFTS = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))
"""(rows, columns) by which each training image is also shifted, the vacated border zeroed."""


def augment(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The images and their copies shifted by one pixel in each direction (`SHIFTS`).

    >>> x, y = augment(np.arange(4, dtype=np.float32).reshape(1, 2, 2, 1), np.array([3]))
    >>> x.shape, y.tolist(), x[1, :, :, 0].tolist()
    ((5, 2, 2, 1), [3, 3, 3, 3, 3], [[0.0, 0.0], [0.0, 1.0]])
    """
    out = []
    for dy, dx in SHIFTS:
        shifted = np.roll(images, (dy, dx), axis=(1, 2))
        if dy > 0:
            shifted[:, :dy] = 0
        elif dy < 0:
            shifted[:, dy:] = 0
        if dx > 0:
            shifted[:, :, :dx] = 0
        elif dx < 0:
            shifted[:, :, dx:] = 0
        out.append(shifted)
    return np.concatenate(out), np.tile(labels, len(SHIFTS))


def _weights(name: str, shape: Sequence[int], seed: int) -> tf.Variable:
    init = tf1.glorot_uniform_initializer(seed=SEED + seed)
    return tf1.get_variable(name, shape=shape, initializer=init)


def _bias(name: str, size: int) -> tf.Variable:
    return tf1.get_variable(name, shape=[size], initializer=tf1.zeros_initializer())


class DigitsModel(ModelDesc):
    """A small convnet: conv 3x3x32 - relu - max-pool 2x2, conv 3x3x64 - relu, fully connected 10."""

    def inputs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec((None, 8, 8, 1), tf.float32, "image"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, image: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        with tf1.variable_scope("conv0"):
            x = tf.nn.conv2d(image, _weights("W", [3, 3, 1, 32], 1), 1, "SAME")
            x = tf.nn.relu(x + _bias("b", 32))
        x = tf.nn.max_pool2d(x, 2, 2, "VALID")
        with tf1.variable_scope("conv1"):
            x = tf.nn.conv2d(x, _weights("W", [3, 3, 32, 64], 2), 1, "SAME")
            x = tf.nn.relu(x + _bias("b", 64))
        x = tf.reshape(x, [-1, 4 * 4 * 64])
        ctx = get_current_tower_context()
        if ctx is not None and ctx.is_training:
            x = tf.nn.dropout(x, rate=DROPOUT, seed=SEED)
        with tf1.variable_scope("fc"):
            logits = tf.add(tf.matmul(x, _weights("W", [4 * 4 * 64, 10], 3)), _bias("b", 10))
        logits = tf.identity(tf.cast(logits, tf.float32), name="logits")  # float32 under any policy
        tf.nn.softmax(logits, name="prob")
        correct = tf.nn.in_top_k(predictions=logits, targets=label, k=1)
        wrong = tf.cast(tf.logical_not(correct), tf.float32, name="incorrect_vector")
        train_error = tf.reduce_mean(wrong, name="train_error")
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
            name="cross_entropy_loss",
        )
        weights = [v for v in tf1.trainable_variables() if v.op.name.endswith("/W")]
        l2 = tf.multiply(WEIGHT_DECAY, tf.add_n([tf.nn.l2_loss(w) for w in weights]), name="l2")
        total = tf.add(cost, l2, name="total_cost")  # what is minimized (the progress bar's)
        add_moving_summary(cost, train_error, l2, total)
        return total

    def optimizer(self) -> tf1.train.Optimizer:
        lr = tf1.get_variable("learning_rate", initializer=LR_SCHEDULE[0][1], trainable=False)
        return tf1.train.AdamOptimizer(lr)


def batches(x: np.ndarray, y: np.ndarray, size: int = 128) -> list[list[np.ndarray]]:
    """The validation set as a list of [images, labels] batches (the last one smaller)."""
    return [[x[i : i + size], y[i : i + size]] for i in range(0, len(x), size)]


def train(logdir: str, epochs: int, overwrite: bool, precision: str = "float32") -> MinSaver:
    """Train the model; return the MinSaver (its file is the best model)."""
    (x_train, y_train), (x_val, y_val), (x_test, _) = load_data()
    print(
        f"digits: {len(x_train)} training, {len(x_val)} validation and {len(x_test)} test "
        "images of 8x8"
    )
    originals = len(x_train)
    x_train, y_train = augment(x_train, y_train)
    steps = len(x_train) // BATCH_SIZE  # the last, partial batch is left out
    print(
        f"training on {len(x_train)} images: the {originals} training images and their "
        f"copies shifted by one pixel up, down, left and right ({len(SHIFTS)} x {originals}); "
        f"{steps} steps of {BATCH_SIZE} images per epoch"
    )
    best = MinSaver("validation_error")
    config = TrainConfig(
        model=DigitsModel(),
        data=NumpyInput([x_train, y_train], batch_size=BATCH_SIZE, shuffle=True, seed=SEED),
        callbacks=[
            ModelSaver(max_to_keep=3),
            InferenceRunner(batches(x_val, y_val), [ClassificationError("incorrect_vector")]),
            best,
            ScheduledHyperParamSetter("learning_rate", LR_SCHEDULE),
        ],
        max_epoch=epochs,
        logdir=logdir,
        logdir_action="overwrite" if overwrite else "error",
        precision=precision,
    )
    launch_train_with_config(config, SimpleTrainer())
    return best


def export(logdir: str, best_checkpoint: str) -> tuple[str, str]:
    """Export the best model as a compact frozen graph and as a SavedModel."""
    config = PredictConfig(
        model=DigitsModel(),
        session_init=SmartInit(best_checkpoint),
        input_names=["image"],
        output_names=["prob"],
    )
    exporter = ModelExporter(config)
    out = os.path.join(logdir, "export")
    os.makedirs(out, exist_ok=True)
    compact = exporter.export_compact(os.path.join(out, "digits.pb"), overwrite=True)
    serving = exporter.export_serving(os.path.join(out, "saved_model"), overwrite=True)
    return compact, serving


def predict_saved_model(path: str, images: np.ndarray) -> np.ndarray:
    """Class probabilities from the SavedModel, loaded with plain TensorFlow."""
    loaded = tf.saved_model.load(path)
    predict = loaded.signatures["prediction_pipeline"]
    return predict(image=tf.constant(images))["prob"].numpy()


def predict_compact(path: str, images: np.ndarray) -> np.ndarray:
    """Class probabilities from the compact frozen graph, imported into a fresh graph."""
    graph_def = tf1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    with tf1.Session(graph=graph) as sess:
        return sess.run("prob:0", {"image:0": images})


def written_files(logdir: str) -> list[tuple[str, int]]:
    """Every file under `logdir` with its size in bytes, sorted by path."""
    found = []
    for root, _, files in os.walk(logdir):
        for name in files:
            path = os.path.join(root, name)
            found.append((path, os.path.getsize(path)))
    return sorted(found)


def show_towerkit_logs() -> None:
    """Print towerkit's INFO messages (statistics each epoch, time left, saves) on stderr.

    TensorFlow's own Python warnings (deprecations inside ``tf.compat.v1``) are hidden.
    """
    tf.get_logger().setLevel(logging.ERROR)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s %(name)s] %(message)s", "%H:%M:%S"))
    log = logging.getLogger("towerkit")
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the whole job; return 0 when the test accuracy is at least 95% and both exports agree."""
    args = parse_args(argv)
    show_towerkit_logs()
    logdir = os.path.abspath(args.logdir)
    start = time.perf_counter()

    best = train(logdir, args.epochs, args.overwrite, args.precision)
    trained = time.perf_counter() - start
    best_checkpoint = os.path.join(logdir, best.filename)
    print(
        f"best validation error {best.best:.4f}, at epoch {best.best_epoch} of {args.epochs}: "
        f"the model of that epoch is kept as {best_checkpoint}"
    )

    say("exporting the best model (a compact graph and a SavedModel) ...")
    compact, serving = export(logdir, best_checkpoint)
    say("reloading the SavedModel and measuring it on the validation and test sets ...")
    _, (x_val, y_val), (x_test, y_test) = load_data()
    val_accuracy = float((predict_saved_model(serving, x_val).argmax(axis=1) == y_val).mean())
    prob = predict_saved_model(serving, x_test)
    predicted = prob.argmax(axis=1)
    accuracy = float((predicted == y_test).mean())
    compact_agrees = bool(np.allclose(predict_compact(compact, x_test), prob, atol=1e-5))
    print("SavedModel predictions on the first 10 test images:")
    print("  label:     " + " ".join(str(v) for v in y_test[:10]))
    print("  predicted: " + " ".join(str(v) for v in predicted[:10]))
    print(f"compact graph gives the same probabilities: {compact_agrees}")

    from towerkit.tools.plot_stats import plot_stats

    say("plotting the training curves ...")
    plot = plot_stats(
        logdir,
        os.path.join(logdir, "training_curves.png"),
        title=f"digits: {args.logdir}",
        pairs=[("cross_entropy_loss", "total_cost")],  # 4 panels: a 2x2 grid, no empty cell
    )
    elapsed = time.perf_counter() - STARTED

    print(f"files written under {logdir}:")
    for path, size in written_files(logdir):
        print(f"  {os.path.relpath(path, logdir)}  ({size} bytes)")
    print(f"plot: {plot}")
    print(f"compact graph: {compact}")
    print(f"SavedModel: {serving}")
    print(
        f"wall time: {elapsed:.1f} s in all (training {trained:.1f} s; importing TensorFlow, "
        f"exporting, reloading and plotting the rest)"
    )
    right_val, right_test = round(val_accuracy * len(y_val)), round(accuracy * len(y_test))
    print(
        f"validation accuracy: {val_accuracy:.4f} ({right_val}/{len(y_val)}; chose the "
        f"checkpoint: epoch {best.best_epoch})"
    )
    print(f"test accuracy: {accuracy:.4f} ({right_test}/{len(y_test)}; held out until now)")
    return 0 if accuracy >= 0.95 and compact_agrees else 1


if __name__ == "__main__":
    sys.exit(main())
