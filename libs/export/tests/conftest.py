"""Fixtures: a fresh graph and session per test, and one trained checkpoint per test run."""

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


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """The prefix of a checkpoint of `models.convnet`, trained for a few steps by a plain loop."""
    from models import train  # the tests' folder is importable once a test module is

    return train(str(tmp_path_factory.mktemp("train_log")))


@pytest.fixture(scope="session")
def checkpoint_values(checkpoint):
    """The checkpoint's variables, name -> array."""
    reader = tf1.train.load_checkpoint(checkpoint)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
