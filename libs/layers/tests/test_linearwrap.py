"""LinearWrap chains."""

from __future__ import annotations

import numpy as np
import pytest

from towerkit.layers import Conv2D, LinearWrap
from towerkit.towers import argscope
from towerkit.towers.compat import tf1


class TestLinearWrap:
    """LinearWrap as tensorpack's."""

    def test_chain(self, graph, capsys):
        """Layers with names, optional-scope layers, tf functions, apply and apply2 chain in order."""
        x = tf1.zeros([2, 8, 8, 3])
        with argscope(Conv2D, kernel_size=3):
            out = (
                LinearWrap(x)
                .Conv2D("c0", 4)
                .MaxPooling("p0", 2)
                .tf.nn.relu()
                .Dropout(rate=0.5, training=False)
                .ConcatWith([x[:, :4, :4, :]], 3)
                .apply(tf1.identity, name="ident")
                .apply2(Conv2D, "c1", 2, kernel_size=1)
                .print_tensor()
                .FullyConnected("fc", 5)()
            )
        assert out.name == "fc/output:0"
        assert out.shape.as_list() == [2, 5]
        names = [v.op.name for v in tf1.global_variables()]
        assert names == ["c0/W", "c0/b", "c1/W", "c1/b", "fc/W", "fc/b"]
        assert "Tensor(" in capsys.readouterr().out

    def test_tensor(self, graph):
        """Calling the wrap or ``tensor()`` gives the tensor back."""
        x = tf1.zeros([1])
        w = LinearWrap(x)
        assert w() is x
        assert w.tensor() is x

    def test_values(self, graph, sess):
        """A chain computes what the calls compute."""
        x = tf1.constant(np.arange(4, dtype="float32").reshape(2, 2))
        y = LinearWrap(x).tf.multiply(2.0).tf.math.negative()()
        np.testing.assert_array_equal(sess.run(y), -2 * np.arange(4).reshape(2, 2))

    def test_fail(self, graph):
        """An unknown name says it is neither a layer nor 'tf'."""
        with pytest.raises(
            AttributeError, match=r"LinearWrap\.NoSuchLayer: neither a registered layer nor 'tf'"
        ):
            LinearWrap(tf1.zeros([1])).NoSuchLayer("x")
        with pytest.raises(TypeError, match="apply2 needs the first argument"):
            LinearWrap(tf1.zeros([1])).apply2(Conv2D)
