"""Jobs under a real SLURM: srun's environment read, a cluster job preempted, requeued, resumed."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from towerkit.sessinit import load_checkpoint_vars

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "examples" / "cluster" / "slurm.sbatch"
"""The documented sbatch script, run as it is."""

STEPS = 1000
"""Steps per epoch: epochs 2 and 3 (after the test sees epoch 1 end) last seconds."""

EPOCHS = 3
JOB_LIMIT = 600.0
"""Seconds a job may take, start to end (TensorFlow starts slowly on a loaded machine)."""

pytestmark = [pytest.mark.timeout(1500), pytest.mark.procs]

PLACEMENT = """\
import json, os
from towerkit.trainers import cluster_placement, slurm_step
step, placement = slurm_step(os.environ), cluster_placement()
print("PLACEMENT " + json.dumps({"procid": step.procid, "node": os.environ["SLURMD_NODENAME"],
      "slots": step.task_slots(), "job": placement.job, "task": placement.task,
      "cluster": placement.cluster_dict()}), flush=True)
"""


def output(path: Path) -> str:
    """A job's output file, or nothing yet."""
    return path.read_text(errors="replace") if path.exists() else ""


def test_srun_environment(slurm, tmp_path):
    """Each task of a 2-node, 4-task step finds its node, slot and address, as srun placed it."""
    script = tmp_path / "placement.sbatch"
    program = tmp_path / "placement.py"
    program.write_text(PLACEMENT)
    script.write_text(f"#!/bin/bash\nsrun python {program}\n")
    out = tmp_path / "placement.out"
    options = (
        "--nodes=2",
        "--ntasks-per-node=2",
        f"--output={out}",
        "--export=ALL,TOWERKIT_PS_TASKS=1",
    )
    job = slurm.sbatch(script, *options, cwd=tmp_path)
    fields = slurm.wait_job(job, ("COMPLETED", "FAILED"), JOB_LIMIT)
    assert fields["JobState"] == "COMPLETED", output(out)
    seen = [
        json.loads(line.split(" ", 1)[1])
        for line in output(out).splitlines()
        if line.startswith("PLACEMENT ")
    ]
    assert sorted(s["procid"] for s in seen) == [0, 1, 2, 3], output(out)
    port = 30000 + (job % 1000) * 32
    cluster = {
        "ps": [f"tkn1:{port}"],
        "worker": [f"tkn1:{port + 1}", f"tkn2:{port}", f"tkn2:{port + 1}"],
    }
    for s in seen:
        assert s["slots"] == [["tkn1", 0], ["tkn1", 1], ["tkn2", 0], ["tkn2", 1]]
        assert s["node"] == s["slots"][s["procid"]][0]
        assert (s["job"], s["task"]) == (
            ("ps", 0) if s["procid"] == 0 else ("worker", s["procid"] - 1)
        )
        assert s["cluster"] == cluster


def final_state(logdir: Path) -> tuple[dict[str, np.ndarray], list[dict]]:
    """The last checkpoint's values and stats.json of a finished run."""
    values = load_checkpoint_vars(str(logdir / f"model-{STEPS * EPOCHS}"))
    return values, json.loads((logdir / "stats.json").read_text())


TRAINERS = ("replicated", "horovod")
"""``replicated``: a parameter server and the chief (worker 0), one per node; ``horovod``:
two ranks, one per node, their rendezvous from the step."""


@pytest.fixture(scope="module")
def preempted_jobs(slurm, tmp_path_factory):
    """For each trainer, an unbroken job and one sent USR1 once epoch 1 ended, all four at once.

    Each job holds one CPU on each node, so the four run side by side (the nodes have
    four); each preempted job is signalled when its own output shows epoch 1's end.
    Returns, per trainer, the directory, the two jobs' ``scontrol`` fields and outputs.
    """
    base = tmp_path_factory.mktemp("preempted")
    outs = {
        (t, kind): base / f"{t}-{kind}.out" for t in TRAINERS for kind in ("whole", "preempted")
    }
    jobs = {}
    for (trainer, kind), out in outs.items():
        args = ["--trainer", trainer, "--max-epoch", str(EPOCHS), "--steps-per-epoch", str(STEPS)]
        logdir = base / f"{trainer}-{kind}"
        jobs[(trainer, kind)] = slurm.sbatch(
            SBATCH, f"--output={out}", cwd=ROOT, args=["--logdir", str(logdir), *args]
        )
    waiting = {t for t in TRAINERS}
    end = time.monotonic() + JOB_LIMIT
    while waiting:
        for trainer in sorted(waiting):
            key = (trainer, "preempted")
            if "epoch 1/3" in output(outs[key]):
                slurm.run("scancel", "--signal=USR1", str(jobs[key]))
                waiting.discard(trainer)
                continue
            state = slurm.job(jobs[key])["JobState"]
            if state not in ("PENDING", "RUNNING", "CONFIGURING") or time.monotonic() > end:
                pytest.fail(
                    f"{trainer}: the job never finished epoch 1 ({state}): {output(outs[key])}"
                )
        time.sleep(0.2)
    fields = {
        key: slurm.wait_job(job, ("COMPLETED", "FAILED", "CANCELLED"), JOB_LIMIT)
        for key, job in jobs.items()
    }
    return {
        t: {
            "base": base,
            "jobs": jobs,
            "fields": fields,
            "outs": {k: output(outs[(t, k)]) for k in ("whole", "preempted")},
        }
        for t in TRAINERS
    }


@pytest.mark.parametrize("trainer", TRAINERS)
def test_job_preempted_requeued_resumes(preempted_jobs, trainer):
    """USR1 mid-run: the chief saves, the job requeues itself and ends as an unbroken run would."""
    run = preempted_jobs[trainer]
    whole_out, text = run["outs"]["whole"], run["outs"]["preempted"]
    assert run["fields"][(trainer, "whole")]["JobState"] == "COMPLETED", whole_out
    preempted = run["fields"][(trainer, "preempted")]
    assert (preempted["JobState"], preempted["Restarts"]) == ("COMPLETED", "1"), text
    saved = re.search(r"preempted: saved at global step (\d+)", text)
    assert saved, text
    assert STEPS < int(saved.group(1)) < STEPS * EPOCHS, "the signal came after the run's end"
    assert f"requeueing job {run['jobs'][(trainer, 'preempted')]}" in text
    logdir = run["base"] / f"{trainer}-preempted"
    assert f"resuming from the newest checkpoint ('{logdir}/model-{saved.group(1)}')" in text
    whole, resumed = final_state(run["base"] / f"{trainer}-whole"), final_state(logdir)
    assert sorted(whole[0]) == sorted(resumed[0])
    for name in whole[0]:
        np.testing.assert_array_equal(whole[0][name], resumed[0][name], err_msg=name)
    assert whole[1] == resumed[1]
    assert f"finished at global step {STEPS * EPOCHS}" in text


def test_failure_is_not_requeued(slurm, tmp_path):
    """A job that fails for another reason (a bad argument) ends FAILED, never requeued."""
    out = tmp_path / "bad.out"
    job = slurm.sbatch(
        SBATCH,
        f"--output={out}",
        cwd=ROOT,
        args=["--logdir", str(tmp_path / "bad"), "--trainer", "bogus"],
    )
    fields = slurm.wait_job(job, ("COMPLETED", "FAILED", "CANCELLED"), JOB_LIMIT)
    assert (fields["JobState"], fields["Restarts"], fields["ExitCode"]) == ("FAILED", "0", "2:0"), (
        output(out)
    )
    assert "invalid choice: 'bogus'" in output(out)
    assert "requeueing" not in output(out)
