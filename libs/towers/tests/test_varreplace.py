"""Custom getters: freezing and remapping variables."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.towers import custom_getter_scope, freeze_variables, remap_variables
from towerkit.towers.compat import tf1


def fc(name, x, units=2):
    """A dense layer creating W and b with get_variable."""
    with tf1.variable_scope(name):
        w = tf1.get_variable("W", [x.shape[-1], units], initializer=tf1.ones_initializer())
        b = tf1.get_variable("b", [units], initializer=tf1.zeros_initializer())
        return tf.matmul(x, w) + b


class TestFreezeVariables:
    """Both documented options of `freeze_variables`."""

    def test_stop_gradient(self, graph):
        """stop_gradient: the variable stays trainable but gets no gradient through this use."""
        x = tf.ones([1, 3])
        with freeze_variables(stop_gradient=True):
            y = fc("fc", x)
        w = tf1.trainable_variables()[0]
        assert w.name == "fc/W:0"
        assert tf1.gradients(tf.reduce_sum(y), [w]) == [None]

    def test_skip_collection(self, graph, sess):
        """skip_collection: not trainable, in MODEL_VARIABLES, and untouched by training."""
        x = tf.ones([1, 3])
        with freeze_variables(stop_gradient=False, skip_collection=True):
            h = fc("fc", x)
        y = fc("head", h)
        assert [v.name for v in tf1.trainable_variables()] == ["head/W:0", "head/b:0"]
        assert [v.name for v in tf1.get_collection(tf1.GraphKeys.MODEL_VARIABLES)] == [
            "fc/W:0",
            "fc/b:0",
        ]
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(y))
        sess.run(tf1.global_variables_initializer())
        sess.run(train)
        frozen_w, head_w = tf1.global_variables()[0], tf1.global_variables()[2]
        assert (frozen_w.name, head_w.name) == ("fc/W:0", "head/W:0")
        np.testing.assert_allclose(sess.run(frozen_w), np.ones((3, 2)))
        assert not np.allclose(sess.run(head_w), np.ones((2, 2)))

    def test_reuse_keeps_trainable(self, graph):
        """A variable created trainable earlier is not moved to MODEL_VARIABLES on reuse."""
        x = tf.ones([1, 3])
        fc("fc", x)
        with (
            tf1.variable_scope(tf1.get_variable_scope(), reuse=True),
            freeze_variables(stop_gradient=False, skip_collection=True),
        ):
            fc("fc", x)
        assert tf1.get_collection(tf1.GraphKeys.MODEL_VARIABLES) == []
        assert len(tf1.trainable_variables()) == 2


class TestRemapVariables:
    """`remap_variables` maps what get_variable returns."""

    def test_remap(self, graph, sess):
        """The layer computes with the mapped value; the variable is unchanged."""
        x = tf.ones([1, 3])
        with remap_variables(lambda v: v * 3.0):
            y = fc("fc", x)
        sess.run(tf1.global_variables_initializer())
        np.testing.assert_allclose(sess.run(y), [[9.0, 9.0]])
        np.testing.assert_allclose(sess.run(tf1.global_variables()[0]), np.ones((3, 2)))

    def test_fail(self, graph):
        """A non-callable is rejected."""
        with pytest.raises(TypeError, match="'fn' must be callable; got int"):
            remap_variables(3)


class TestCustomGetterScope:
    """`custom_getter_scope` adds a getter to the current scope, composing with outer ones."""

    def test_compose(self, graph):
        """Inner and outer getters both see each request, inner first; name scope unchanged."""
        calls = []

        def outer(getter, name, *args, **kwargs):
            calls.append(("outer", name))
            return getter(name, *args, **kwargs)

        def inner(getter, name, *args, **kwargs):
            calls.append(("inner", name))
            return getter(name, *args, **kwargs)

        with (
            tf1.variable_scope("net"),
            custom_getter_scope(outer),
            custom_getter_scope(inner) as vs,
        ):
            tf1.get_variable("v", [1])
            assert vs.name == "net"
            assert tf.constant(0.0, name="c").name == "net/c:0"
        assert calls == [("inner", "net/v"), ("outer", "net/v")]

    def test_fail(self, graph):
        """A non-callable getter is rejected."""
        with (
            pytest.raises(TypeError, match="'custom_getter' must be callable"),
            custom_getter_scope(None),
        ):
            pass
