"""Fixtures of the layers tests: a fresh graph (as the default graph) and a session on it."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from towerkit.towers.compat import tf1


@pytest.fixture
def graph():
    """A fresh graph, made the default graph for the test."""
    g = tf1.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def sess(graph):
    """A session on the test's graph, made the default session."""
    with tf1.Session(graph=graph) as s, s.as_default():
        yield s
