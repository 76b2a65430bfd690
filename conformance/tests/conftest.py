"""Fixtures: a fresh graph per test and a session on it."""

from __future__ import annotations

import pytest


@pytest.fixture
def graph():
    """A fresh graph, made the default for the test."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def sess(graph):
    """A session on the test's graph, closed afterwards."""
    from towerkit.towers.compat import tf1

    s = tf1.Session(graph=graph)
    yield s
    s.close()
