"""towerkit.layers.tf_layers: TensorFlow 1's tf.layers functions on plain ops, no Keras.

The values are checked against NumPy references written from the definitions; the
comparison with tf-keras's own ``tf.compat.v1.layers`` is in ``libs/layers/parity``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import reference
from hypothesis import given
from hypothesis import strategies as st
from layers_session import initialize

from towerkit.layers import tf_layers
from towerkit.layers._tf_layers_rules import (
    normalize_axis,
    positive_int,
    size_tuple,
    static_training,
)
from towerkit.towers import TowerContext, argscope, enable_argscope_for_module
from towerkit.towers.compat import tf1

LAYERS = {
    "conv1d",
    "conv2d",
    "conv3d",
    "conv2d_transpose",
    "separable_conv2d",
    "dense",
    "batch_normalization",
    "dropout",
    "flatten",
    "max_pooling1d",
    "max_pooling2d",
    "average_pooling1d",
    "average_pooling2d",
}


def variables():
    return [(v.op.name, v.shape.as_list()) for v in tf1.global_variables()]


def test_public_names():
    """The module's names are the layer functions, each defined."""
    assert set(tf_layers.__all__) == LAYERS
    assert all(callable(getattr(tf_layers, n)) for n in LAYERS)


class TestNaming:
    """TensorFlow 1's scopes: the kind made unique, or the name given; reuse."""

    def test_default_names(self, graph):
        """Unnamed layers are conv2d, conv2d_1, dense, ...; variables kernel and bias."""
        x = tf1.placeholder(tf1.float32, [None, 8, 8, 3])
        y = tf_layers.conv2d(x, 4, 3)
        y = tf_layers.conv2d(y, 5, (1, 3), use_bias=False)
        y = tf_layers.max_pooling2d(y, 2, 2)
        y = tf_layers.batch_normalization(y)
        out = tf_layers.dense(tf_layers.flatten(y), 2)
        assert variables() == [
            ("conv2d/kernel", [3, 3, 3, 4]),
            ("conv2d/bias", [4]),
            ("conv2d_1/kernel", [1, 3, 4, 5]),
            ("batch_normalization/gamma", [5]),
            ("batch_normalization/beta", [5]),
            ("batch_normalization/moving_mean", [5]),
            ("batch_normalization/moving_variance", [5]),
            ("dense/kernel", [30, 2]),
            ("dense/bias", [2]),
        ]
        assert out.name == "dense/BiasAdd:0"
        assert {v.op.name for v in tf1.trainable_variables()} == {
            n for n, _ in variables() if "moving" not in n
        }

    def test_name_and_reuse(self, graph):
        """A named layer builds in its scope; reuse=True (or a reusing scope) shares it."""
        x = tf1.placeholder(tf1.float32, [None, 6])
        a = tf_layers.dense(x, 3, name="fc")
        b = tf_layers.dense(x, 3, name="fc", reuse=True)
        with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
            c = tf_layers.dense(x, 3, name="fc")
        assert variables() == [("fc/kernel", [6, 3]), ("fc/bias", [3])]
        assert [a.name, b.name, c.name] == ["fc/BiasAdd:0", "fc_1/BiasAdd:0", "fc_2/BiasAdd:0"]
        with pytest.raises(ValueError, match="fc/kernel already exists"):
            tf_layers.dense(x, 3, name="fc")

    def test_argscope(self, graph):
        """enable_argscope_for_module(tf_layers) makes argscope give defaults (mnist-tflayers)."""
        enable_argscope_for_module(tf_layers, log_shape=False)
        x = tf1.placeholder(tf1.float32, [None, 8, 8, 1])
        with argscope([tf_layers.conv2d], padding="same", activation=tf1.nn.relu):
            y = tf_layers.conv2d(x, 2, 3, name="conv0")
        assert y.shape.as_list() == [None, 8, 8, 2]
        assert y.op.type == "Relu"


