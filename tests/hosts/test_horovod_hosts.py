"""Horovod across simulated hosts: a whole run, a rank SIGKILLed, a restart with more ranks."""

from __future__ import annotations

import os
import time

import pytest
from hvd_hosts import (
    STEPS,
    checkpoint_step,
    epoch_steps,
    reports,
    run_hvd,
    shard_values,
    wait_until_only_sshd,
)

LOST_BOUND = 60.0
"""Seconds within which every rank has ended once a rank was SIGKILLed."""


pytestmark = [pytest.mark.timeout(1800), pytest.mark.procs]
"""Each test with its module fixtures: a fixture runs up to two jobs of JOB_TIMEOUT."""


@pytest.fixture(scope="module")
def whole_run(sim_hosts, tmp_path_factory):
    """Two epochs, rank 0 on host 0 and rank 1 on host 1."""
    base = tmp_path_factory.mktemp("across")
    job = run_hvd(sim_hosts, base, 2, [str(base / "log"), "2"])
    assert job.ok, job.output
    return {"job": job, "logdir": base / "log", "reports": reports(job.output)}


class TestAcrossHosts:
    def test_each_rank_on_its_host(self, whole_run, sim_hosts):
        """Rank i runs in host i's namespace (the one its sshd runs in), with its address."""
        found = whole_run["reports"]
        assert sorted(found) == [0, 1], whole_run["job"].output
        for rank, rep in found.items():
            assert rep["size"] == 2
            assert rep["is_chief"] == (rank == 0)
            assert rep["host"] == sim_hosts.addresses[rank]
            assert rep["netns"] == os.readlink(f"/proc/{sim_hosts.sshd[rank].pid}/ns/net")
            assert rep["global_step"] == 2 * STEPS

    def test_only_rank0_writes(self, whole_run):
        """Checkpoints, stats.json and one event file (rank 0's pid in its name) in the logdir."""
        logdir = whole_run["logdir"]
        files = sorted(os.listdir(logdir))
        assert {"model-4.index", "model-8.index", "stats.json", "checkpoint"} <= set(files)
        events = [f for f in files if f.startswith("events.out.tfevents")]
        assert len(events) == 1, files
        assert f".{whole_run['reports'][0]['pid']}." in events[0]
        assert epoch_steps(logdir) == [(1, 4), (2, 8)]
        assert checkpoint_step(logdir) == 8

    def test_each_rank_its_shard(self, whole_run):
        """Each rank's first epoch came from its own shard only; the shards do not overlap."""
        seen = {r: set(rep["seen"]) for r, rep in whole_run["reports"].items()}
        for rank, values in seen.items():
            assert len(whole_run["reports"][rank]["seen"]) == STEPS * 8
            assert values <= shard_values(rank, 2)
        assert not seen[0] & seen[1]


@pytest.fixture(scope="module")
def killed(sim_hosts, tmp_path_factory):
    base = tmp_path_factory.mktemp("killed")
    markers = base / "markers"
    markers.mkdir()
    logdir = base / "log"
    job = run_hvd(
        sim_hosts, base, 2, [str(logdir), "3", "--kill-at", "6", "--marker", str(markers)]
    )
    ended = time.time()
    after = wait_until_only_sshd(sim_hosts, LOST_BOUND)
    left = (sorted(os.listdir(logdir)), epoch_steps(logdir), checkpoint_step(logdir))
    resumed = run_hvd(sim_hosts, base, 3, [str(logdir), "3"])
    return {
        "job": job,
        "ended": ended,
        "killed_at": (markers / "step-6").stat().st_mtime,
        "after": after,
        "left": left,
        "logdir": logdir,
        "resumed": resumed,
        "base": base,
    }


class TestRankKilled:
    """Rank 1 SIGKILLed mid-epoch 2; the job ends, naming it; 3 ranks resume the logdir."""

    def test_job_fails_naming_the_rank(self, killed, sim_hosts):
        """One last line names rank 1 and its host; the launcher was not timed out."""
        job = killed["job"]
        assert not job.ok
        assert not job.timed_out
        assert "rank 1 kills itself at global step 6" in job.output
        assert job.failure is not None, job.output
        assert (job.failure.rank, job.failure.host) == (1, sim_hosts.addresses[1])
        # ssh passes no signal on: a remote rank killed by one is status 255
        assert job.failure.status == 255
        line = f"[horovod job failed: rank 1 on host {sim_hosts.addresses[1]} ended first"
        assert job.output.count(line) == 1, job.output
        assert job.output.rstrip().endswith(job.failure.line())
        assert reports(job.output) == {}

    def test_every_rank_ends_within_bound(self, killed):
        """The job ends within LOST_BOUND of the kill, and no rank is left on any host."""
        assert killed["ended"] - killed["killed_at"] < LOST_BOUND
        assert killed["after"] < 5.0

    def test_logdir_after_the_kill(self, killed):
        """Epoch 1's checkpoint (whole) and record only: nothing of the unfinished epoch 2."""
        files, stats, step = killed["left"]
        assert "model-4.index" in files
        assert not [f for f in files if f.startswith("model-8")]
        assert stats == [(1, 4)]
        assert step == 4

    def test_resumes_with_three_ranks(self, killed, sim_hosts):
        """Three ranks start at epoch 2, global step 4, and end at global step 12."""
        job = killed["resumed"]
        assert job.ok, job.output
        found = reports(job.output)
        assert sorted(found) == [0, 1, 2], job.output
        for rank, rep in found.items():
            assert rep["start"] == {"global_step": 4, "starting_epoch": 2}
            assert rep["global_step"] == 12
            assert rep["host"] == sim_hosts.addresses[rank]
            assert set(rep["seen"]) <= shard_values(rank, 3)

    def test_stats_and_checkpoint_exact(self, killed):
        """stats.json has each epoch once, at the steps of an uninterrupted run."""
        assert epoch_steps(killed["logdir"]) == [(1, 4), (2, 8), (3, 12)]
        assert checkpoint_step(killed["logdir"]) == 12
