"""Regularizers, regularize_cost, regularize_cost_from_collection and Dropout."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

from towerkit.layers import (
    Conv2D,
    Dropout,
    FullyConnected,
    L1Regularizer,
    L2Regularizer,
    l1_regularizer,
    l2_regularizer,
    regularize_cost,
    regularize_cost_from_collection,
)
from towerkit.layers._regularize import dropout_rate
from towerkit.towers import TowerContext
from towerkit.towers.compat import tf1


class TestRegularizers:
    """l2_regularizer and l1_regularizer."""

    def test_values(self, graph, sess):
        """l2: ``scale * sum(w ** 2) / 2`` (as ``tf.nn.l2_loss``); l1: ``scale * sum(|w|)``."""
        w = tf1.constant([[1.0, -2.0], [3.0, 0.5]])
        l2, l1, ref = sess.run(
            [l2_regularizer(0.1)(w), l1_regularizer(0.1)(w), 0.1 * tf1.nn.l2_loss(w)]
        )
        assert l2 == pytest.approx(ref)
        assert l1 == pytest.approx(0.65)

    def test_repr(self):
        """Records print their scale."""
        assert repr(l2_regularizer(2.0)) == "L2Regularizer(scale=1.0)"
        assert repr(L1Regularizer(3)) == "L1Regularizer(scale=3.0)"

    @given(st.floats(0, 1e6))
    def test_equal(self, scale):
        """Regularizers of the same scale are equal records."""
        assert l2_regularizer(scale) == L2Regularizer(scale * 0.5)

    def test_fail(self):
        """A negative scale is refused."""
        with pytest.raises(ValueError, match="'scale' must be a non-negative number; got -1\\.0"):
            l1_regularizer(-1)


class TestRegularizeCost:
    """regularize_cost over the trainable variables."""

    def test_matching(self, graph, sess):
        """Only the variables matching the regex count; ``W`` but not ``b``."""
        with TowerContext("", is_training=True):
            FullyConnected("fc0", tf1.ones([1, 2]), 2, W_init=tf1.ones_initializer())
            FullyConnected(
                "fc1",
                tf1.ones([1, 2]),
                3,
                W_init=tf1.ones_initializer(),
                b_init=tf1.ones_initializer(),
            )
            cost = regularize_cost("fc.*/W", l2_regularizer(1.0))
            none = regularize_cost("conv.*", l2_regularizer(1.0), name="nothing")
        sess.run(tf1.global_variables_initializer())
        assert cost.name == "regularize_cost:0"
        assert sess.run(cost) == pytest.approx((4 + 6) / 2)
        assert none.name == "empty_nothing:0"
        assert sess.run(none) == 0.0

    def test_inference_tower(self, graph):
        """In an inference tower the cost is a zero constant."""
        FullyConnected("fc", tf1.ones([1, 2]), 2)
        with TowerContext("infer", is_training=False):
            cost = regularize_cost(".*", l2_regularizer(1.0))
        assert cost.op.type == "Const"

    def test_own_variables(self, graph, sess):
        """A tower with its own variables counts only them."""
        for i in range(2):
            with TowerContext(f"tower{i}", is_training=True, vs_name=f"tower{i}", index=i, total=2):
                FullyConnected("fc", tf1.ones([1, 2]), 1 + i, W_init=tf1.ones_initializer())
                cost = regularize_cost("fc/W", l1_regularizer(1.0))
        sess.run(tf1.global_variables_initializer())
        assert sess.run(cost) == pytest.approx(4.0)

    def test_fail(self, graph):
        """An empty or broken regex is refused."""
        with pytest.raises(ValueError, match="'regex' must be a non-empty regular expression"):
            regularize_cost("", l2_regularizer(1.0))
        with pytest.raises(ValueError, match="'regex' '\\(' is not a valid regular expression"):
            regularize_cost("(", l2_regularizer(1.0))


class TestRegularizeCostFromCollection:
    """regularize_cost_from_collection."""

    def test_sum(self, graph, sess):
        """The sum of the layers' regularization losses; zero when there are none."""
        with TowerContext("", is_training=True):
            empty = regularize_cost_from_collection(name="reg")
            Conv2D(
                "c",
                tf1.ones([1, 3, 3, 1]),
                2,
                1,
                W_init=tf1.ones_initializer(),
                kernel_regularizer=l1_regularizer(0.5),
            )
            FullyConnected(
                "fc",
                tf1.ones([1, 2]),
                2,
                W_init=tf1.ones_initializer(),
                kernel_regularizer=l2_regularizer(1.0),
            )
            cost = regularize_cost_from_collection()
        sess.run(tf1.global_variables_initializer())
        assert empty.name == "empty_reg:0"
        assert sess.run(cost) == pytest.approx(0.5 * 2 + 4 / 2)

    def test_inference_tower(self, graph):
        """In an inference tower the cost is a zero constant."""
        FullyConnected("fc", tf1.ones([1, 2]), 2, kernel_regularizer=l2_regularizer(1.0))
        with TowerContext("infer", is_training=False):
            assert regularize_cost_from_collection().op.type == "Const"


