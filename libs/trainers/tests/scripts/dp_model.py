"""The small model and data of the data-parallel tests and job scripts, deterministic by design."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers.compat import tf1

DIM = 8
HIDDEN = 16
CLASSES = 3

SIG = [tf.TensorSpec([None, DIM], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]


def data(n: int = 128, seed: int = 0) -> list[np.ndarray]:
    """Separable blobs: [features (n, DIM) float32, labels (n,) int32]."""
    rng = np.random.RandomState(seed)
    centers = np.random.RandomState(99).randn(CLASSES, DIM).astype(np.float32) * 2.5
    labels = rng.randint(0, CLASSES, size=n).astype(np.int32)
    feats = centers[labels] + rng.randn(n, DIM).astype(np.float32)
    return [feats, labels]


def initial_weights() -> dict[str, np.ndarray]:
    """Fixed initial values of every variable, by name."""
    rng = np.random.RandomState(7)
    return {
        "fc0/W": (rng.randn(DIM, HIDDEN) * 0.3).astype(np.float32),
        "fc0/b": np.zeros(HIDDEN, np.float32),
        "fc1/W": (rng.randn(HIDDEN, CLASSES) * 0.3).astype(np.float32),
        "fc1/b": np.zeros(CLASSES, np.float32),
    }


def _dense(x: tf.Tensor, name: str, init: dict[str, np.ndarray]) -> tf.Tensor:
    with tf1.variable_scope(name):
        w = tf1.get_variable("W", initializer=init[f"{name}/W"])
        b = tf1.get_variable("b", initializer=init[f"{name}/b"])
    return tf.matmul(x, w) + b


def cost_fn(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """A 1-hidden-layer MLP; names ``prob``, ``incorrect_vector`` and ``cost``; tower-rule abiding."""
    init = initial_weights()
    h = tf.nn.relu(_dense(x, "fc0", init))
    logits = _dense(h, "fc1", init)
    prob = tf.nn.softmax(logits, name="prob")
    pred = tf.argmax(prob, axis=1, output_type=tf.int32)
    tf.cast(tf.not_equal(pred, y), tf.float32, name="incorrect_vector")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return tf.identity(loss, name="cost")


def forward(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The model's class probabilities in numpy."""
    h = np.maximum(x @ weights["fc0/W"] + weights["fc0/b"], 0)
    logits = h @ weights["fc1/W"] + weights["fc1/b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def error_rate(weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """The classification error of the model in numpy."""
    return float(np.mean(forward(weights, x).argmax(axis=1) != y))


def sgd(lr: float = 0.1):
    """A function returning plain SGD."""
    return lambda: tf1.train.GradientDescentOptimizer(lr)


class Snapshot(Callback):
    """Keeps the value of every global and local variable at the end of training (every worker)."""

    _chief_only = False

    def __init__(self) -> None:
        self.values: dict[str, np.ndarray] = {}

    def _after_train(self) -> None:
        keys = (tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.LOCAL_VARIABLES)
        variables = [v for k in keys for v in self.graph.get_collection(k)]
        got = self.trainer.sess.run(variables)
        self.values = {v.op.name: val for v, val in zip(variables, got)}


class CostLog(Callback):
    """Fetches ``<tower>/cost`` along every step (every worker)."""

    _chief_only = False

    def __init__(self, name: str = "tower0/cost:0") -> None:
        self.name = name
        self.values: list[float] = []

    def _setup_graph(self) -> None:
        self._cost = self.graph.get_tensor_by_name(self.name)

    def _before_run(self, ctx):
        return [self._cost]

    def _after_run(self, ctx, values):
        self.values.append(float(values.results[0]))
