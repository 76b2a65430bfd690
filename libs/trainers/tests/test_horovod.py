"""HorovodTrainer in real 2-process jobs over gloo on loopback; its lazy import everywhere."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import launch_horovod_job
from towerkit.trainers.parallel._horovod import rank_gpu

HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None


pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.slow,
    pytest.mark.xdist_group("test_horovod"),
]  # timeout: a module fixture runs horovod jobs of up to JOB_TIMEOUT (300 s)

SCRIPT = Path(__file__).parent / "scripts" / "hvd_job.py"
NP = 2
STEPS = 4
"""Steps per epoch in the job script."""

JOB_TIMEOUT = 300.0
"""Seconds a job may take at most (two TensorFlow imports on a busy machine dominate)."""

DEATH_BOUND = 240.0
"""Seconds within which a job whose rank died must have failed."""


def run_job(tmp_path: Path, *args: str) -> tuple[int, str, float]:
    """Run the job script on NP local gloo processes; return exit status, output and seconds.

    Past JOB_TIMEOUT the job's process group is stopped and the test fails, so a hanging
    job never hangs the test run.
    """
    job = launch_horovod_job(
        [sys.executable, str(SCRIPT), *args],
        NP,
        timeout=JOB_TIMEOUT,
        cwd=tmp_path,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"},
    )
    if job.timed_out:
        pytest.fail(f"horovod job still running after {JOB_TIMEOUT:g} s:\n{job.output}")
    return job.returncode, job.output, job.seconds


def reports(out: str, kind: str = "RANK-REPORT") -> dict[int, dict]:
    """Each rank's report in a job's output (lines ``KIND {json}``), by rank."""
    found = {}
    for line in out.splitlines():
        _, tag, rest = line.partition(f"{kind} ")
        if tag:
            report = json.loads(rest)
            found[report["rank"]] = report
    return found


def stats_records(logdir: Path) -> list[dict]:
    """The records of stats.json that carry an epoch."""
    with open(logdir / "stats.json") as f:
        return [r for r in json.load(f) if "epoch_num" in r]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """A 2-epoch job, then the same command to epoch 4 (rank 1 given a logdir it lacks)."""
    if not HAVE_HOROVOD:
        pytest.skip("horovod not installed: run nox -s horovod")
    base = tmp_path_factory.mktemp("hvd")
    logdir = base / "log"
    code, out, _ = run_job(base, str(logdir), "2", "--sum-check")
    assert code == 0, out
    first = reports(out)
    assert sorted(first) == [0, 1], out
    files = sorted(os.listdir(logdir))
    other = base / "rank1-log"
    code, out2, _ = run_job(base, str(logdir), "4", "--rank1-logdir", str(other), "--fp16")
    assert code == 0, out2
    second = reports(out2)
    assert sorted(second) == [0, 1], out2
    return {
        "logdir": logdir,
        "other": other,
        "first": first,
        "first_files": files,
        "second": second,
        "second_out": out2,
    }


@pytest.mark.procs
@pytest.mark.horovod
@pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: run nox -s horovod")
class TestHorovodJob:
    """Two ranks train one model: same variables, rank 0 alone writes files."""

    def test_rank_facts(self, jobs):
        """trainer.rank/size agree with hvd.rank()/size(); rank 0 alone is the chief."""
        for rank, rep in jobs["first"].items():
            assert (rep["rank"], rep["size"]) == (rep["hvd_rank"], rep["hvd_size"]) == (rank, NP)
            assert rep["is_chief"] == (rank == 0)

    def test_converges(self, jobs):
        """The cost falls and the model classifies held-out data well on both ranks."""
        for rep in jobs["first"].values():
            costs = rep["costs"]
            assert np.mean(costs[-STEPS:]) < 0.5 * np.mean(costs[:STEPS])
            assert rep["error"] < 0.1

    def test_identical_variables(self, jobs):
        """After each epoch (no broadcast in between) both ranks hold the same values."""
        a, b = jobs["first"][0]["epochs"], jobs["first"][1]["epochs"]
        assert sorted(a) == sorted(b) == ["1", "2"]
        for epoch in a:
            for name in a[epoch]:
                np.testing.assert_array_equal(a[epoch][name], b[epoch][name], err_msg=name)
        assert not np.array_equal(a["1"]["fc0/W"], a["2"]["fc0/W"])

    def test_only_rank0_writes(self, jobs):
        """Checkpoints, stats.json and one event file, all from rank 0 (its pid in the name)."""
        files = jobs["first_files"]
        assert "stats.json" in files
        assert {"model-4.index", "model-8.index"} <= set(files)
        events = [f for f in files if f.startswith("events.out.tfevents")]
        assert len(events) == 1
        assert f".{jobs['first'][0]['pid']}." in events[0]
        writers = {"ModelSaver", "JSONWriter", "TFEventWriter", "ScalarPrinter"}
        assert writers <= set(jobs["first"][0]["callbacks"])
        assert not writers & set(jobs["first"][1]["callbacks"])
        assert [r["global_step"] for r in stats_records(jobs["logdir"])] == [4, 8, 12, 16]

    def test_one_collective_per_step(self, jobs):
        """A step runs one grouped all-reduce, which carries the preemption vote with the gradients."""
        for rep in jobs["first"].values():
            ((kind, *inputs),) = rep["step_collectives"]
            assert kind == "HorovodGroupedAllreduce", rep["step_collectives"]
            assert "preemption_vote/signalled_here" in inputs, inputs
            assert len(inputs) > 1, inputs  # the gradients with it

    def test_per_rank_inputs(self, jobs):
        """The same data with a graph seed: each rank shuffles it differently."""
        first = jobs["first"]
        assert sorted(first[0]["first_batch"]) != sorted(first[1]["first_batch"])

    def test_average_and_sum(self, jobs):
        """One SGD step on gradients 1 (rank 0) and 2 (rank 1): mean -1.5, sum -3."""
        for rep in jobs["first"].values():
            assert rep["sum_check"]["average"] == [-1.5] * 3
            assert rep["sum_check"]["sum"] == [-3.0] * 3


@pytest.mark.procs
@pytest.mark.horovod
@pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: run nox -s horovod")
class TestHorovodResume:
    """AutoResumeTrainConfig on both ranks: rank 0's checkpoint and epoch win everywhere."""

    def test_same_start(self, jobs):
        """Both ranks resume at epoch 3, global step 8, though rank 1 found no checkpoint."""
        for rep in jobs["second"].values():
            assert rep["start"] == {"global_step": 8, "starting_epoch": 3, "max_epoch": 4}
        assert "on rank 0: using rank 0's" in jobs["second_out"]

    def test_rank1_creates_nothing(self, jobs):
        """Rank 1 keeps its logdir's path but never creates it."""
        assert jobs["second"][1]["logdir"] == str(jobs["other"])
        assert not jobs["other"].exists()

    def test_continues_identically(self, jobs):
        """Epochs 3 and 4 (fp16 gradients) keep the ranks equal and continue from epoch 2."""
        a, b = jobs["second"][0]["epochs"], jobs["second"][1]["epochs"]
        assert sorted(a) == ["3", "4"]
        for epoch in a:
            for name in a[epoch]:
                np.testing.assert_array_equal(a[epoch][name], b[epoch][name], err_msg=name)
        assert jobs["second"][0]["costs"][0] < np.mean(jobs["first"][0]["costs"][:STEPS])
        assert os.path.exists(jobs["logdir"] / "model-16.index")


