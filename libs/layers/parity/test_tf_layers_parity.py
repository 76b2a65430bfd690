"""towerkit.layers.tf_layers against tf-keras's ``tf.compat.v1.layers`` (TensorFlow 1's layers).

Each case builds the same small model twice, in two graphs: with
``tf.compat.v1.layers`` (which needs tf-keras) and with ``towerkit.layers.tf_layers``.
Both graphs must hold the same variables (names, shapes, dtypes, trainable or not),
the same ``UPDATE_OPS`` and as many ``REGULARIZATION_LOSSES``, and name their outputs
alike; then every variable gets a random value loaded by name into both, and the
outputs, the regularization losses, the gradients (of the input and of every
trainable variable) and the moving averages after one run of the update ops are
compared; and each function's signature is TensorFlow 1's. Run by ``nox -s layers_parity``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_v2_behavior()

from towerkit.layers import tf_layers as tk  # noqa: E402
from towerkit.towers import TowerContext  # noqa: E402

ORACLE = tf1.layers


def l2(scale: float) -> Callable[[Any], Any]:
    """A regularizer both libraries take: ``scale * sum(w ** 2)``."""
    return lambda w: scale * tf1.reduce_sum(tf1.square(w))


@attrs.frozen(kw_only=True)
class Case:
    """A model: ``body(L, x, training)`` with ``L`` one of the two modules; `shape` of ``x``."""

    id: str
    shape: tuple[int, ...]
    body: Callable[[Any, Any, Any], Any]
    training: Any = False


def mnist_tflayers(L: Any, x: Any, training: Any) -> Any:
    """The layer calls of tensorpack's examples/basics/mnist-tflayers.py."""
    image = tf1.expand_dims(x, 3)
    relu = tf1.nn.relu
    y = L.conv2d(image, 8, 3, name="conv0", padding="same", activation=relu)
    y = L.max_pooling2d(y, 2, 2, padding="valid")
    y = L.conv2d(y, 8, 3, name="conv1", padding="same", activation=relu)
    y = L.conv2d(y, 8, 3, name="conv2", padding="same", activation=relu)
    y = L.max_pooling2d(y, 2, 2, padding="valid")
    y = L.conv2d(y, 8, 3, name="conv3", padding="same", activation=relu)
    y = L.flatten(y)
    y = L.dense(y, 16, activation=relu, name="fc0")
    y = L.dropout(y, rate=0.5, training=training)
    return L.dense(y, 10, activation=tf1.identity, name="fc1")


def unnamed(L: Any, x: Any, training: Any) -> Any:
    """Layers without names (``conv2d``, ``conv2d_1``, ...), a named one reused, strides."""
    y = L.conv2d(x, 4, 3)
    y = L.conv2d(y, 4, (1, 3), strides=(1, 2), padding="same", use_bias=False)
    y = L.conv2d(y, 4, 3, padding="same", dilation_rate=2, name="shared")
    y = L.conv2d(y, 4, 3, padding="same", dilation_rate=2, name="shared", reuse=True)
    y = L.average_pooling2d(y, 3, 1, padding="same")
    y = L.max_pooling2d(y, (2, 1), (1, 1))
    return L.dense(L.flatten(y), 3)


def one_d(L: Any, x: Any, training: Any) -> Any:
    """conv1d and the 1-D poolings; dense on a 3-D input (over its last axis)."""
    y = L.conv1d(x, 5, 3, padding="same", activation=tf1.tanh)
    y = L.max_pooling1d(y, 2, 2)
    y = L.conv1d(y, 4, 2, strides=2, dilation_rate=1)
    y = L.average_pooling1d(y, 2, 1, padding="same")
    return L.dense(y, 3, kernel_regularizer=l2(0.1), bias_regularizer=l2(0.2))


def three_d(L: Any, x: Any, training: Any) -> Any:
    """conv3d with a bias initializer and activity regularizer."""
    y = L.conv3d(
        x,
        3,
        (2, 3, 3),
        padding="same",
        bias_initializer=tf1.constant_initializer(0.5),
        activity_regularizer=l2(0.01),
    )
    return L.conv3d(y, 2, 2, strides=(1, 2, 2))


