"""Fixtures: a fresh graph for each test, made the default, a log directory, Ctrl-C."""

import signal
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from towerkit.towers.compat import tf1

PLUGINS = Path(__file__).resolve().parents[3] / "tests" / "plugins"
if str(PLUGINS) not in sys.path:  # prefork (test programs forked from one TF import)
    sys.path.append(str(PLUGINS))


@pytest.fixture
def graph():
    """A fresh graph, made the default for the test; trainers made in the test use it."""
    g = tf.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def sess(graph):
    """A session on the test's graph, closed afterwards."""
    s = tf1.Session(graph=graph)
    yield s
    s.close()


@pytest.fixture
def logdir(tmp_path):
    """A log directory path that does not exist yet."""
    return tmp_path / "log"


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler during the test, the one found before restored after.

    A runner started in the background (``cmd &``) hands its children SIGINT ignored, and
    Python then installs no handler: a test that sends itself SIGINT needs the handler a
    user's program has, whatever started the tests.
    """
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
