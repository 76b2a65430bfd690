"""LayerNorm, InstanceNorm and BNReLU in real sessions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from layers_session import initialize

from towerkit.layers import BNReLU, InstanceNorm, LayerNorm
from towerkit.layers._norm_rules import check_ndims
from towerkit.towers import TowerContext, argscope
from towerkit.towers.compat import tf1

RNG = np.random.default_rng(1)


def _x(shape):
    return (RNG.normal(size=shape) * 2.0 + 1.0).astype(np.float32)


def _names(key=tf1.GraphKeys.GLOBAL_VARIABLES):
    return [v.op.name for v in tf1.get_collection(key)]


def _normalize(x, axes, eps=1e-5):
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


class TestLayerNorm:
    """LayerNorm."""

    @pytest.mark.parametrize(
        ("shape", "fmt"),
        [((3, 5), "NHWC"), ((2, 3, 3, 4), "NHWC"), ((2, 4, 3, 3), "channels_first")],
    )
    def test_normalizes_each_sample(self, sess, shape, fmt):
        """Each sample is normalized over all its axes; gamma and beta are per channel."""
        x = tf1.placeholder(tf1.float32, shape)
        y = LayerNorm("ln", x, data_format=fmt)
        chan = shape[1] if fmt == "channels_first" else shape[-1]
        assert _names() == ["ln/beta", "ln/gamma"]
        assert [v.shape.as_list() for v in tf1.global_variables()] == [[chan], [chan]]
        initialize(sess)
        value = _x(shape)
        axes = tuple(range(1, len(shape)))
        np.testing.assert_allclose(sess.run(y, {x: value}), _normalize(value, axes), atol=1e-4)
        assert y.op.name.startswith("ln/output/")

    def test_no_affine(self, sess):
        """use_scale/use_bias False: no variables."""
        x = tf1.placeholder(tf1.float32, (2, 6))
        y = LayerNorm("ln", x, use_scale=False, use_bias=False, epsilon=1e-3)
        assert _names() == []
        value = _x((2, 6))
        np.testing.assert_allclose(
            sess.run(y, {x: value}), _normalize(value, (1,), 1e-3), atol=1e-4
        )

    def test_gamma_init_alias_and_argscope(self, sess):
        """gamma_init is an alias of gamma_initializer; argscope gives defaults."""
        x = tf1.placeholder(tf1.float32, (2, 3))
        with argscope(LayerNorm, gamma_init=tf1.constant_initializer(2.0)):
            y = LayerNorm("ln", x)
        initialize(sess)
        value = _x((2, 3))
        np.testing.assert_allclose(
            sess.run(y, {x: value}), 2 * _normalize(value, (1,)), rtol=1e-4, atol=1e-4
        )

    def test_fail(self, graph):
        """A 3-D input is refused with its shape."""
        x = tf1.placeholder(tf1.float32, (2, 3, 4))
        with pytest.raises(
            ValueError, match=r"LayerNorm: the input must be 2-D or 4-D; got shape \[2, 3, 4\]"
        ):
            LayerNorm("ln", x)


class TestInstanceNorm:
    """InstanceNorm."""

    @pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
    def test_normalizes_each_channel_of_each_sample(self, sess, fmt):
        """Each sample's channels are normalized over their spatial axes."""
        shape = (2, 4, 4, 3) if fmt == "NHWC" else (2, 3, 4, 4)
        axes = (1, 2) if fmt == "NHWC" else (2, 3)
        x = tf1.placeholder(tf1.float32, shape)
        y = InstanceNorm("in", x, data_format=fmt)
        assert _names() == ["in/beta", "in/gamma"]
        initialize(sess)
        value = _x(shape)
        np.testing.assert_allclose(sess.run(y, {x: value}), _normalize(value, axes), atol=1e-4)

    def test_use_affine_is_deprecated_but_works(self, sess):
        """use_affine=False sets center and scale to False."""
        x = tf1.placeholder(tf1.float32, (1, 2, 2, 2))
        y = InstanceNorm("in", x, use_affine=False)
        assert _names() == []
        value = _x((1, 2, 2, 2))
        np.testing.assert_allclose(sess.run(y, {x: value}), _normalize(value, (1, 2)), atol=1e-4)

    @pytest.mark.parametrize(
        ("shape", "match"),
        [((2, 3), "InstanceNorm: the input must be 4-D"), ((2, 3, 3, None), "must be known")],
    )
    def test_fail(self, graph, shape, match):
        """A 2-D input or an unknown channel count is refused."""
        x = tf1.placeholder(tf1.float32, shape)
        with pytest.raises(ValueError, match=match):
            InstanceNorm("in", x)


class TestBNReLU:
    """BNReLU."""

    def test_batchnorm_then_relu(self, sess):
        """BatchNorm under <name>/bn, then ReLU: non-negative, half the values zero."""
        x = tf1.placeholder(tf1.float32, (8, 4))
        with TowerContext("", is_training=True):
            y = BNReLU("act", x)
            z = BNReLU(x)
        assert _names() == [
            "act/bn/gamma",
            "act/bn/beta",
            "act/bn/mean/EMA",
            "act/bn/variance/EMA",
            "bn/gamma",
            "bn/beta",
            "bn/mean/EMA",
            "bn/variance/EMA",
        ]
        initialize(sess)
        value = _x((8, 4))
        want = np.maximum(_normalize(value, (0,)), 0)
        out, out2 = sess.run([y, z], {x: value})
        np.testing.assert_allclose(out, want, atol=1e-4)
        np.testing.assert_allclose(out2, want, atol=1e-4)
        assert y.op.type == "Relu"


class TestRules:
    """check_ndims."""

    @settings(max_examples=50)
    @given(st.lists(st.one_of(st.none(), st.integers(1, 9)), max_size=6))
    def test_check_ndims(self, shape):
        """The rank is returned when allowed, refused otherwise with the shape in the message."""
        if len(shape) in (2, 4):
            assert check_ndims("L", shape, (2, 4)) == len(shape)
        else:
            with pytest.raises(ValueError, match=f"got shape .* \\({len(shape)}-D\\)"):
                check_ndims("L", shape, (2, 4))