@pytest.mark.procs
@pytest.mark.horovod
@pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: run nox -s horovod")
def test_mixed_float16_with_fp16_gradients(tmp_path):
    """Two ranks in mixed_float16, fp16 all-reduce: equal float32 variables, one loss scale."""
    from towerkit.sessinit import load_checkpoint_vars

    logdir = tmp_path / "log"
    code, out, _ = run_job(tmp_path, str(logdir), "2", "--precision", "mixed_float16", "--fp16")
    assert code == 0, out
    found = reports(out)
    a, b = found[0]["epochs"], found[1]["epochs"]
    assert sorted(a) == ["1", "2"]
    for epoch in a:
        for name in a[epoch]:
            np.testing.assert_array_equal(a[epoch][name], b[epoch][name], err_msg=name)
    assert found[0]["costs"][-1] < found[0]["costs"][0]
    records = stats_records(logdir)
    scales = [r["loss_scale"] for r in records]
    assert len(scales) == 2, records
    assert all(np.log2(v) == int(np.log2(v)) <= 15 for v in scales), scales
    ckpt = sorted(logdir.glob("model-*.index"), key=lambda p: int(p.stem.split("-")[1]))[-1]
    values = load_checkpoint_vars(str(ckpt)[: -len(".index")])
    assert values["loss_scale"] == scales[-1]
    assert {v.dtype for v in values.values() if v.dtype.kind == "f"} == {np.dtype(np.float32)}


