"""Datapoints of another dtype than the signature's: cast when the values survive, as
tensorpack's feed did (a float 0/1 edge map for an integer input), refused otherwise."""

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    FeedInput,
    InputDataError,
    IterableInput,
    ModelDesc,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)


class EdgeModel(ModelDesc):
    """HED's shape of inputs: a float image and an int32 edge map."""

    def inputs(self):
        return [
            tf.TensorSpec([None, 4, 4], tf.float32, "image"),
            tf.TensorSpec([None, 4, 4], tf.int32, "edgemap"),
        ]

    def build_graph(self, image, edgemap):
        w = tf1.get_variable("w", [], initializer=tf1.zeros_initializer())
        tf.identity(tf.reduce_sum(edgemap), name="edge_sum")
        logits = image * w
        loss = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(edgemap, tf.float32), logits=logits
        )
        return tf.reduce_mean(loss, name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


class EdgeSums(Callback):
    """The sum of each step's edge map, as the graph saw it (an int32 tensor)."""

    def __init__(self):
        self.sums = []

    def _before_run(self, ctx):
        return self.graph.get_tensor_by_name("edge_sum:0")

    def _after_run(self, ctx, values):
        self.sums.append(int(values.results))


def edge_maps(n, fill=None):
    """n datapoints: a float64 image and a float64 map of 0 and 1 (BSDS500's kind)."""
    rng = np.random.default_rng(0)
    points = []
    for _ in range(n):
        edges = (rng.random([2, 4, 4]) > 0.5).astype(np.float64)
        if fill is not None:
            edges[0, 0, 0] = fill
        points.append((rng.random([2, 4, 4]), edges))
    return points


@pytest.mark.parametrize("source", [IterableInput, FeedInput])
def test_float_edge_map_trains(graph, source):
    """0.0/1.0 floats for the int32 input are cast and trained on with their values."""
    points = edge_maps(3)
    sums = EdgeSums()
    config = TrainConfig(
        model=EdgeModel(),
        data=source(points),
        callbacks=[sums],
        monitors=[],
        extra_callbacks=[],
        steps_per_epoch=3,
        max_epoch=1,
    )
    launch_train_with_config(config, SimpleTrainer())
    assert sums.sums == [int(edges.sum()) for _, edges in points]


@pytest.mark.parametrize("fill", [0.5, 3e9, np.nan])
def test_inexact_edge_map_refused(graph, fill):
    """A value the cast would change is refused with the input named, as before."""
    config = TrainConfig(
        model=EdgeModel(),
        data=IterableInput(edge_maps(2, fill=fill)),
        monitors=[],
        extra_callbacks=[],
        steps_per_epoch=2,
        max_epoch=1,
    )
    with pytest.raises(
        InputDataError,
        match=r"datapoint #0 of pass 1 does not fit .*#1 'edgemap': expected int32\(None, 4, 4\), "
        r"got float64\(2, 4, 4\)",
    ):
        launch_train_with_config(config, SimpleTrainer())
