"""Conv2D and Conv2DTranspose: variables, shapes, values, aliases, data formats, argscope, towers."""

from __future__ import annotations

import numpy as np
import pytest
import reference
import tensorflow as tf

from towerkit.layers import Conv2D, Conv2DTranspose, Deconv2D, l2_regularizer
from towerkit.towers import TowerContext, argscope, freeze_variables, remap_variables
from towerkit.towers.compat import tf1


def _input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _vars():
    return {v.op.name: v.shape.as_list() for v in tf1.global_variables()}


class TestConv2D:
    """Conv2D as tensorpack's."""

    def test_variables_and_output(self, graph):
        """Variables ``W``/``b`` under the layer's scope, trainable, output named ``output``."""
        x = tf1.placeholder(tf1.float32, [None, 8, 8, 3])
        y = Conv2D("conv0", x, 16, 3)
        assert y.name == "conv0/output:0"
        assert y.shape.as_list() == [None, 8, 8, 16]
        assert _vars() == {"conv0/W": [3, 3, 3, 16], "conv0/b": [16]}
        assert {v.op.name for v in tf1.trainable_variables()} == {"conv0/W", "conv0/b"}
        assert y.variables.W.op.name == "conv0/W"
        assert [v.op.name for v in y.variables.all()] == ["conv0/W", "conv0/b"]

    def test_values(self, graph, sess):
        """The output is the numpy convolution plus bias, through the activation."""
        xv = _input([2, 7, 6, 3])
        x = tf1.constant(xv)
        y = Conv2D(
            "c",
            x,
            4,
            (3, 2),
            strides=2,
            activation=tf.nn.relu,
            b_init=tf1.constant_initializer(0.1),
        )
        sess.run(tf1.global_variables_initializer())
        out, w = sess.run([y, y.variables.W])
        ref = np.maximum(reference.conv2d(xv, w, (2, 2), "SAME") + 0.1, 0)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

    @pytest.mark.parametrize(
        ("split", "dilation", "padding"), [(2, 1, "same"), (1, 2, "valid"), (3, 2, "same")]
    )
    def test_groups_and_dilation(self, graph, sess, split, dilation, padding):
        """``split`` groups the channels; ``dilation_rate`` spreads the kernel; both as numpy does."""
        xv = _input([2, 9, 9, 6])
        y = Conv2D(
            "c", tf1.constant(xv), 6, 3, split=split, dilation_rate=dilation, padding=padding
        )
        assert _vars()["c/W"] == [3, 3, 6 // split, 6]
        sess.run(tf1.global_variables_initializer())
        out, w = sess.run([y, y.variables.W])
        ref = reference.conv2d(xv, w, (1, 1), padding.upper(), (dilation, dilation), split)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        assert list(out.shape) == y.shape.as_list()

    @pytest.mark.parametrize("fmt", ["NCHW", "channels_first"])
    def test_channels_first(self, graph, sess, fmt):
        """NCHW gives the NHWC result transposed, with the same kernel layout."""
        xv = _input([2, 6, 6, 4])
        init = tf1.constant_initializer(_input([3, 3, 2, 6], seed=1))
        a = Conv2D("a", tf1.constant(xv), 6, 3, split=2, kernel_initializer=init, strides=2)
        b = Conv2D(
            "b",
            tf1.constant(xv.transpose(0, 3, 1, 2)),
            6,
            3,
            split=2,
            W_init=init,
            strides=2,
            data_format=fmt,
        )
        assert b.shape.as_list() == [2, 6, 3, 3]
        sess.run(tf1.global_variables_initializer())
        ra, rb = sess.run([a, b])
        np.testing.assert_allclose(ra, rb.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)

    def test_tensorpack_aliases(self, graph, sess):
        """``out_channel``, ``kernel_shape``, ``stride``, ``nl``, ``W_init``, ``b_init`` and ``NHWC``."""
        x = tf1.constant(_input([1, 4, 4, 2]))
        y = Conv2D(
            "c",
            x,
            out_channel=3,
            kernel_shape=1,
            stride=2,
            nl=tf.nn.relu,
            W_init=tf1.constant_initializer(-1.0),
            b_init=tf1.constant_initializer(0.5),
            data_format="NHWC",
            use_bias=True,
        )
        assert y.shape.as_list() == [1, 2, 2, 3]
        sess.run(tf1.global_variables_initializer())
        xv = sess.run(x)
        expected = np.maximum(-xv[:, ::2, ::2, :].sum(-1, keepdims=True) + 0.5, 0)
        np.testing.assert_allclose(sess.run(y), np.repeat(expected, 3, -1), rtol=1e-5, atol=1e-5)

    def test_no_bias(self, graph):
        """``use_bias=False`` makes no ``b``."""
        Conv2D("c", tf1.zeros([1, 4, 4, 2]), 3, 3, use_bias=False)
        assert _vars() == {"c/W": [3, 3, 2, 3]}

    def test_default_initializer(self, graph, sess):
        """The kernel starts as a normal of variance 2 / fan-in (tensorpack's variance scaling 2.0)."""
        y = Conv2D("c", tf1.zeros([1, 4, 4, 64]), 256, 3)
        sess.run(tf1.global_variables_initializer())
        w, b = sess.run([y.variables.W, y.variables.b])
        assert abs(w.std() - np.sqrt(2.0 / (3 * 3 * 64))) < 0.003
        assert abs(w.mean()) < 0.003
        assert not b.any()

    def test_argscope(self, graph):
        """argscope gives defaults (by new and old names); the call's arguments win, positional too."""
        x = tf1.zeros([1, 8, 8, 2])
        with argscope(Conv2D, kernel_size=5, filters=7, stride=2, nl=tf.nn.relu):
            a = Conv2D("a", x)
            Conv2D("b", x, 4, 1)
            c = Conv2D("c", x, stride=1)
        assert _vars()["a/W"] == [5, 5, 2, 7]
        assert _vars()["b/W"] == [1, 1, 2, 4]
        assert a.shape.as_list() == [1, 4, 4, 7]
        assert c.shape.as_list() == [1, 8, 8, 7]
        assert a.op.inputs[0].op.type == "Relu"

    def test_argscope_alias_clash(self, graph):
        """An alias in the call and its target in the argscope clash, as in tensorpack."""
        with argscope(Conv2D, strides=2), pytest.raises(TypeError, match="'stride' and 'strides'"):
            Conv2D("a", tf1.zeros([1, 8, 8, 2]), 3, 3, stride=1)

    def test_argscope_unknown_argument(self):
        """An argument Conv2D does not take is refused when the argscope opens."""
        with (
            pytest.raises(TypeError, match="'Conv2D' takes no arguments \\['kernel'\\]"),
            argscope(Conv2D, kernel=3),
        ):
            pass

    def test_regularizer(self, graph):
        """A kernel regularizer adds one loss when the variable is created, none in a reusing tower."""
        x = tf1.zeros([1, 4, 4, 2])
        key = tf1.GraphKeys.REGULARIZATION_LOSSES
        with TowerContext("tower0", is_training=True, index=0, total=2):
            Conv2D(
                "c",
                x,
                3,
                3,
                kernel_regularizer=l2_regularizer(1.0),
                bias_regularizer=l2_regularizer(1.0),
            )
        assert len(tf1.get_collection(key)) == 2
        with TowerContext("tower1", is_training=True, index=1, total=2):
            Conv2D("c", x, 3, 3, kernel_regularizer=l2_regularizer(1.0))
        assert len(tf1.get_collection(key)) == 2
        assert sorted(_vars()) == ["c/W", "c/b"]

    def test_reuse_in_second_tower(self, graph, sess):
        """A second tower reuses the variables; an own-variables tower gets its copy under its scope."""
        x = tf1.constant(_input([1, 4, 4, 2]))
        with TowerContext("tower0", is_training=True, index=0, total=2):
            a = Conv2D("c", x, 3, 3)
        with TowerContext("tower1", is_training=True, index=1, total=2):
            b = Conv2D("c", x, 3, 3)
        with TowerContext("tower2", is_training=True, vs_name="tower2", index=0, total=1):
            Conv2D("c", x, 3, 3)
        assert a.name == "tower0/c/output:0"
        assert b.name == "tower1/c/output:0"
        assert sorted(_vars()) == ["c/W", "c/b", "tower2/c/W", "tower2/c/b"]
        sess.run(tf1.global_variables_initializer())
        ra, rb = sess.run([a, b])
        np.testing.assert_array_equal(ra, rb)

    def test_freeze_and_remap(self, graph, sess):
        """freeze_variables stops the gradient to ``W``; remap_variables computes with the mapped ``W``."""
        x = tf1.constant(_input([1, 4, 4, 2]))
        with freeze_variables(stop_gradient=True):
            a = Conv2D("a", x, 3, 3)
        grads = tf1.gradients(
            tf1.reduce_sum(a), [v for v in tf1.global_variables() if v.op.name == "a/W"]
        )
        assert grads == [None]
        with remap_variables(lambda v: v * 0.0):
            b = Conv2D("b", x, 3, 3, b_init=tf1.constant_initializer(2.0))
        sess.run(tf1.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(b), np.zeros([1, 4, 4, 3], "float32"))
        (bias,) = [v for v in tf1.global_variables() if v.op.name == "b/b"]
        assert sess.run(bias).tolist() == [2.0, 2.0, 2.0]

    def test_float16(self, graph):
        """Variables take the input's dtype."""
        Conv2D("c", tf1.zeros([1, 4, 4, 2], tf1.float16), 3, 3)
        assert {v.dtype.base_dtype for v in tf1.global_variables()} == {tf1.float16}

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"filters": 0}, ValueError, "'filters' must be a positive int"),
            (
                {"filters": 4, "split": 3},
                ValueError,
                "'split'=3 must divide the input channels \\(2\\)",
            ),
            ({"filters": 4, "padding": "full"}, ValueError, "'padding' must be 'same' or 'valid'"),
            ({"filters": 4, "data_format": "HWCN"}, ValueError, "'data_format' must be one of"),
            (
                {"filters": 4, "out_channel": 4},
                TypeError,
                "Conv2D: a value given twice: 'filters' and 'out_channel'",
            ),
            (
                {"filters": 4, "dilation_rate": 2, "kernel_regularizer": l2_regularizer(1.0)},
                ValueError,
                "regularizers are not supported",
            ),
        ],
    )
    def test_fail(self, graph, kwargs, error, match):
        """Bad arguments are refused with a message naming them."""
        with pytest.raises(error, match=match):
            Conv2D("c", tf1.zeros([1, 4, 4, 2]), kernel_size=3, **kwargs)

    def test_fail_calls(self, graph):
        """A missing name, a non-tensor input, too many positionals, an unknown channel count."""
        x = tf1.zeros([1, 4, 4, 2])
        with pytest.raises(TypeError, match="the first argument must be the layer's name"):
            Conv2D(x, 3, 3)
        with pytest.raises(TypeError, match="the input must be a tensor"):
            Conv2D("c", np.zeros([1, 4, 4, 2]), 3, 3)
        with pytest.raises(TypeError, match="at most 2 positional arguments after the input"):
            Conv2D("c", x, 3, 3, 1)
        with pytest.raises(
            ValueError, match="the channel count of the input \\(axis 3\\) must be known"
        ):
            Conv2D("c", tf1.placeholder(tf1.float32, [None, 4, 4, None]), 3, 3)
        with pytest.raises(ValueError, match="must be a 4-D tensor"):
            Conv2D("c", tf1.zeros([4, 2]), 3, 3)