@pytest.fixture(scope="module")
def preempted(tmp_path_factory):
    """The 2-epoch job of `jobs`, with SIGTERM sent to rank 1 alone after step 5; then resumed."""
    if not HAVE_HOROVOD:
        pytest.skip("horovod not installed: run nox -s horovod")
    base = tmp_path_factory.mktemp("hvd-preempt")
    logdir = base / "log"
    code, out, _ = run_job(base, str(logdir), "2", "--term-at", "5", "--term-rank", "1")
    files = sorted(os.listdir(logdir))
    positions = json.loads((logdir / "positions.json").read_text())
    stats = stats_records(logdir)
    code2, out2, _ = run_job(base, str(logdir), "2")
    return {
        "code": code,
        "out": out,
        "stopped": reports(out, "RANK-PREEMPTED"),
        "files": files,
        "positions": positions,
        "stats": stats,
        "resumed_code": code2,
        "resumed_out": out2,
        "resumed": reports(out2),
    }


@pytest.mark.procs
@pytest.mark.horovod
@pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: run nox -s horovod")
class TestPreemption:
    """A preemption signal to one rank stops every rank after the same step; the job resumes exactly."""

    def test_every_rank_stops_at_one_step(self, preempted):
        """Rank 1 alone gets SIGTERM after step 5: both ranks stop after step 6, with status 143."""
        out = preempted["out"]
        assert preempted["code"] != 0, out
        assert "rank 1 sends itself SIGTERM at global step 5" in out
        assert "rank 0: 1 other process(es) of the job were sent a preemption signal" in out
        stopped = preempted["stopped"]
        assert sorted(stopped) == [0, 1], out
        assert [stopped[r]["global_step"] for r in (0, 1)] == [6, 6]
        assert [len(stopped[r]["costs"]) for r in (0, 1)] == [6, 6]
        assert reports(out) == {}
        # horovodrun ends the job's other processes when the first exits with 143, so
        # which ranks report their status is a race; no rank exits before the chief saved
        exits = [out.find(f"Process {rank} exit with status code 143") for rank in (0, 1)]
        assert max(exits) >= 0, out
        saved = out.find("preempted: saved at global step 6")
        assert 0 <= saved < min(e for e in exits if e >= 0), out

    def test_chief_saved_at_that_step(self, preempted):
        """model-6 and its position (epoch 2, 2 of its 4 steps) are on disk; stats.json has epoch 1."""
        assert {"model-4.index", "model-6.index", "positions.json"} <= set(preempted["files"])
        at6 = [p for p in preempted["positions"]["positions"] if p["step"] == 6]
        # with the epoch length and the batch size the position was saved under (a resume checks both)
        want = {"step": 6, "epoch": 2, "done": 2, "data_steps": 6, "steps_per_epoch": 4}
        assert at6 == [{**want, "batch_size": 16}], preempted["positions"]
        assert [r["global_step"] for r in preempted["stats"]] == [4]

    def test_resumed_job_matches_the_uninterrupted_one(self, preempted, jobs):
        """The same command resumes at step 6 on both ranks and ends where `jobs` ended, bit for bit."""
        assert preempted["resumed_code"] == 0, preempted["resumed_out"]
        resumed, whole = preempted["resumed"], jobs["first"]
        for rank in (0, 1):
            assert resumed[rank]["start"]["global_step"] == 6
            assert (
                preempted["stopped"][rank]["costs"] + resumed[rank]["costs"] == whole[rank]["costs"]
            )
            for name, value in whole[rank]["epochs"]["2"].items():
                np.testing.assert_array_equal(resumed[rank]["epochs"]["2"][name], value, name)


