"""Elastic horovod across the simulated hosts: rank 0, the logdir's owner, SIGKILLed mid-epoch.

Each rank runs on its own host (one slot each, the discovery script lists the three);
the launcher runs on host 0 and starts the ranks over ssh. When a rank dies, horovod
blacklists its host and the two others roll back to their last commit, re-form and go
on to the global step of an uninterrupted run; the new rank 0 takes the logdir over.
(A rank other than 0 lost is tested on one machine, in the trainers lib's tests.)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hvd_hosts import ROOT, checkpoint_step, epoch_steps
from simhosts import IFACE, SimulatedHosts, host_list

from towerkit.trainers import launch_horovod_job

SCRIPTS = ROOT / "libs" / "trainers" / "tests" / "scripts"
SCRIPT = SCRIPTS / "hvd_elastic_job.py"
STEPS = 4
"""Steps per epoch of the job script."""

JOB_TIMEOUT = 480.0
"""Seconds the job may take: three TensorFlow imports over ssh, a gloo timeout, a re-form."""

GLOO_TIMEOUT = 30.0
"""Seconds a rank waits in a collective for a peer that is gone (the roll back's trigger)."""

pytestmark = [pytest.mark.timeout(900), pytest.mark.procs]


def discovery(path: Path, hosts: list[str]) -> None:
    """The host discovery script listing `hosts`, one ``address:slots`` per line."""
    path.write_text("#!/bin/sh\n" + "".join(f"echo {h}\n" for h in hosts))
    path.chmod(0o755)


def run_elastic(hosts: SimulatedHosts, cwd: Path, args: list[str]):
    """The elastic job script as 3 ranks (at least 2) on the 3 hosts, launched from host 0."""
    script = cwd / "discover.sh"
    discovery(script, host_list(hosts.addresses[:3]))
    env = {
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(SCRIPTS), os.environ.get("PYTHONPATH")) if p),
    }
    return launch_horovod_job(
        [sys.executable, str(SCRIPT), str(cwd / "log"), *args],
        3,
        timeout=JOB_TIMEOUT,
        cwd=cwd,
        env=hosts.env({**os.environ, **env}),
        gloo_timeout=GLOO_TIMEOUT,
        grace=5,
        network_interface=IFACE,
        ssh_identity_file=hosts.identity_file,
        launcher_prefix=hosts.exec_argv(0),
        min_processes=2,
        max_processes=3,
        host_discovery_script=script,
    )


def reports(out: str) -> list[dict]:
    """The ``ELASTIC-REPORT`` of each process that finished."""
    found = []
    for line in out.splitlines():
        _, tag, rest = line.partition("ELASTIC-REPORT ")
        if tag:
            found.append(json.loads(rest))
    return found


def test_rank_0_killed_mid_epoch_across_hosts(hosts, tmp_path):
    """Rank 0 (on host 0, which owns the logdir) SIGKILLs itself at global step 6, in epoch 2.

    The two others roll back to the end of epoch 1 (commits every 3 steps: the next
    would have been at step 7), re-form as 2 ranks on hosts 1 and 2, and the new rank 0
    takes the logdir over. The job ends at global step 16 like an uninterrupted run:
    stats.json has each epoch once, the checkpoint holds step 16 and loads whole, the
    survivors hold the same variables, the lock is given back.
    """
    epochs = 4
    args = [str(epochs), "--commit-every", "3", "--kill-rank", "0", "--kill-at", "6"]
    job = run_elastic(hosts, tmp_path, args)
    assert not job.timed_out, job.output
    assert job.ok, job.output
    assert job.seconds < JOB_TIMEOUT
    killed = (tmp_path / "killed").read_text().split()
    assert killed[1:] == ["6", "2", "1"], killed  # global step 6, epoch 2, local step 1
    found = reports(job.output)
    assert sorted(r["first_rank"] for r in found) == [1, 2], job.output
    final = epochs * STEPS
    for r in found:
        assert r["global_step"] == r["end"]["global_step"] == final
        assert (r["first_size"], r["size"]) == (3, 2)
        seen = [s[0] for s in r["steps"]]
        assert seen == [1, 2, 3, 4, 5, 6, 5, 6, *range(7, final + 1)], r["steps"]
        assert set(r["average_probes"]) == {1.0}  # averaged by the current ring's size
    owner, other = sorted(found, key=lambda r: r["rank"])
    assert owner["is_chief"]
    assert not other["is_chief"]
    assert owner["end"] == other["end"]
    logdir = tmp_path / "log"
    assert epoch_steps(logdir) == [(e, e * STEPS) for e in range(1, epochs + 1)]
    assert checkpoint_step(logdir) == final
    assert not (logdir / ".towerkit.lock").exists()
    assert "rolled back to the last commit (epoch 2, 0 steps done, global step 4)" in job.output
    assert job.output.count("takes it over at epoch 2, global step 4") == 1, job.output
