"""``SimpleDatasetPredictor`` over a source produced by worker processes (`ParallelIterable`)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import ParallelIterable, ParallelTimeoutError
from towerkit.export import PredictConfig, SimpleDatasetPredictor
from towerkit.sessinit import SmartInit
from towerkit.towers.compat import tf1

pytestmark = pytest.mark.procs  # the workers are processes


class Batches:
    """Batch i holds rows ``[i, i + 0.5]``: a DataFlow of batches, also readable by index
    (so the workers split it by index)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> list[np.ndarray]:
        return [np.array([[i], [i + 0.5]], np.float32)]

    def __iter__(self):
        return (self[i] for i in range(self.n))


def tower(x):
    w = tf1.get_variable("w", [1, 1], initializer=tf1.zeros_initializer())
    tf.identity(tf.matmul(x, w) + 1.0, name="y")


def test_predictions_in_the_source_order(tmp_path):
    """Two workers give the predictions of the plain source, batch by batch, pass after pass."""
    with tf1.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 1])
        tower(x)
        with tf1.Session() as sess:
            sess.run(tf1.assign(tf1.global_variables()[0], [[3.0]]))
            path = tf1.train.Saver().save(sess, str(tmp_path / "model"))
    config = PredictConfig(
        tower_func=tower,
        input_signature=[tf.TensorSpec([None, 1], tf.float32, "x")],
        session_init=SmartInit(path),
        input_names=["x"],
        output_names=["y"],
    )
    pool = ParallelIterable(Batches(7), 2)
    try:
        parallel = SimpleDatasetPredictor(config, pool)
        plain = SimpleDatasetPredictor(config, Batches(7))
        for _ in range(2):
            got = [out[0] for out in parallel.get_result()]
            want = [out[0] for out in plain.get_result()]
            assert len(got) == len(want) == 7
            for i, (a, b) in enumerate(zip(got, want)):
                np.testing.assert_array_equal(a, b)
                np.testing.assert_allclose(a, [[3 * i + 1], [3 * i + 2.5]])
    finally:
        pool.close()
    assert pool.pids == []


class BlocksAfterTwo(Batches):
    """Batches 0 and 1, then a worker that blocks (a stuck decoder, a network read)."""

    def __getitem__(self, i: int) -> list[np.ndarray]:
        if i >= 2:
            time.sleep(3600)
        return super().__getitem__(i)


def test_a_blocked_worker_is_bounded_by_the_pool_timeout(tmp_path):
    """A predictor reading a pool whose worker blocks stops after the pool's `timeout`
    with the message of IterableInput's timeout; the workers are stopped."""
    config = PredictConfig(
        tower_func=tower,
        input_signature=[tf.TensorSpec([None, 1], tf.float32, "x")],
        input_names=["x"],
        output_names=["y"],
    )
    pool = ParallelIterable(BlocksAfterTwo(5), 2, timeout=4)
    predictor = SimpleDatasetPredictor(config, pool)
    got = []

    def predict():
        for out in predictor.get_result():
            got.append(out)

    try:
        start = time.monotonic()
        with pytest.raises(
            ParallelTimeoutError,
            match=r"gave no datapoint for 4\.\d s \(timeout=4 s\), waiting for datapoint #2 "
            r"of pass 1; .*give ParallelIterable a larger 'timeout'",
        ):
            predict()
        assert time.monotonic() - start < 120
        assert len(got) == 2
    finally:
        predictor.close()
    assert pool.pids == []
