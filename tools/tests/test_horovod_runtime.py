"""Real 2-process horovod jobs over gloo, in graph mode: collectives and failing ranks."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from towerkit.trainers import launch_horovod_job

pytestmark = [
    pytest.mark.xdist_group("test_horovod_runtime"),
    pytest.mark.horovod,
    pytest.mark.procs,
    pytest.mark.skipif(
        importlib.util.find_spec("horovod") is None,
        reason="horovod not installed: run nox -s horovod",
    ),
]

NP = 2
"""Processes per job."""

JOB_TIMEOUT = 300.0
"""Seconds a job may take in all (two TensorFlow imports on a busy machine dominate)."""

TAG = "RANK-REPORT"

PRELUDE = """
import json
import os
import sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd

tf1 = tf.compat.v1


def report(**values):
    print("RANK-REPORT " + json.dumps(values), flush=True)
"""

COLLECTIVES = (
    PRELUDE
    + """
hvd.init()
rank, size = hvd.rank(), hvd.size()
graph = tf1.Graph()
with graph.as_default():
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = tf1.constant(base * (rank + 1) + rank)
    total = hvd.allreduce(x, op=hvd.Sum)
    mean = hvd.allreduce(x, op=hvd.Average)
    count = hvd.allreduce(tf1.constant([rank + 1, 10 * rank], dtype=tf.int32), op=hvd.Sum)
    fed = tf1.placeholder(tf.float32, shape=[3])
    fed_total = hvd.allreduce(fed, op=hvd.Sum)
    with tf1.variable_scope("model"):
        w = tf1.get_variable("w", initializer=tf1.constant(base.T * (rank + 2)))
        b = tf1.get_variable("b", initializer=tf1.constant(100 + rank, dtype=tf.int32))
    c = tf1.get_variable("c", initializer=tf1.constant([float(rank)] * 4))
    init = tf1.global_variables_initializer()
    bcast_some = hvd.broadcast_variables([w, b], root_rank=0)
    bcast_all = hvd.broadcast_global_variables(0)
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        total_v, mean_v, count_v = sess.run([total, mean, count])
        steps = [sess.run(fed_total, {fed: [step, rank, step * rank]}).tolist() for step in range(3)]
        sess.run(bcast_some)
        after_some = {"w": sess.run(w).tolist(), "b": int(sess.run(b)), "c": sess.run(c).tolist()}
        sess.run(bcast_all)
        after_all = {"c": sess.run(c).tolist()}
report(
    rank=rank,
    size=size,
    total=total_v.tolist(),
    mean=mean_v.tolist(),
    count=count_v.tolist(),
    steps=steps,
    after_some=after_some,
    after_all=after_all,
)
"""
)

RANK_DIES = (
    PRELUDE
    + """
hvd.init()
if hvd.rank() == 1:
    os._exit(3)
graph = tf1.Graph()
with graph.as_default():
    total = hvd.allreduce(tf1.constant([1.0]), op=hvd.Sum)
    with tf1.Session(graph=graph) as sess:
        try:
            sess.run(total)
        except tf.errors.OpError as err:
            report(rank=hvd.rank(), error=type(err).__name__, message=str(err))
            raise
report(rank=hvd.rank(), error=None)
"""
)

NEVER_JOINS = (
    PRELUDE
    + """
import time
if os.environ["HOROVOD_RANK"] == "1":
    time.sleep(3600)
hvd.init()
report(rank=hvd.rank(), error=None)
"""
)


def run_job(
    tmp_path: Path, script: str, *, env: dict[str, str] | None = None
) -> tuple[int, str, float]:
    """Run ``script`` on NP local gloo processes; return exit status, output and seconds.

    Past JOB_TIMEOUT the job's process group is stopped and the test fails, so a hanging
    job can never hang the test run.
    """
    path = tmp_path / "job.py"
    path.write_text(script)
    job = launch_horovod_job(
        [sys.executable, str(path)],
        NP,
        timeout=JOB_TIMEOUT,
        cwd=tmp_path,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
    )
    if job.timed_out:
        pytest.fail(f"horovod job still running after {JOB_TIMEOUT:g} s:\n{job.output}")
    return job.returncode, job.output, job.seconds


def reports(out: str) -> dict[int, dict]:
    """The per-rank reports in a job's output, by rank."""
    found = {}
    for line in out.splitlines():
        _, tag, rest = line.partition(TAG)
        if tag:
            report = json.loads(rest)
            found[report["rank"]] = report
    return found


