"""FullyConnected: flattening, variables, values, aliases, regularizers."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.layers import FullyConnected, l2_regularizer
from towerkit.layers._fc import batch_flatten
from towerkit.towers import argscope
from towerkit.towers.compat import tf1


class TestFullyConnected:
    """FullyConnected as tensorpack's."""

    def test_flattens(self, graph, sess):
        """A 4-D input is flattened; ``W`` is ``[h*w*c, units]``; values are ``x @ W + b``."""
        xv = np.random.default_rng(0).standard_normal([3, 2, 2, 5]).astype("float32")
        y = FullyConnected(
            "fc", tf1.constant(xv), 4, activation=tf.nn.tanh, b_init=tf1.constant_initializer(0.3)
        )
        assert y.name == "fc/output:0"
        assert {v.op.name: v.shape.as_list() for v in tf1.global_variables()} == {
            "fc/W": [20, 4],
            "fc/b": [4],
        }
        sess.run(tf1.global_variables_initializer())
        out, w = sess.run([y, y.variables.W])
        np.testing.assert_allclose(out, np.tanh(xv.reshape(3, -1) @ w + 0.3), rtol=1e-5, atol=1e-5)

    def test_dynamic_batch(self, graph, sess):
        """An unknown batch stays unknown; the flattened width is static."""
        x = tf1.placeholder(tf1.float32, [None, 3, 2])
        y = FullyConnected("fc", x, units=2)
        assert y.shape.as_list() == [None, 2]
        sess.run(tf1.global_variables_initializer())
        assert sess.run(y, {x: np.ones([5, 3, 2])}).shape == (5, 2)

    def test_batch_flatten_dynamic(self, graph, sess):
        """Unknown inner dimensions flatten through the dynamic shape."""
        x = tf1.placeholder(tf1.float32, [None, None, 3])
        flat = batch_flatten(x)
        assert sess.run(flat, {x: np.ones([2, 4, 3])}).shape == (2, 12)

    def test_aliases_and_argscope(self, graph):
        """``out_dim``, ``nl``, ``W_init`` and argscope defaults."""
        x = tf1.zeros([2, 3])
        with argscope(FullyConnected, nl=tf.nn.relu, use_bias=False):
            y = FullyConnected("fc", x, out_dim=6, W_init=tf1.ones_initializer())
        assert [v.op.name for v in tf1.global_variables()] == ["fc/W"]
        assert y.shape.as_list() == [2, 6]
        assert y.op.inputs[0].op.type == "Relu"

    def test_regularizers(self, graph, sess):
        """Kernel and bias regularizers go to ``REGULARIZATION_LOSSES``; an activity loss too, per example."""
        y = FullyConnected(
            "fc",
            tf1.ones([4, 2]),
            3,
            W_init=tf1.ones_initializer(),
            kernel_regularizer=l2_regularizer(2.0),
            activity_regularizer=lambda t: tf1.reduce_sum(t),
        )
        losses = tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
        assert len(losses) == 2
        sess.run(tf1.global_variables_initializer())
        assert sess.run(losses[0]) == pytest.approx(6.0)  # 2.0 * sum(1 ** 2) / 2 over 6 weights
        assert sess.run(losses[1]) == pytest.approx(sess.run(tf1.reduce_sum(y)) / 4)

    def test_fail(self, graph):
        """Bad units, a 1-D input and an unknown width are refused."""
        with pytest.raises(ValueError, match="'units' must be a positive int; got 0"):
            FullyConnected("fc", tf1.zeros([2, 3]), 0)
        with pytest.raises(ValueError, match="must have a batch axis and more"):
            FullyConnected("fc", tf1.zeros([3]), 2)
        with pytest.raises(ValueError, match="size per example must be known"):
            FullyConnected("fc", tf1.placeholder(tf1.float32, [None, None]), 2)
