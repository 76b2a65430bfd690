"""An evaluation-only run under HorovodTrainer on 2 ranks, its statistics summed across them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from towerkit.trainers import launch_horovod_job

HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.slow,
    pytest.mark.xdist_group("test_horovod"),
]  # timeout: a horovod job of up to JOB_TIMEOUT (300 s)

SCRIPTS = Path(__file__).parent / "scripts"
JOB_TIMEOUT = 300.0
"""Seconds the job may take at most (two TensorFlow imports on a busy machine dominate)."""


def job_module():
    """The job script's module (its shards and the model's NumPy forward pass)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import dp_model
        import hvd_eval_job
    finally:
        sys.path.remove(str(SCRIPTS))
    return dp_model, hvd_eval_job


def numpy_reference(ranks=(0, 1)) -> dict[str, float]:
    """One process evaluating the batches of `ranks`: the mean batch cost, the true error."""
    dp_model, script = job_module()
    batches = [b for rank in ranks for b in script.shard(rank)]
    costs, wrong = [], []
    for x, y in batches:
        prob = dp_model.forward(dp_model.initial_weights(), x.astype(np.float64))
        costs.append(float(np.mean(-np.log(prob[np.arange(len(y)), y]))))
        wrong.extend(np.argmax(prob, axis=1) != y)
    return {"validation_cost": float(np.mean(costs)), "validation_error": float(np.mean(wrong))}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The job's reports by rank, and the chief's stats.json records."""
    if not HAVE_HOROVOD:
        pytest.skip("horovod not installed: run nox -s horovod")
    base = tmp_path_factory.mktemp("hvd-eval")
    logdir = base / "log"
    run = launch_horovod_job(
        [sys.executable, str(SCRIPTS / "hvd_eval_job.py"), str(logdir)],
        2,
        timeout=JOB_TIMEOUT,
        cwd=base,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"},
    )
    if run.timed_out:
        pytest.fail(f"horovod job still running after {JOB_TIMEOUT:g} s:\n{run.output}")
    assert run.returncode == 0, run.output
    reports = {}
    for line in run.output.splitlines():
        _, tag, rest = line.partition("RANK-REPORT ")
        if tag:
            rep = json.loads(rest)
            reports[rep["rank"]] = rep
    assert sorted(reports) == [0, 1], run.output
    records = [r for r in json.loads((logdir / "stats.json").read_text()) if "epoch_num" in r]
    return {"reports": reports, "records": records}


@pytest.mark.procs
@pytest.mark.horovod
@pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: run nox -s horovod")
class TestEvaluationOnlyUnderHorovod:
    """steps_per_epoch=0, max_epoch=1, InferenceRunner(reduce=True) on each rank's shard."""

    def test_both_ranks_put_the_statistics_of_all_data(self, job):
        """Each rank's statistics are those of one process evaluating both shards (NumPy)."""
        want = numpy_reference()
        for rank, rep in job["reports"].items():
            assert rep["stats"] == pytest.approx(want, rel=1e-5), rank
            assert rep["global_step"] == 0, "no step ran"
            assert rep["runner_chief_only"] is False

    def test_chief_writes_them_to_stats_json(self, job):
        """The chief's stats.json holds one epoch record with the reduced statistics."""
        want = numpy_reference()
        (record,) = job["records"]
        assert record["epoch_num"] == 1
        assert record["global_step"] == 0
        assert {k: record[k] for k in want} == pytest.approx(want, rel=1e-5)

    def test_shards_differ(self):
        """Neither rank's own statistics equal the reference: the sum is what makes it right."""
        want = numpy_reference()
        for rank in (0, 1):
            own = numpy_reference((rank,))
            assert own["validation_cost"] != pytest.approx(want["validation_cost"], rel=1e-3)