class TestValues:
    """Outputs against NumPy references, for given weights."""

    def test_conv2d_dense(self, sess):
        """conv2d (same, stride 2, relu) then dense are the reference's arithmetic."""
        rng = np.random.default_rng(0)
        xv = rng.standard_normal([2, 7, 7, 3]).astype(np.float32)
        x = tf1.constant(xv)
        y = tf_layers.conv2d(x, 4, 3, strides=2, padding="same", activation=tf1.nn.relu)
        z = tf_layers.dense(y, 5)
        initialize(sess)
        values = {v.op.name: rng.standard_normal(v.shape.as_list()) for v in tf1.global_variables()}
        for v in tf1.global_variables():
            v.load(values[v.op.name], sess)
        got_y, got_z = sess.run([y, z])
        want_y = np.maximum(
            reference.conv2d(xv, values["conv2d/kernel"], (2, 2)) + values["conv2d/bias"], 0
        )
        np.testing.assert_allclose(got_y, want_y, rtol=1e-4, atol=1e-4)
        want_z = want_y @ values["dense/kernel"] + values["dense/bias"]
        np.testing.assert_allclose(got_z, want_z, rtol=1e-4, atol=1e-4)

    def test_pooling_flatten(self, sess):
        """Pooling windows and flatten's feature order (channels first moved last)."""
        xv = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape([2, 3, 4, 4])
        x = tf1.constant(xv)
        nhwc = tf1.transpose(x, [0, 2, 3, 1])
        mx = tf_layers.max_pooling2d(nhwc, 2, 2)
        av = tf_layers.average_pooling1d(tf1.reshape(nhwc, [2, 16, 3]), 4, 4)
        flat_first = tf_layers.flatten(x, data_format="channels_first")
        flat_last = tf_layers.flatten(nhwc)
        got = sess.run([mx, av, flat_first, flat_last])
        want = reference.pool2d(xv.transpose(0, 2, 3, 1), (2, 2), (2, 2), "VALID", "max")
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_allclose(got[1], xv.transpose(0, 2, 3, 1).reshape(2, 4, 4, 3).mean(2))
        np.testing.assert_array_equal(got[2], got[3])
        np.testing.assert_array_equal(got[3], xv.transpose(0, 2, 3, 1).reshape(2, -1))

    def test_initializers(self, sess):
        """Glorot-uniform kernels within their limit, zero biases."""
        x = tf1.placeholder(tf1.float32, [None, 40])
        tf_layers.dense(x, 60)
        initialize(sess)
        kernel, bias = sess.run(tf1.global_variables())
        assert np.abs(kernel).max() <= np.sqrt(6 / 100)
        assert np.abs(kernel).max() > 0.8 * np.sqrt(6 / 100)
        np.testing.assert_array_equal(bias, np.zeros(60))

    def test_regularizers(self, sess):
        """kernel_regularizer's loss goes to REGULARIZATION_LOSSES once, reused or not."""
        x = tf1.placeholder(tf1.float32, [None, 8, 8, 2])
        reg = lambda w: 0.5 * tf1.reduce_sum(tf1.square(w))  # noqa: E731
        tf_layers.conv2d(x, 3, 3, kernel_regularizer=reg, name="c")
        tf_layers.conv2d(x, 3, 3, kernel_regularizer=reg, name="c", reuse=True)
        losses = tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
        assert len(losses) == 1
        initialize(sess)
        kernel = sess.run(tf1.global_variables()[0])
        np.testing.assert_allclose(sess.run(losses[0]), 0.5 * np.sum(kernel**2), rtol=1e-5)


class TestDropout:
    """dropout drops only when training is true (False by default)."""

    def test_training(self, sess):
        """Not training: the input; training: zeros or the input scaled by 1 / (1 - rate)."""
        x = tf1.ones([200, 50])
        flag = tf1.placeholder(tf1.bool, [])
        off = tf_layers.dropout(x, rate=0.5)
        on = tf_layers.dropout(x, rate=0.5, training=True)
        dyn = tf_layers.dropout(x, rate=0.5, training=flag)
        got_off, got_on, dyn_off = sess.run([off, on, dyn], {flag: False})
        np.testing.assert_array_equal(got_off, np.ones([200, 50]))
        np.testing.assert_array_equal(dyn_off, np.ones([200, 50]))
        assert set(np.unique(got_on)) <= {0.0, 2.0}
        assert 0.4 < np.mean(got_on == 0) < 0.6
        assert 0.4 < np.mean(sess.run(dyn, {flag: True}) == 0) < 0.6

    def test_fail(self, graph):
        """A rate outside [0, 1)."""
        with pytest.raises(ValueError, match=r"dropout: 'rate' must be a number in \[0, 1\)"):
            tf_layers.dropout(tf1.ones([2]), rate=1.5)


