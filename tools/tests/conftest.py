"""Fixtures of the tools' tests: real checkpoints written by TensorFlow, real npz files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "tests" / "plugins"
if str(PLUGINS) not in sys.path:  # prefork (test programs forked from one TF import)
    sys.path.append(str(PLUGINS))

VALUES = {
    "conv0/W": np.arange(3 * 3 * 1 * 4, dtype=np.float32).reshape(3, 3, 1, 4) / 10,
    "conv0/b": np.linspace(-1, 1, 4).astype(np.float32),
    "fc/W": np.ones((36, 10), dtype=np.float32) * 0.5,
    "fc/b": np.zeros(10, dtype=np.float64),
    "global_step": np.array(120, dtype=np.int64),
}
"""The variables every test checkpoint holds."""


@pytest.fixture
def values() -> dict[str, np.ndarray]:
    """The variables of the `checkpoint` and `npz_file` fixtures."""
    return dict(VALUES)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A checkpoint written by ``tf.compat.v1.train.Saver`` with `VALUES`, at ``<tmp>/ckpt/model-120``."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        variables = [
            tf1.get_variable(name, initializer=tf.constant(value), trainable=name != "global_step")
            for name, value in VALUES.items()
        ]
        saver = tf1.train.Saver(variables)
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "ckpt" / "model"), global_step=120)
    return Path(prefix)


@pytest.fixture
def npz_file(tmp_path: Path) -> Path:
    """An npz file written by ``np.savez`` with `VALUES`."""
    path = tmp_path / "params.npz"
    np.savez(path, **VALUES)
    return path