def transpose_separable(L: Any, x: Any, training: Any) -> Any:
    """conv2d_transpose (same and valid) and separable_conv2d."""
    y = L.conv2d_transpose(x, 4, 3, strides=2, padding="same", activation=tf1.nn.relu)
    y = L.conv2d_transpose(
        y, 3, (3, 2), strides=(2, 1), padding="valid", kernel_regularizer=l2(1.0)
    )
    y = L.separable_conv2d(y, 5, 3, depth_multiplier=2, padding="same", dilation_rate=2)
    return L.separable_conv2d(y, 4, 2, strides=2, pointwise_regularizer=l2(0.5))


def batch_norms(L: Any, x: Any, training: Any) -> Any:
    """Fused 4-D, non-fused 4-D, no center or scale, a 2-D and a 3-D (axis 1) input."""
    y = L.batch_normalization(x, training=training, momentum=0.9)
    y = L.batch_normalization(y, training=training, fused=False, epsilon=0.1)
    y = L.batch_normalization(y, training=training, center=False, scale=False, name="plain")
    y = L.conv2d(y, 6, 1)
    y = L.batch_normalization(tf1.reshape(y, [-1, 6, 16]), axis=1, training=training)
    y = L.batch_normalization(L.flatten(y), training=training, gamma_regularizer=l2(0.1))
    return L.dense(y, 2)


def batch_norm_nchw(L: Any, x: Any, training: Any) -> Any:
    """Fused batch normalization over the channels of an NCHW input, after an NCHW conv."""
    y = L.conv2d(x, 4, 3, padding="same", data_format="channels_first")
    y = L.batch_normalization(y, axis=1, training=training)
    return L.flatten(y, data_format="channels_first")


CASES = [
    Case(id="mnist-tflayers", shape=(2, 12, 12), body=mnist_tflayers),
    Case(id="unnamed-reuse", shape=(2, 7, 9, 3), body=unnamed),
    Case(id="1d", shape=(3, 9, 2), body=one_d),
    Case(id="3d", shape=(2, 4, 5, 6, 2), body=three_d),
    Case(id="transpose-separable", shape=(2, 3, 4, 2), body=transpose_separable),
    Case(id="bn-train", shape=(4, 4, 4, 3), body=batch_norms, training=True),
    Case(id="bn-infer", shape=(4, 4, 4, 3), body=batch_norms, training=False),
    Case(id="bn-tensor", shape=(4, 4, 4, 3), body=batch_norms, training="tensor"),
    Case(id="bn-nchw-train", shape=(3, 2, 5, 5), body=batch_norm_nchw, training=True),
]


@attrs.frozen(kw_only=True)
class Built:
    """One graph and what the comparison reads from it."""

    graph: Any
    x: Any
    flag: Any
    out: Any
    variables: list[Any]
    grads: list[Any]
    updates: list[Any]
    losses: list[Any]


def build(L: Any, case: Case, tower: bool) -> Built:
    """The case's model, a loss over its output, its gradients and its collections."""
    g = tf1.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, case.shape, name="x")
        flag = tf1.placeholder(tf.bool, [], name="training") if case.training == "tensor" else None
        training = flag if flag is not None else case.training
        if tower:
            with TowerContext("", is_training=True):
                out = case.body(L, x, training)
        else:
            out = case.body(L, x, training)
        weights = tf1.constant(np.linspace(-1, 1, 11), tf.float32)
        flat = tf1.reshape(out, [-1])
        picked = tf1.gather(weights, tf1.range(tf1.size(flat)) % 11)
        losses = tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
        loss = tf1.reduce_sum(flat * picked) + tf1.add_n([tf1.constant(0.0), *losses])
        trainable = tf1.trainable_variables()
        grads = tf1.gradients(loss, [x, *trainable])
        updates = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)
    return Built(
        graph=g,
        x=x,
        flag=flag,
        out=out,
        variables=g.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES),
        grads=grads,
        updates=updates,
        losses=losses,
    )


def describe(b: Built) -> dict[str, Any]:
    """What must be equal before any value is compared.

    The update ops are compared by name when `training` is known when the graph is
    built; with a boolean tensor, tf-keras wraps some of them in a ``cond`` whose
    ``Merge`` is the op in the collection, and only their number (and their effect,
    in `test_parity`) is compared.
    """
    trainable = {v.op.name for v in b.graph.get_collection("trainable_variables")}
    return {
        "variables": [
            (v.op.name, v.shape.as_list(), v.dtype.base_dtype.name, v.op.name in trainable)
            for v in b.variables
        ],
        "updates": [u.name for u in b.updates] if b.flag is None else len(b.updates),
        "losses": len(b.losses),
        "output": (b.out.name, b.out.shape.as_list()),
    }