@pytest.mark.procs
@pytest.mark.horovod
@pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: run nox -s horovod")
class TestRankDies:
    """A rank that dies fails the job within a bounded time, with a clear message."""

    def test_rank_exits(self, tmp_path):
        """Rank 1 exits at step 3: the job fails and says which process died."""
        code, out, seconds = run_job(tmp_path, str(tmp_path / "log"), "3", "--die-at", "3")
        assert code != 0, out
        assert "rank 1 exits at global step 3" in out
        assert "Process 1 exit with status code 3" in out
        assert reports(out) == {}
        survivor_said = "CollectiveError: HorovodTrainer rank 0 of 2: a collective operation failed"
        launcher_said = "Terminating remaining workers after failure of Process 1"
        assert survivor_said in out or launcher_said in out, out
        assert seconds < DEATH_BOUND

    def test_rank_leaves_before_the_loop(self, tmp_path):
        """Rank 1 leaves before the loop: rank 0's agreement fails, its logdir is given back.

        The run had not stepped, so what it wrote is removed and the lock released, as
        for any run that fails before its first step: a resume elsewhere is not refused.
        """
        logdir = tmp_path / "log"
        code, out, seconds = run_job(tmp_path, str(logdir), "3", "--leave-before-loop")
        assert code != 0, out
        assert "rank 1 leaves before the loop" in out
        left = [
            json.loads(line.partition("LOGDIR-AFTER-FAILURE ")[2])
            for line in out.splitlines()
            if "LOGDIR-AFTER-FAILURE " in line
        ]
        assert left == [None] or (len(left) == 1 and ".towerkit.lock" not in left[0]), out
        assert "agreeing on the loop parameters" in out, out
        assert not (logdir / ".towerkit.lock").exists()
        assert seconds < DEATH_BOUND


class TestRankGpu:
    """rank_gpu: the GPU of each horovod process."""

    @given(st.integers(0, 16), st.integers(0, 16))
    def test_choice(self, local_rank, visible):
        """None without GPUs; the only GPU; the local rank's GPU; an error beyond."""
        if visible > 1 and local_rank >= visible:
            with pytest.raises(ValueError, match=f"local rank {local_rank} has no GPU of its own"):
                rank_gpu(local_rank, visible)
            return
        got = rank_gpu(local_rank, visible)
        want = None if visible == 0 else ("0" if visible == 1 else str(local_rank))
        assert got == want


@pytest.mark.procs
class TestLazyImport:
    """horovod is imported by HorovodTrainer only, with an install hint when missing."""

    def test_missing_horovod(self):
        """The lib imports without horovod; HorovodTrainer() says how to install it."""
        code = (
            "import sys\n"
            "sys.modules['horovod'] = None\n"
            "import towerkit.trainers as t\n"
            "print('imported', 'horovod.tensorflow' in sys.modules)\n"
            "try:\n"
            "    t.HorovodTrainer()\n"
            "except ImportError as err:\n"
            "    print('ERROR', err)\n"
        )
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env
        )
        assert proc.returncode == 0, proc.stderr
        assert "imported False" in proc.stdout
        assert "ERROR HorovodTrainer needs horovod: install horovod built for TensorFlow" in (
            proc.stdout
        )
        assert "`install-horovod`" in proc.stdout
        assert "`nox -s horovod`" in proc.stdout
