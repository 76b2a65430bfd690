"""FeedfreePredictor with an input source of the program's own (the export lib alone)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.export import FeedfreePredictor, PredictConfig
from towerkit.sessinit import DictRestore
from towerkit.towers import get_current_tower_context
from towerkit.towers.compat import tf1


class OneShotSource:
    """The three methods FeedfreePredictor calls: a dataset's one-shot iterator, no callback."""

    def __init__(self, rows):
        self.rows = rows
        self.signature = None

    def setup(self, signature):
        self.signature = list(signature)
        dataset = tf.data.Dataset.from_tensor_slices((self.rows,)).batch(2)
        self._next = tf1.data.make_one_shot_iterator(dataset).get_next()
        return []

    def get_input_tensors(self):
        return list(self._next)

    def get_callbacks(self):
        return []


def tower(x):
    w = tf1.get_variable("w", [1, 1], initializer=tf1.zeros_initializer())
    tf.identity(tf.matmul(x, w), name="y")
    context = get_current_tower_context()
    tf.constant(context.is_training, name="training")


def test_outputs_of_each_batch_with_the_loaded_values():
    rows = np.arange(4, dtype=np.float32).reshape(4, 1)
    config = PredictConfig(
        tower_func=tower,
        input_signature=[tf.TensorSpec([None, 1], tf.float32, "x")],
        session_init=DictRestore({"w": np.array([[2.0]], np.float32)}),
        output_names=["y", "training"],
    )
    source = OneShotSource(rows)
    with FeedfreePredictor(config, source) as predictor:
        y0, training = predictor()
        y1, _ = predictor()
        assert predictor.graph.finalized
        with pytest.raises(tf.errors.OutOfRangeError):
            predictor()
    np.testing.assert_allclose(np.concatenate([y0, y1]), 2 * rows)
    assert not training  # the inference tower
    assert [s.name for s in source.signature] == ["x"]
    assert "FeedfreePredictor(input_source=" in repr(predictor)


def test_a_source_without_the_methods_is_named():
    config = PredictConfig(
        tower_func=tower,
        input_signature=[tf.TensorSpec([None, 1], tf.float32, "x")],
        output_names=["y"],
    )
    with pytest.raises(TypeError, match="got ndarray, which lacks setup, get_input_tensors"):
        FeedfreePredictor(config, np.zeros(3))