def run(b: Built, values: dict[str, np.ndarray], x: np.ndarray, flag: bool) -> list[Any]:
    """Outputs, losses and gradients for `values`; then the variables after the updates."""
    with tf1.Session(graph=b.graph) as sess:
        for v in b.variables:
            v.load(values[v.op.name], sess)
        feed = {b.x: x}
        if b.flag is not None:
            feed[b.flag] = flag
        first = sess.run([b.out, b.losses, b.grads], feed)
        sess.run(b.updates, feed)
        after = sess.run(b.variables)
    return [first[0], *first[1], *first[2], *after]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
@pytest.mark.parametrize("tower", [False, True], ids=["no-tower", "tower"])
def test_parity(case: Case, tower: bool):
    """Same variables, collections, output names; same values, gradients and updates."""
    ref, got = build(ORACLE, case, tower=False), build(tk, case, tower=tower)
    assert describe(got) == describe(ref)
    rng = np.random.default_rng(0)
    values = {}
    for name, shape, _, _ in describe(ref)["variables"]:
        value = rng.standard_normal(shape) * 0.5
        if name.endswith("moving_variance"):
            value = np.abs(value) + 0.5
        values[name] = value.astype(np.float32)
    x = rng.standard_normal(case.shape).astype(np.float32)
    for flag in (True, False) if case.training == "tensor" else (False,):
        expected, result = run(ref, values, x, flag), run(got, values, x, flag)
        assert len(result) == len(expected)
        for a, b in zip(result, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_second_tower_shares():
    """In a second (reusing) tower, unnamed and named layers reuse the first tower's variables."""

    def towers(L: Any) -> list[str]:
        g = tf1.Graph()
        with g.as_default():
            x = tf1.placeholder(tf.float32, [2, 6, 6, 3])
            with TowerContext("", is_training=True):
                mnist_tflayers(L, x[..., 0], True)
                unnamed(L, x, True)
            with (
                TowerContext("tower1", is_training=True, vs_name=""),
                tf1.variable_scope(tf1.get_variable_scope(), reuse=True),
            ):
                mnist_tflayers(L, x[..., 0], True)
                unnamed(L, x, True)
            return [v.op.name for v in tf1.global_variables()]

    assert towers(tk) == towers(ORACLE)


def test_initializers_match():
    """Default initializers: zero biases, Glorot-uniform kernels (limits), BN's ones and zeros."""

    def initial(L: Any) -> dict[str, np.ndarray]:
        g = tf1.Graph()
        g.seed = 3
        with g.as_default():
            x = tf1.placeholder(tf.float32, [2, 6, 6, 3])
            y = L.conv2d(x, 16, 3)
            y = L.batch_normalization(y)
            L.dense(L.flatten(y), 20)
            with tf1.Session(graph=g) as sess:
                sess.run(tf1.global_variables_initializer())
                return {v.op.name: sess.run(v) for v in tf1.global_variables()}

    ref, got = initial(ORACLE), initial(tk)
    assert list(got) == list(ref)
    for name, value in ref.items():
        if not name.endswith("kernel"):
            np.testing.assert_array_equal(got[name], value)
            continue
        fan_in, fan_out = np.prod(value.shape[:-1]), value.shape[-1]
        if value.ndim == 4:
            fan_in, fan_out = np.prod(value.shape[:-1]), np.prod(value.shape[:2]) * value.shape[-1]
        limit = np.sqrt(6 / (fan_in + fan_out))
        assert np.abs(got[name]).max() <= limit
        assert np.abs(got[name]).max() > 0.8 * limit


@pytest.mark.parametrize("name", sorted(tk.__all__))
def test_signatures(name: str):
    """Each function takes TensorFlow 1's arguments, in its order, with its plain defaults."""
    ours = inspect.signature(getattr(tk, name)).parameters
    theirs = inspect.signature(getattr(ORACLE, name)).parameters
    assert list(ours) == list(theirs)
    plain = (bool, int, float, str, tuple, type(None))
    for arg, param in theirs.items():
        if isinstance(param.default, plain) and param.default is not inspect.Parameter.empty:
            assert ours[arg].default == param.default, arg
