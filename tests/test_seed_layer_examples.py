"""The layer examples of tensorpack's documentation run as written, with towerkit's imports.

Each test holds one example of the specification (``argscope`` with ``Conv2D``,
``Conv2D('test', x)`` under name scopes and towers, ``freeze_variables`` and
``remap_variables`` around ``FullyConnected``), the imports changed from
``tensorpack`` to ``towerkit``, and checks what the documentation says it does.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1


@pytest.fixture
def graph():
    """A fresh graph, the default one while the test runs."""
    with tf.Graph().as_default() as g:
        yield g


def _run(fetches, feed=None):
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        return sess.run(fetches, feed)


def test_argscope_conv2d_with_old_argument_names(graph):
    """``argscope(Conv2D, kernel_shape=3, nl=tf.nn.relu, out_channel=32)``: three layers
    take the scope's defaults; the last overrides ``out_channel``."""
    from towerkit.layers import Conv2D
    from towerkit.towers import argscope

    x = tf1.placeholder(tf.float32, [None, 8, 8, 3])
    with argscope(Conv2D, kernel_shape=3, nl=tf.nn.relu, out_channel=32):
        x = Conv2D("conv0", x)
        x = Conv2D("conv1", x)
        x = Conv2D("conv2", x, out_channel=64)  # override argscope

    shapes = {v.op.name: v.shape.as_list() for v in tf1.global_variables()}
    assert shapes == {
        "conv0/W": [3, 3, 3, 32],
        "conv0/b": [32],
        "conv1/W": [3, 3, 32, 32],
        "conv1/b": [32],
        "conv2/W": [3, 3, 32, 64],
        "conv2/b": [64],
    }
    assert x.shape.as_list() == [None, 8, 8, 64]
    out = _run(x, {"Placeholder:0": np.random.default_rng(0).normal(size=(2, 8, 8, 3))})
    assert out.min() >= 0.0  # nl=tf.nn.relu applied
    assert (out > 0).any()


def test_conv2d_scope_is_its_name_not_the_name_scope(graph):
    """``Conv2D('test', x)`` opens variable scope ``test``: its variables do not depend on
    the name scope, and a second tower (reusing variables) shares them."""
    from towerkit.layers import Conv2D
    from towerkit.towers import TowerContext

    x = tf1.placeholder(tf.float32, [None, 8, 8, 3])
    outputs = []
    for index, name in enumerate(["", "tower1"]):
        with (
            TowerContext(name, is_training=True, index=index, total=2, reuse=index > 0),
            tf.name_scope("some_block"),
        ):
            outputs.append(Conv2D("test", x, 4, 3))
    names = sorted(v.op.name for v in tf1.global_variables())
    assert names == ["test/W", "test/b"]
    first, second = _run(outputs, {x: np.ones((1, 8, 8, 3), np.float32)})
    np.testing.assert_array_equal(first, second)


@pytest.mark.procs
def test_freeze_variables_skip_collection_fc_not_trained(graph):
    """``freeze_variables(stop_gradient=False, skip_collection=True)`` around
    ``FullyConnected('fc', x, 1000)``: fc/* will not be trained."""
    from towerkit.layers import FullyConnected
    from towerkit.towers import freeze_variables

    x = tf1.placeholder(tf.float32, [None, 20])
    with freeze_variables(stop_gradient=False, skip_collection=True):
        y = FullyConnected("fc", x, 1000)  # fc/* will not be trained
    y = FullyConnected("out", y, 1)
    trainable = sorted(v.op.name for v in tf1.trainable_variables())
    model = sorted(v.op.name for v in tf1.get_collection(tf1.GraphKeys.MODEL_VARIABLES))
    assert trainable == ["out/W", "out/b"]
    assert {"fc/W", "fc/b"} <= set(model)
    loss = tf.reduce_mean(tf.square(y - 1.0))
    step = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    feed = {x: np.random.default_rng(0).normal(size=(8, 20)).astype(np.float32)}
    by_name = {v.op.name: v for v in tf1.global_variables()}
    fc_w, out_w = by_name["fc/W"], by_name["out/W"]
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        before = sess.run([fc_w, out_w])
        for _ in range(3):
            sess.run(step, feed)
        after = sess.run([fc_w, out_w])
    np.testing.assert_array_equal(before[0], after[0])
    assert not np.allclose(before[1], after[1])


def test_remap_variables_quantizes_fc(graph):
    """``remap_variables(lambda var: quantize(var))`` around ``FullyConnected('fc', x,
    1000)``: fc/{W,b} will be quantized in the layer's computation."""
    from towerkit.layers import FullyConnected
    from towerkit.towers import remap_variables

    def quantize(var):
        return tf.round(var * 4.0) / 4.0

    x = tf1.placeholder(tf.float32, [None, 20])
    with remap_variables(lambda var: quantize(var)):
        y = FullyConnected("fc", x, 1000, bias_initializer=tf1.constant_initializer(0.3))
    feed = np.random.default_rng(0).normal(size=(4, 20)).astype(np.float32)
    out, w, b = _run(
        [y, tf1.global_variables("fc/W")[0], tf1.global_variables("fc/b")[0]], {x: feed}
    )
    expected = feed @ (np.round(w * 4.0) / 4.0) + np.round(b * 4.0) / 4.0
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(out, feed @ w + b, atol=1e-3)
