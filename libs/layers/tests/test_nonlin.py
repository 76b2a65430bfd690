"""PReLU, Maxout and ConcatWith."""

from __future__ import annotations

import numpy as np
import pytest

from towerkit.layers import ConcatWith, Maxout, PReLU
from towerkit.towers.compat import tf1


def _input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


class TestPReLU:
    """PReLU."""

    def test_values(self, graph, sess):
        """``alpha * x`` below zero and ``x`` above, with a scalar variable ``alpha``."""
        xv = _input([3, 4])
        y = PReLU("prelu", tf1.constant(xv), init=0.25)
        assert [v.op.name for v in tf1.trainable_variables()] == ["prelu/alpha"]
        assert y.variables.alpha.shape.as_list() == []
        sess.run(tf1.global_variables_initializer())
        np.testing.assert_allclose(
            sess.run(y), np.where(xv > 0, xv, 0.25 * xv), rtol=1e-6, atol=1e-7
        )

    def test_default_init(self, graph, sess):
        """``alpha`` starts at 0.001."""
        y = PReLU("p", tf1.ones([1]))
        sess.run(tf1.global_variables_initializer())
        assert sess.run(y.variables.alpha) == pytest.approx(0.001)


class TestMaxout:
    """Maxout."""

    @pytest.mark.parametrize("shape", [[2, 6], [2, 3, 3, 6]])
    def test_values(self, graph, sess, shape):
        """The max over consecutive groups of ``num_unit`` channels."""
        xv = _input(shape)
        y = Maxout(tf1.constant(xv), 3)
        assert y.name == "output:0"
        ref = xv.reshape([*shape[:-1], 2, 3]).max(-1)
        np.testing.assert_array_equal(sess.run(y), ref)
        assert y.shape.as_list() == [*shape[:-1], 2]

    def test_fail(self, graph):
        """A channel count not divisible by ``num_unit`` and a 3-D input are refused."""
        with pytest.raises(ValueError, match="must be known and divisible by 'num_unit' \\(4\\)"):
            Maxout(tf1.zeros([2, 6]), 4)
        with pytest.raises(ValueError, match="Maxout: the input must be a 2-D or 4-D tensor"):
            Maxout(tf1.zeros([2, 6, 2]), 2)


class TestConcatWith:
    """ConcatWith."""

    def test_values(self, graph, sess):
        """The input first, then one tensor or a list of them."""
        a, b = tf1.ones([1, 2]), tf1.zeros([1, 1])
        assert sess.run(ConcatWith(a, b, 1)).tolist() == [[1.0, 1.0, 0.0]]
        assert sess.run(ConcatWith("cat", a, [b, a], 1)).tolist() == [[1.0, 1.0, 0.0, 1.0, 1.0]]