class TestBatchNormalization:
    """batch_normalization: batch statistics and UPDATE_OPS when training, else the averages."""

    @pytest.mark.parametrize("shape", [[6, 3, 3, 4], [6, 4]], ids=["fused-4d", "2d"])
    def test_training_updates(self, sess, shape):
        """Normalized by the batch; the updates move the averages by 1 - momentum."""
        xv = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3 + 1
        y = tf_layers.batch_normalization(tf1.constant(xv), training=True, momentum=0.9)
        updates = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)
        assert len(updates) == 2
        assert updates[0].name.startswith("batch_normalization/AssignMovingAvg/")
        assert updates[1].name.startswith("batch_normalization/AssignMovingAvg_1/")
        initialize(sess)
        got = sess.run(y)
        axes = tuple(range(len(shape) - 1))
        mean, var = xv.mean(axes), xv.var(axes)
        np.testing.assert_allclose(got, (xv - mean) / np.sqrt(var + 1e-3), rtol=1e-3, atol=1e-3)
        sess.run(updates)
        moving_mean, moving_var = sess.run(tf1.global_variables()[2:])
        count = xv.size / shape[-1]
        # the fused op's variance is the sample variance (Bessel-corrected)
        followed = var * count / (count - 1) if len(shape) == 4 else var
        np.testing.assert_allclose(moving_mean, 0.1 * mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(moving_var, 0.9 + 0.1 * followed, rtol=1e-4, atol=1e-5)

    def test_inference(self, sess):
        """Not training: the moving averages normalize, and nothing goes to UPDATE_OPS."""
        x = tf1.constant(np.full([2, 3], 5.0, np.float32))
        y = tf_layers.batch_normalization(x, epsilon=0.0)
        assert tf1.get_collection(tf1.GraphKeys.UPDATE_OPS) == []
        initialize(sess)
        np.testing.assert_allclose(sess.run(y), np.full([2, 3], 5.0), rtol=1e-6)

    def test_in_towers(self, graph):
        """A second, reusing tower shares the variables."""
        x = tf1.placeholder(tf1.float32, [4, 3])
        with TowerContext("", is_training=True):
            tf_layers.batch_normalization(x, training=True)
        with (
            TowerContext("tower1", is_training=True, vs_name=""),
            tf1.variable_scope(tf1.get_variable_scope(), reuse=True),
        ):
            tf_layers.batch_normalization(x, training=True)
        assert len(tf1.global_variables()) == 4

    def test_fail(self, graph):
        """Unsupported options, fused on a 2-D input, the batch axis."""
        x = tf1.zeros([2, 3])
        with pytest.raises(ValueError, match=r"'renorm', 'virtual_batch_size' not supported"):
            tf_layers.batch_normalization(x, renorm=True, virtual_batch_size=2)
        with pytest.raises(ValueError, match=r"fused=True needs a 4-D float input"):
            tf_layers.batch_normalization(x, fused=True)
        with pytest.raises(ValueError, match=r"'axis' cannot be the batch axis 0"):
            tf_layers.batch_normalization(x, axis=0)


class TestFail:
    """Bad input is refused before anything is built, naming the argument."""

    def test_conv(self, graph):
        """Rank, filters, kernel size, padding, data format."""
        x = tf1.zeros([2, 5, 5, 3])
        with pytest.raises(ValueError, match=r"conv2d: the input must be a 4-D tensor; got shape"):
            tf_layers.conv2d(tf1.zeros([2, 5]), 3, 3)
        with pytest.raises(ValueError, match=r"'filters' must be a positive int; got 0"):
            tf_layers.conv2d(x, 0, 3)
        with pytest.raises(
            ValueError, match=r"'kernel_size' must be a positive int or a sequence of 3"
        ):
            tf_layers.conv3d(tf1.zeros([1, 2, 2, 2, 1]), 2, (1, 2))
        with pytest.raises(ValueError, match=r"'padding' must be 'same' or 'valid'"):
            tf_layers.conv1d(tf1.zeros([1, 4, 2]), 2, 2, padding="causal")
        with pytest.raises(ValueError, match=r"'data_format' must be one of"):
            tf_layers.conv2d(x, 2, 2, data_format="HWC")
        assert tf1.global_variables() == []

    def test_dense(self, graph):
        """An input without a known last axis."""
        with pytest.raises(ValueError, match=r"dense: the input must have rank 2 or more"):
            tf_layers.dense(tf1.placeholder(tf1.float32, [None, None]), 3)


class TestRules:
    """The pure argument rules."""

    @given(st.integers(1, 3), st.integers(1, 9))
    def test_size_tuple_int(self, rank, size):
        """An int is repeated once per axis."""
        assert size_tuple(size, rank, "kernel_size") == (size,) * rank

    @given(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    def test_size_tuple_sequence(self, sizes):
        """A sequence of the rank's length is kept; another length is refused."""
        assert size_tuple(sizes, len(sizes), "strides") == tuple(sizes)
        with pytest.raises(ValueError, match=r"'strides' must be a positive int or a sequence"):
            size_tuple(sizes, len(sizes) + 1, "strides")

    @given(st.integers(2, 6), st.data())
    def test_normalize_axis(self, ndims, data):
        """Negative axes count from the end; the result is a non-batch axis."""
        axis = data.draw(st.integers(-ndims, ndims - 1).filter(lambda a: a % ndims != 0))
        result = normalize_axis(axis, ndims, "bn")
        assert 1 <= result < ndims
        assert result % ndims == axis % ndims

    @given(st.one_of(st.integers(-5, 5), st.booleans(), st.floats(0.5, 3), st.none()))
    def test_positive_int(self, value):
        """A positive int is kept; anything else (bools, floats, zero) is refused, named."""
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            assert positive_int(value, "units") == value
        else:
            with pytest.raises(ValueError, match=r"'units' must be a positive int; got"):
                positive_int(value, "units")

    @given(st.booleans())
    def test_static_training(self, flag):
        """A bool or a constant tensor is known; a placeholder is not."""
        with tf1.Graph().as_default():
            assert static_training(flag) is flag
            assert static_training(tf1.constant(flag)) is flag
            assert static_training(tf1.placeholder(tf1.bool, [])) is None


KERAS_FREE = """
import sys
import tensorflow as tf
from towerkit.layers import rnn, tf_layers

tf1 = tf.compat.v1
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [2, 8, 8, 3])
    y = tf_layers.conv2d(x, 4, 3, activation=tf.nn.relu)
    y = tf_layers.batch_normalization(tf_layers.max_pooling2d(y, 2, 2), training=True)
    y = tf_layers.dense(tf_layers.dropout(tf_layers.flatten(y), training=True), 6)
    steps = [y, y]
    cell = rnn.MultiRNNCell([rnn.LSTMBlockCell(5), rnn.GRUBlockCell(4)])
    rnn.static_rnn(cell, steps, dtype=tf.float32)
    rnn.LSTMBlockFusedCell(3)(tf1.stack(steps), dtype=tf.float32)
    tf1.gradients(tf1.reduce_sum(y), tf1.trainable_variables())
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("keras", "tf_keras"))
print("keras modules:", loaded)
sys.exit(1 if loaded else 0)
"""


@pytest.mark.procs
def test_no_keras_imported(tmp_path):
    """Building the layers and block cells (and their gradients) imports no Keras at all."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    done = subprocess.run(
        [sys.executable, "-c", KERAS_FREE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "keras modules: []" in done.stdout
