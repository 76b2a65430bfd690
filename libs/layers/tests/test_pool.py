"""Pooling layers against numpy references, and unpooling/upsampling."""

from __future__ import annotations

import numpy as np
import pytest
import reference

from towerkit.layers import (
    AvgPooling,
    BilinearUpSample,
    FixedUnPooling,
    GlobalAvgPooling,
    MaxPooling,
)
from towerkit.layers._pool import bilinear_filter
from towerkit.towers.compat import tf1


def _input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


class TestPooling:
    """MaxPooling and AvgPooling."""

    @pytest.mark.parametrize("layer", [MaxPooling, AvgPooling])
    @pytest.mark.parametrize(
        ("size", "stride", "padding"),
        [(2, None, "valid"), (3, 2, "same"), ((2, 3), (1, 2), "valid"), (3, 2, "valid")],
    )
    def test_values(self, graph, sess, layer, size, stride, padding):
        """Each matches numpy; strides default to the pool size; SAME averages only inside."""
        xv = _input([2, 7, 8, 3])
        y = layer("p", tf1.constant(xv), size, stride, padding=padding)
        assert y.name == "p/output:0"
        s2 = [size, size] if isinstance(size, int) else list(size)
        st = (
            s2
            if stride is None
            else ([stride, stride] if isinstance(stride, int) else list(stride))
        )
        ref = reference.pool2d(xv, s2, st, padding.upper(), "max" if layer is MaxPooling else "avg")
        np.testing.assert_allclose(sess.run(y), ref, rtol=1e-5, atol=1e-5)

    def test_aliases_and_channels_first(self, graph, sess):
        """``shape=``/``stride=`` and NCHW give the NHWC result transposed."""
        xv = _input([2, 6, 6, 3])
        a = MaxPooling("a", tf1.constant(xv), shape=3, stride=1, padding="same")
        b = MaxPooling(
            "b", tf1.constant(xv.transpose(0, 3, 1, 2)), 3, 1, padding="same", data_format="NCHW"
        )
        ra, rb = sess.run([a, b])
        np.testing.assert_allclose(ra, rb.transpose(0, 2, 3, 1))

    def test_fail(self, graph):
        """A 3-D input and a bad pool size are refused."""
        with pytest.raises(ValueError, match="MaxPooling: the input must be a 4-D tensor"):
            MaxPooling("p", tf1.zeros([2, 3, 3]), 2)
        with pytest.raises(ValueError, match="'pool_size' must be a positive int"):
            AvgPooling("p", tf1.zeros([2, 3, 3, 1]), 0)


class TestGlobalAvgPooling:
    """GlobalAvgPooling."""

    @pytest.mark.parametrize("fmt", ["channels_last", "NHWC", "channels_first", "NCHW"])
    def test_values(self, graph, sess, fmt):
        """The mean over the spatial axes, an ``[N, C]`` tensor named ``output``."""
        xv = _input([2, 3, 4, 5])
        y = GlobalAvgPooling("gap", tf1.constant(xv), data_format=fmt)
        axes = (1, 2) if fmt in ("channels_last", "NHWC") else (2, 3)
        assert y.name == "gap/output:0"
        np.testing.assert_allclose(sess.run(y), xv.mean(axis=axes), rtol=1e-5, atol=1e-6)

    def test_fail(self, graph):
        """A 2-D input is refused."""
        with pytest.raises(ValueError, match="GlobalAvgPooling: the input must be a 4-D tensor"):
            GlobalAvgPooling("gap", tf1.zeros([2, 3]))


class TestFixedUnPooling:
    """FixedUnPooling: the Kronecker product of each pixel with a block."""

    @pytest.mark.parametrize(
        ("shape", "mat"),
        [(2, None), (3, None), ((2, 3), np.arange(6, dtype="float32").reshape(2, 3))],
    )
    def test_values(self, graph, sess, shape, mat):
        """Each pixel becomes ``pixel * unpool_mat`` (default: top-left one), NHWC and NCHW alike."""
        xv = _input([2, 3, 4, 2])
        block = (shape, shape) if isinstance(shape, int) else shape
        m = np.zeros(block, "float32") if mat is None else mat
        if mat is None:
            m[0, 0] = 1
        x = tf1.placeholder(tf1.float32, [None, 3, 4, 2])
        y = FixedUnPooling("u", x, shape, unpool_mat=mat)
        z = FixedUnPooling(
            "v", tf1.transpose(x, [0, 3, 1, 2]), shape, unpool_mat=mat, data_format="NCHW"
        )
        assert y.shape.as_list() == [None, 3 * block[0], 4 * block[1], 2]
        ref = np.stack(
            [np.stack([np.kron(xv[n, :, :, c], m) for c in range(2)], -1) for n in range(2)]
        )
        ry, rz = sess.run([y, z], {x: xv})
        np.testing.assert_allclose(ry, ref, rtol=1e-6)
        np.testing.assert_allclose(rz.transpose(0, 2, 3, 1), ref, rtol=1e-6)

    def test_fail(self, graph):
        """A matrix of another shape than ``shape`` is refused."""
        with pytest.raises(ValueError, match="'unpool_mat' must have the shape \\[2, 2\\]"):
            FixedUnPooling("u", tf1.zeros([1, 2, 2, 1]), 2, unpool_mat=np.ones([3, 3], "float32"))


class TestBilinearUpSample:
    """BilinearUpSample."""

    def test_filter(self):
        """The Caffe bilinear kernel is symmetric and sums to ``(size / 2) ** 2``."""
        for size in (2, 4, 6, 8):
            k = bilinear_filter(size)
            np.testing.assert_allclose(k, k.T)
            assert k.sum() == pytest.approx((size / 2) ** 2)

    def test_constant_and_ramp(self, graph, sess):
        """A constant image stays constant; a linear ramp stays linear away from the edges."""
        const = np.full([1, 5, 5, 2], 3.0, "float32")
        ramp = np.tile(np.arange(6, dtype="float32")[None, :, None, None], [1, 1, 6, 1])
        a = BilinearUpSample("a", tf1.constant(const), 2)
        b = BilinearUpSample("b", tf1.constant(ramp), 2)
        assert a.shape.as_list() == [1, 10, 10, 2]
        ra, rb = sess.run([a, b])
        np.testing.assert_allclose(ra, 3.0, rtol=1e-5)
        inner = rb[0, 2:-2, 3, 0]
        np.testing.assert_allclose(np.diff(inner), 0.5, rtol=1e-5)

    def test_channels_apart(self, graph, sess):
        """Each channel is upsampled on its own."""
        xv = _input([1, 4, 4, 3])
        both = sess.run(BilinearUpSample("a", tf1.constant(xv), 3))
        one = sess.run(BilinearUpSample("b", tf1.constant(xv[..., 1:2]), 3))
        np.testing.assert_allclose(both[..., 1:2], one, rtol=1e-5, atol=1e-6)

    def test_fail(self, graph):
        """A non-positive factor is refused."""
        with pytest.raises(
            ValueError, match="'shape' \\(the upsampling factor\\) must be a positive int"
        ):
            BilinearUpSample("b", tf1.zeros([1, 2, 2, 1]), 0)
