"""Models built from the layers follow the tower-function rules and predict through towers."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from towerkit.layers import (
    AvgPooling,
    Conv2D,
    Conv2DTranspose,
    FixedUnPooling,
    FullyConnected,
    GlobalAvgPooling,
    LinearWrap,
    MaxPooling,
    PReLU,
    l2_regularizer,
    regularize_cost,
    regularize_cost_from_collection,
)
from towerkit.towers import TowerContext, TowerFunc, argscope, check_tower_function
from towerkit.towers.compat import tf1

SIGNATURE = [tf.TensorSpec([None, 8, 8, 3], tf.float32, "image")]


def tower_fn(image):
    """A small model using every kind of layer."""
    with argscope([Conv2D, Conv2DTranspose], kernel_size=3, nl=tf.nn.relu):
        x = Conv2D("conv0", image, 8, split=1, kernel_regularizer=l2_regularizer(1e-4))
        x = Conv2D("conv1", x, 8, split=2, dilation_rate=2)
        x = PReLU("prelu", x)
        x = MaxPooling("pool0", x, 2)
        x = FixedUnPooling("unpool", x, 2)
        x = Conv2DTranspose("deconv", x, 4, strides=1)
        x = AvgPooling("pool1", x, 2)
        g = GlobalAvgPooling("gap", x)
        x = LinearWrap(x).FullyConnected("fc0", 16).Dropout(rate=0.5)()
    logits = FullyConnected("fc1", tf1.concat([x, g], 1), 3)
    cost = tf1.reduce_mean(logits) + regularize_cost("fc.*/W", l2_regularizer(1e-4))
    cost = tf1.add(cost, regularize_cost_from_collection(), name="cost")
    return tf1.identity(logits, name="logits")


class TestTowerRules:
    """The tower-rule checker."""

    def test_no_violations(self):
        """A model of the layers breaks no tower-function rule."""
        assert check_tower_function(tower_fn, SIGNATURE) == []


class TestTowerFunc:
    """A TowerFunc of the layers builds training and inference towers that share variables."""

    def test_inference_tower_matches(self, graph, sess):
        """The inference tower reuses the training tower's variables and runs without dropout."""
        func = TowerFunc(tower_fn, SIGNATURE)
        image = tf1.placeholder(tf1.float32, [None, 8, 8, 3])
        with TowerContext("", is_training=True):
            func(image)
        count = len(tf1.global_variables())
        with TowerContext("infer", is_training=False):
            infer = func(image)
        assert len(tf1.global_variables()) == count
        sess.run(tf1.global_variables_initializer())
        feed = {image: np.random.default_rng(0).standard_normal([2, 8, 8, 3])}
        np.testing.assert_array_equal(sess.run(infer, feed), sess.run(infer, feed))


class TestXla:
    """The layers compile with XLA."""

    def test_jit_scope(self, graph, sess):
        """Under an XLA jit scope the model and its gradients run in XLA clusters, as without."""
        image = tf1.placeholder(tf1.float32, [4, 8, 8, 3])
        with TowerContext("", is_training=True):
            tower_fn(image)
        with TowerContext("plain", is_training=False):
            plain = tower_fn(image)
        with (
            tf1.xla.experimental.jit_scope(compile_ops=True, separate_compiled_gradients=False),
            TowerContext("xla", is_training=False),
        ):
            compiled = tower_fn(image)
            grads = tf1.gradients(tf1.reduce_sum(compiled), tf1.trainable_variables())
        sess.run(tf1.global_variables_initializer())
        feed = {image: np.random.default_rng(0).standard_normal([4, 8, 8, 3])}
        meta = tf1.RunMetadata()
        options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        got = sess.run([compiled, plain, *grads], feed, options=options, run_metadata=meta)
        np.testing.assert_allclose(got[0], got[1], rtol=1e-4, atol=1e-5)
        nodes = {n.node_name for d in meta.step_stats.dev_stats for n in d.node_stats}
        assert any(name.startswith("cluster_") for name in nodes), sorted(nodes)[:20]
