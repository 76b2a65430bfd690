"""`describe_trainable_vars`: tensorpack's table of trainable variables, on a real graph."""

import logging

import tensorflow as tf

from towerkit.callbacks import describe_trainable_vars
from towerkit.towers.compat import tf1


def test_table_of_a_graph(caplog):
    graph = tf.Graph()
    with graph.as_default():
        tf1.get_variable("conv0/W", [3, 3, 1, 8])
        tf1.get_variable("fc/b", [10], dtype=tf.float64)
        tf1.get_variable("tower1/conv0/W", [3, 3, 1, 8])  # a data-parallel copy
        tf1.get_variable("global_step", [], dtype=tf.int64, trainable=False)
    with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
        text = describe_trainable_vars(graph)
    lines = text.splitlines()
    assert lines[0] == "trainable variables:"
    assert lines[1].split() == ["name", "shape", "count", "dtype"]
    assert lines[2].split() == ["conv0/W", "3x3x1x8", "72", "float32"]
    assert lines[3].split() == ["fc/b", "10", "10", "float64"]
    assert lines[4] == "2 trainable variables, 82 parameters (368 bytes)"
    assert "tower1" not in text
    assert "global_step" not in text
    assert [r.getMessage() for r in caplog.records] == [text]


def test_default_graph_and_empty():
    with tf.Graph().as_default():
        assert describe_trainable_vars() == "no trainable variables"
        tf1.get_variable("w", [2])
        assert "1 trainable variable, 2 parameters" in describe_trainable_vars()
