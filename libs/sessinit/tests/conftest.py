"""Fixtures: a fresh graph and session per test, and a writer of plain-TensorFlow checkpoints."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pytest
import tensorflow as tf

tf1 = tf.compat.v1


@pytest.fixture
def graph() -> Iterator[tf.Graph]:
    """A fresh graph, the default graph for the test."""
    g = tf.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def sess(graph: tf.Graph) -> Iterator[tf1.Session]:
    """A session over `graph`, closed after the test."""
    with tf1.Session(graph=graph) as s:
        yield s


def _make_variables(
    shapes: Mapping[str, tuple[tuple[int, ...], str]], *, use_resource: bool = True
) -> dict[str, tf.Variable]:
    """Create variables ``{name: (shape, dtype)}`` in the default graph, initialized to -1."""
    out = {}
    for name, (shape, dtype) in shapes.items():
        out[name] = tf1.get_variable(
            name,
            shape=shape,
            dtype=dtype,
            initializer=tf1.constant_initializer(-1),
            use_resource=use_resource,
        )
    return out


def write_tf_checkpoint(
    values: Mapping[str, np.ndarray], prefix: str, *, use_resource: bool = True
) -> str:
    """Write `values` as a checkpoint with plain TensorFlow (variables and a Saver)."""
    g = tf.Graph()
    with g.as_default():
        variables = [
            tf1.get_variable(
                name,
                initializer=tf1.constant_initializer(value),
                shape=value.shape,
                dtype=tf.as_dtype(value.dtype),
                use_resource=use_resource,
            )
            for name, value in values.items()
        ]
        saver = tf1.train.Saver(variables)
        with tf1.Session(graph=g) as s:
            s.run(tf1.global_variables_initializer())
            return saver.save(s, prefix, write_meta_graph=False)


@pytest.fixture
def make_vars(graph: tf.Graph) -> Callable[..., dict[str, tf.Variable]]:
    """``make(shapes, use_resource=True)``: variables ``{name: (shape, dtype)}`` in `graph`, all -1."""
    del graph
    return _make_variables


@pytest.fixture
def write_checkpoint(tmp_path) -> Callable[..., str]:
    """``write(values, name="model-1", use_resource=True) -> prefix`` under `tmp_path`."""

    def write(values: Mapping[str, np.ndarray], name: str = "model-1", **kwargs) -> str:
        return write_tf_checkpoint(values, os.path.join(tmp_path, name), **kwargs)

    return write


class CountingSession(tf1.Session):
    """A real session that counts its ``run`` calls."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.runs = 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return super().run(*args, **kwargs)


@pytest.fixture
def counting_sess(graph: tf.Graph) -> Iterator[CountingSession]:
    """A session over `graph` that counts ``run`` calls."""
    with CountingSession(graph=graph) as s:
        yield s