class TestDropoutRate:
    """The pure reading of Dropout's arguments."""

    @given(st.floats(0.01, 1.0))
    def test_keep_prob(self, keep):
        """A positional value and ``keep_prob=`` are probabilities to keep."""
        assert dropout_rate((keep,), {})[0] == pytest.approx(1 - keep)
        assert dropout_rate((), {"keep_prob": keep})[0] == pytest.approx(1 - keep)

    @given(st.floats(0.0, 0.99))
    def test_rate(self, rate):
        """``rate=`` is the probability to drop; nothing given means 0.5."""
        assert dropout_rate((), {"rate": rate}) == (rate, {})
        assert dropout_rate((), {}) == (0.5, {})

    @pytest.mark.parametrize(
        ("args", "kwargs", "match"),
        [
            ((0.5,), {"rate": 0.1}, "give one of a positional keep_prob, 'keep_prob' and 'rate'"),
            ((), {"rate": 0.1, "keep_prob": 0.2}, "give one of a positional keep_prob"),
            ((0.5, 0.5), {}, "one positional argument after the input"),
            (
                (),
                {"training": True, "is_training": True},
                "give one of 'training' and 'is_training'",
            ),
        ],
    )
    def test_fail(self, args, kwargs, match):
        """Conflicting arguments are refused."""
        with pytest.raises(TypeError, match=match):
            dropout_rate(args, kwargs)

    def test_fail_range(self):
        """A rate of 1 or more is refused."""
        with pytest.raises(ValueError, match=r"the drop rate must be in \[0, 1\); got 1\.5"):
            dropout_rate((-0.5,), {})


class TestDropout:
    """Dropout reads is_training from the TowerContext."""

    def test_training_and_inference(self, graph, sess):
        """Training drops about ``1 - keep`` and scales by ``1 / keep``; inference passes through."""
        x = tf1.ones([100, 100])
        with TowerContext("", is_training=True):
            train = Dropout(x, 0.8)
            named = Dropout("drop", x, keep_prob=0.8)
        with TowerContext("infer", is_training=False):
            infer = Dropout(x, rate=0.3)
        rt, ri = sess.run([train, infer])
        assert set(np.unique(rt)) <= {0.0, 1.25}
        assert abs((rt == 0).mean() - 0.2) < 0.03
        assert named.name.startswith("drop/")
        np.testing.assert_array_equal(ri, np.ones([100, 100]))

    def test_explicit_training(self, graph, sess):
        """``training=``/``is_training=`` win over the context and may be a boolean tensor."""
        x = tf1.ones([50, 50])
        flag = tf1.placeholder(tf1.bool, [])
        with TowerContext("", is_training=True):
            off = Dropout(x, rate=0.5, is_training=False)
            fed = Dropout(x, rate=0.5, training=flag)
        np.testing.assert_array_equal(sess.run(off), np.ones([50, 50]))
        assert (sess.run(fed, {flag: True}) == 0).any()
        np.testing.assert_array_equal(sess.run(fed, {flag: False}), np.ones([50, 50]))

    def test_fail(self, graph):
        """No training flag and no tower context, or unknown arguments, are refused."""
        with pytest.raises(ValueError, match="no 'training' argument and no TowerContext"):
            Dropout(tf1.ones([2, 2]))
        with pytest.raises(TypeError, match="Dropout takes no arguments \\['drop'\\]"):
            Dropout(tf1.ones([2, 2]), training=True, drop=0.5)