class TestConv2DTranspose:
    """Conv2DTranspose (Deconv2D) as tensorpack's."""

    @pytest.mark.parametrize(
        ("padding", "stride", "kernel"),
        [("same", 2, 3), ("valid", 2, 3), ("valid", 3, 2), ("same", 1, 4)],
    )
    def test_shapes(self, graph, sess, padding, stride, kernel):
        """The output size is ``stride * size`` (SAME) plus ``max(kernel - stride, 0)`` (VALID)."""
        x = tf1.placeholder(tf1.float32, [None, 5, 6, 3])
        y = Conv2DTranspose("d", x, 4, kernel, stride, padding=padding)
        extra = max(kernel - stride, 0) if padding == "valid" else 0
        assert y.shape.as_list() == [None, 5 * stride + extra, 6 * stride + extra, 4]
        assert _vars() == {"d/W": [kernel, kernel, 4, 3], "d/b": [4]}
        assert y.name == "d/output:0"
        sess.run(tf1.global_variables_initializer())
        assert list(sess.run(y, {x: _input([2, 5, 6, 3])}).shape) == [2, *y.shape.as_list()[1:]]

    @pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
    def test_adjoint_of_conv(self, graph, sess, fmt):
        """Without bias it is the adjoint of the strided convolution: <conv(u), v> = <u, deconv(v)>."""
        u = _input([2, 8, 8, 3])
        v = _input([2, 4, 4, 5], seed=2)
        w = _input([3, 3, 3, 5], seed=3)
        if fmt == "NCHW":
            vt = tf1.constant(v.transpose(0, 3, 1, 2))
            y = Conv2DTranspose(
                "d",
                vt,
                3,
                3,
                2,
                use_bias=False,
                W_init=tf1.constant_initializer(w),
                data_format=fmt,
            )
            y = tf1.transpose(y, [0, 2, 3, 1])
        else:
            y = Deconv2D(
                "d", tf1.constant(v), 3, 3, 2, use_bias=False, W_init=tf1.constant_initializer(w)
            )
        sess.run(tf1.global_variables_initializer())
        lhs = (reference.conv2d(u, w, (2, 2), "SAME") * v).sum()
        rhs = (u * sess.run(y)).sum()
        assert lhs == pytest.approx(rhs, rel=1e-4)

    def test_aliases_and_activation(self, graph):
        """tensorpack's aliases and ``nl`` work; the dynamic batch stays dynamic."""
        x = tf1.placeholder(tf1.float32, [None, None, 4, 2])
        y = Conv2DTranspose("d", x, out_channel=3, kernel_shape=2, stride=2, nl=tf.nn.relu)
        assert y.shape.as_list() == [None, None, 8, 3]
        assert y.op.inputs[0].op.type == "Relu"

    def test_fail(self, graph):
        """Regularizers are refused (as tensorpack does), and so is a bad padding."""
        x = tf1.zeros([1, 4, 4, 2])
        with pytest.raises(ValueError, match="Conv2DTranspose: regularizers are not supported"):
            Conv2DTranspose("d", x, 3, 3, kernel_regularizer=l2_regularizer(1.0))
        with pytest.raises(ValueError, match="'padding' must be 'same' or 'valid'"):
            Conv2DTranspose("d", x, 3, 3, padding="causal")
