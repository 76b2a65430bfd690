"""The trainers' process sum: the vector itself on one process, summed across a cluster's workers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import prefork
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
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


SCRIPTS = Path(__file__).parent / "scripts"
CLUSTER_TIMEOUT = 300.0
"""Seconds the cluster job may take (three TensorFlow imports on a busy machine dominate)."""


def cluster_reference(tasks=(0, 1)) -> dict[str, float]:
    """One process evaluating the shards of `tasks`: the mean batch cost, the true error."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import dp_model
        import hvd_eval_job
    finally:
        sys.path.remove(str(SCRIPTS))
    costs, wrong = [], []
    for task in tasks:
        for x, y in hvd_eval_job.shard(task):
            prob = dp_model.forward(dp_model.initial_weights(), x.astype(np.float64))
            costs.append(float(np.mean(-np.log(prob[np.arange(len(y)), y]))))
            wrong.extend(np.argmax(prob, axis=1) != y)
    return {"validation_cost": float(np.mean(costs)), "validation_error": float(np.mean(wrong))}


@pytest.fixture(scope="module")
def cluster_eval(tmp_path_factory):
    """A parameter server and two workers evaluating their shards; their reports."""
    base = tmp_path_factory.mktemp("cluster-eval")
    ports = ",".join(str(free_port()) for _ in range(3))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    procs = {}
    for role, task in [("ps", 0), ("worker", 0), ("worker", 1)]:
        argv = [sys.executable, str(SCRIPTS / "dist_eval_job.py"), role, str(task)]
        argv += ["--ports", ports, "--logdir-base", str(base)]
        procs[(role, task)] = prefork.popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + CLUSTER_TIMEOUT
    while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    late = [k for k, p in procs.items() if p.poll() is None]
    for key in late:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(procs[key].pid, signal.SIGKILL)
    outs = {k: p.communicate()[0] for k, p in procs.items()}
    assert not late, f"still running after {CLUSTER_TIMEOUT:g} s: {late}: {outs}"
    assert all(p.returncode == 0 for p in procs.values()), outs
    reports = {}
    for key, out in outs.items():
        for line in out.splitlines():
            _, tag, rest = line.partition("DIST-EVAL-REPORT ")
            if tag:
                reports[key] = json.loads(rest)
    assert sorted(reports) == sorted(procs), outs
    stats = json.loads((base / "worker0" / "stats.json").read_text())
    return {"reports": reports, "records": [r for r in stats if "epoch_num" in r]}


@pytest.mark.procs
@pytest.mark.xdist_group("test_distributed")
@pytest.mark.timeout(600)
class TestCluster:
    """A ps/worker cluster sums the workers' vectors through queues on the parameter server."""

    def test_both_workers_put_the_statistics_of_all_data(self, cluster_eval):
        """steps_per_epoch=0 and InferenceRunner(reduce=True) on each worker's shard under
        DistributedTrainerReplicated: each worker puts the statistics of one process
        evaluating both shards (NumPy), and no step runs."""
        want = cluster_reference()
        for task in (0, 1):
            rep = cluster_eval["reports"][("worker", task)]
            assert rep["stats"] == pytest.approx(want, rel=1e-5), task
            assert rep["global_step"] == 0
            assert rep["is_chief"] is (task == 0)
        for task in (0, 1):  # each shard alone is not the answer
            own = cluster_reference((task,))
            assert own["validation_cost"] != pytest.approx(want["validation_cost"], rel=1e-3)

    def test_the_chief_writes_them(self, cluster_eval):
        """The chief's stats.json holds the one epoch record with the summed statistics."""
        want = cluster_reference()
        (record,) = cluster_eval["records"]
        assert record["global_step"] == 0
        assert {k: record[k] for k in want} == pytest.approx(want, rel=1e-5)

    def test_a_one_worker_cluster_sums_nothing(self):
        """With a single worker the sum is the vector itself (no queue is waited on)."""
        with tf.Graph().as_default():
            cluster = tf1.train.ClusterSpec(
                {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
            )
            server = tf1.train.Server(cluster, job_name="worker", task_index=0, start=False)
            trainer = DistributedTrainerParameterServer(1, server)
            total = trainer.make_process_sum("inference_sum_InferenceTower")
            assert total(np.array([1.0, 2.5])).tolist() == [1.0, 2.5]
            with pytest.raises(ValueError, match="process sum's 'name'"):
                trainer.make_process_sum("")
