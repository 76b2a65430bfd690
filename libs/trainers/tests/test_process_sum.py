"""The trainers' process sum: the vector itself on one process, refused on ps/worker clusters."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    CallbackError,
    ClassificationError,
    InferenceRunner,
    ScalarStats,
)
from towerkit.trainers import (
    DistributedTrainerParameterServer,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)
from towerkit.trainers._process_sum import check_sum_name, sum_vector

tf1 = tf.compat.v1

RNG = np.random.default_rng(5)
X = RNG.standard_normal((30, 3)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32)
W = np.array([[1.0, -1.0], [0.5, 0.2], [-0.3, 0.1]], np.float32)


class Classifier(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        w = tf1.get_variable("w", initializer=W)
        logits = tf.matmul(x, w)
        wrong = tf.not_equal(tf.argmax(logits, axis=1, output_type=tf.int32), y)
        tf.cast(wrong, tf.float32, name="incorrect_vector")
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        return tf.reduce_mean(loss, name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


def batches(sizes):
    out, start = [], 0
    for size in sizes:
        out.append([X[start : start + size], Y[start : start + size]])
        start += size
    return out


def evaluate(logdir, reduce):
    """An evaluation-only run of a reducing (or not) InferenceRunner; its stats.json record."""
    with tf.Graph().as_default():
        runner = InferenceRunner(
            batches([8, 8, 8, 6]),
            [ScalarStats("cost"), ClassificationError("incorrect_vector")],
            reduce=reduce,
        )
        config = TrainConfig(
            model=Classifier(),
            data=NumpyInput([X, Y], batch_size=8),
            callbacks=[runner],
            steps_per_epoch=0,
            max_epoch=1,
            logdir=str(logdir),
        )
        launch_train_with_config(config, SimpleTrainer())
    (record,) = [r for r in json.loads((logdir / "stats.json").read_text()) if "epoch_num" in r]
    return record


class TestOneProcess:
    """A one-process trainer's process sum is the vector itself."""

    def test_evaluation_only_reduced(self, tmp_path):
        """reduce=True on SimpleTrainer reports what reduce=False does, and NumPy computes."""
        reduced = evaluate(tmp_path / "a", True)
        plain = evaluate(tmp_path / "b", False)
        logits = X @ W
        wrong = np.argmax(logits, axis=1) != Y
        assert reduced["validation_error"] == pytest.approx(wrong.mean())
        assert reduced["validation_error"] == plain["validation_error"]
        assert reduced["validation_cost"] == pytest.approx(plain["validation_cost"], rel=1e-6)
        assert reduced["global_step"] == 0

    @given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=8))
    def test_identity(self, values):
        """The sum of one process is its vector, as float64, a copy."""
        with tf.Graph().as_default():
            process_sum = SimpleTrainer().make_process_sum("s")
        vector = np.asarray(values, np.float64)
        got = process_sum(vector)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, vector)
        assert got is not vector

    @given(st.text(min_size=1, max_size=12))
    def test_names(self, name):
        """A name is accepted iff it is non-empty and made of [A-Za-z0-9_.-]."""
        ok = all(c.isalnum() or c in "_-." for c in name)
        if ok:
            assert check_sum_name(name) == name
        else:
            with pytest.raises(ValueError, match="a process sum's 'name' must be"):
                check_sum_name(name)

    def test_fail(self):
        """An empty name; a vector that is not 1-D."""
        with tf.Graph().as_default():
            trainer = SimpleTrainer()
        with pytest.raises(ValueError, match=r"\[A-Za-z0-9_\.-\]; got ''"):
            trainer.make_process_sum("")
        with pytest.raises(ValueError, match=r"takes a vector \(1-D\); got shape \(2, 2\)"):
            trainer.make_process_sum("s")(np.zeros((2, 2)))
        with pytest.raises(ValueError, match=r"got shape \(\)"):
            sum_vector(1.0, "s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestCluster:
    """A ps/worker cluster trainer refuses the process sum at setup, naming what to use."""

    def test_refused(self):
        """make_process_sum raises CallbackError naming the trainer and the alternatives."""
        with tf.Graph().as_default():
            cluster = tf1.train.ClusterSpec(
                {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
            )
            server = tf1.train.Server(cluster, job_name="worker", task_index=0, start=False)
            trainer = DistributedTrainerParameterServer(1, server)
            with pytest.raises(
                CallbackError,
                match=r"not supported on DistributedTrainerParameterServer: .*reduce=False .*"
                r"HorovodTrainer",
            ):
                trainer.make_process_sum("inference_sum_InferenceTower")