@pytest.fixture(scope="module")
def collectives(tmp_path_factory) -> dict[int, dict]:
    """One job that runs every collective check, reports by rank."""
    tmp_path = tmp_path_factory.mktemp("collectives")
    code, out, _ = run_job(tmp_path, COLLECTIVES)
    assert code == 0, out
    found = reports(out)
    assert sorted(found) == list(range(NP)), out
    return found


def contribution(rank: int) -> np.ndarray:
    """What rank ``rank`` feeds to the float allreduces (as the job script computes it)."""
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    return base * (rank + 1) + rank


class TestAllreduce:
    """hvd.allreduce on graph tensors in a tf.compat.v1 session."""

    def test_size(self, collectives):
        """Every rank sees the job's size."""
        assert [collectives[r]["size"] for r in range(NP)] == [NP] * NP

    def test_sum(self, collectives):
        """Sum equals the sum of every rank's tensor, on every rank."""
        want = sum(contribution(r) for r in range(NP))
        for rank in range(NP):
            np.testing.assert_allclose(collectives[rank]["total"], want)

    def test_average(self, collectives):
        """Average equals the mean of every rank's tensor, on every rank."""
        want = sum(contribution(r) for r in range(NP)) / NP
        for rank in range(NP):
            np.testing.assert_allclose(collectives[rank]["mean"], want, rtol=1e-6)

    def test_int_sum(self, collectives):
        """Integer tensors sum exactly."""
        want = [sum(r + 1 for r in range(NP)), sum(10 * r for r in range(NP))]
        assert [collectives[r]["count"] for r in range(NP)] == [want] * NP

    def test_fed_steps(self, collectives):
        """One allreduce op runs again each step with new fed values."""
        want = [
            [float(NP * step), float(sum(range(NP))), float(step * sum(range(NP)))]
            for step in range(3)
        ]
        assert [collectives[r]["steps"] for r in range(NP)] == [want] * NP


class TestBroadcast:
    """hvd.broadcast_variables and hvd.broadcast_global_variables from rank 0."""

    def test_broadcast_variables(self, collectives):
        """The listed variables take rank 0's values; others keep their own."""
        base = np.arange(6, dtype=np.float32).reshape(2, 3)
        for rank in range(NP):
            after = collectives[rank]["after_some"]
            np.testing.assert_allclose(after["w"], base.T * 2)
            assert after["b"] == 100
            assert after["c"] == [float(rank)] * 4

    def test_broadcast_global_variables(self, collectives):
        """Every global variable takes rank 0's value."""
        assert [collectives[r]["after_all"]["c"] for r in range(NP)] == [[0.0] * 4] * NP


class TestFailingRank:
    """What a job does when one rank fails; the answers trainers rely on."""

    def test_rank_exits(self, tmp_path):
        """A rank that exits with an error fails the job; the survivor's allreduce errors out."""
        code, out, seconds = run_job(tmp_path, RANK_DIES)
        assert code != 0, out
        assert "Process 1 exit with status code 3." in out
        survivor = reports(out)
        assert 1 not in survivor, out
        # Either the survivor saw the collective fail, or horovodrun stopped it first.
        if 0 in survivor:
            assert survivor[0]["error"] == "UnknownError"
            assert "Horovod has been shut down" in survivor[0]["message"]
        else:
            assert "Terminating remaining workers after failure of Process 1" in out
        assert seconds < JOB_TIMEOUT

    def test_rank_never_joins(self, tmp_path):
        """A rank that never calls init makes the others' init fail after the gloo timeout."""
        code, out, seconds = run_job(
            tmp_path, NEVER_JOINS, env={"HOROVOD_GLOO_TIMEOUT_SECONDS": "10"}
        )
        assert code != 0, out
        assert "Wait timeout after 10 seconds" in out
        assert reports(out) == {}
        assert seconds < JOB_TIMEOUT
