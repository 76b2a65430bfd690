"""Online predictors over a live session."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.towers import (
    OnlinePredictor,
    TowerContext,
    TowerFunc,
    build_placeholders,
    handle_to_predictor,
)
from towerkit.towers.compat import tf1

SIG = [tf.TensorSpec([None, 2], tf.float32, "x")]


def double_plus(x):
    """y = 2x + b with a variable b."""
    b = tf1.get_variable("b", [], initializer=tf1.constant_initializer(1.0))
    return tf.identity(2.0 * x + b, name="y")


class TestOnlinePredictor:
    """`OnlinePredictor` feeds inputs and fetches outputs."""

    def test_predicts(self, graph, sess):
        """Outputs match numpy's arithmetic, for the explicit and default session."""
        x = tf1.placeholder(tf.float32, [None, 2])
        y = 3.0 * x
        data = np.arange(4, dtype=np.float32).reshape(2, 2)
        explicit = OnlinePredictor([x], [y, x], sess=sess)
        np.testing.assert_allclose(explicit(data)[0], 3.0 * data)
        default = OnlinePredictor([x], [y])
        np.testing.assert_allclose(default(data)[0], 3.0 * data)
        np.testing.assert_allclose(default(data + 1)[0], 3.0 * (data + 1))
        assert "inputs=['Placeholder:0']" in repr(default)

    def test_return_input(self, graph, sess):
        """With return_input the inputs come back first."""
        x = tf1.placeholder(tf.float32, [])
        inputs, outputs = OnlinePredictor([x], [x + 1.0], return_input=True)(np.float32(2.0))
        assert inputs == [2.0]
        assert outputs == [3.0]

    def test_fail(self, graph):
        """No outputs, no session, and a wrong number of inputs are errors."""
        x = tf1.placeholder(tf.float32, [])
        with pytest.raises(ValueError, match="'output_tensors' is empty"):
            OnlinePredictor([x], [])
        with pytest.raises(RuntimeError, match="has no session"):
            OnlinePredictor([x], [x * 2.0])(1.0)
        with pytest.raises(TypeError, match=r"takes 1 inputs \(\['Placeholder:0'\]\); got 2"):
            OnlinePredictor([x], [x * 2.0])(1.0, 2.0)
        other = tf1.Graph()
        with other.as_default():
            z = tf1.placeholder(tf.float32, [])
        with pytest.raises(ValueError, match="one graph"):
            OnlinePredictor([x], [z])


class TestHandleToPredictor:
    """A predictor built from a tower handle by names."""

    def test_inference_tower(self, graph, sess):
        """The inference tower's output is computed with the training variables."""
        func = TowerFunc(double_plus, SIG)
        inputs = build_placeholders(SIG)
        with TowerContext("", True):
            func(*inputs)
        with TowerContext("InferenceTower", False):
            func(*inputs)
        sess.run(tf1.global_variables_initializer())
        predict = handle_to_predictor(func.towers["InferenceTower"], ["x"], ["y"])
        data = np.ones((3, 2), np.float32)
        np.testing.assert_allclose(predict(data)[0], 3.0 * data)
        assert predict.output_tensors[0].name == "InferenceTower/y:0"
