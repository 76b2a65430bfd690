"""Fixtures: a fresh graph and session for each test."""

import pytest
import tensorflow as tf

from towerkit.towers.compat import tf1


@pytest.fixture
def graph():
    """A fresh graph, made the default for the test."""
    g = tf.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def sess(graph):
    """A session on the test's graph, closed afterwards."""
    s = tf1.Session(graph=graph)
    yield s
    s.close()


def pytest_report_header(config):
    """Say which loop drives the callbacks (see tests/loop.py)."""
    from loop import DRIVER

    return f"towerkit callbacks tests: driven by the {DRIVER!r} loop"
