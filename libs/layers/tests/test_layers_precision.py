"""towerkit.layers under a mixed-precision scope: low-precision compute, float32 state."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.layers import BatchNorm, Conv2D, FullyConnected, MaxPooling
from towerkit.towers import TowerContext, precision_scope
from towerkit.towers.compat import tf1


@pytest.mark.parametrize(
    ("policy", "dtype"), [("mixed_bfloat16", tf.bfloat16), ("mixed_float16", tf.float16)]
)
def test_layers_compute_low_and_keep_float32_state(policy, dtype):
    rng = np.random.default_rng(0)
    with tf.Graph().as_default():
        x = tf.constant(rng.normal(size=(4, 8, 8, 3)).astype(np.float32))
        with TowerContext("", is_training=True), precision_scope(policy):
            h = Conv2D("conv0", tf.cast(x, dtype), 8, 3)
            h = MaxPooling("pool0", BatchNorm("bn0", h), 2)
            logits = FullyConnected("fc", h, 10)
        assert logits.dtype == dtype
        kinds = {v.op.name: v.dtype.base_dtype for v in tf1.global_variables()}
        assert set(kinds.values()) == {tf.float32}, kinds
        assert {"bn0/mean/EMA", "bn0/variance/EMA", "conv0/W", "fc/W"} <= set(kinds)
        loss = tf.reduce_mean(tf.square(tf.cast(logits, tf.float32)))
        with tf1.control_dependencies(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)):
            train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        mean = next(v for v in tf1.global_variables() if v.op.name == "bn0/mean/EMA")
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            before = sess.run(mean)
            sess.run(train)
            after = sess.run(mean)
        assert not np.allclose(before, after)  # the moving average moved, in float32
        assert np.isfinite(after).all()
