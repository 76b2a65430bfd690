"""Elastic HorovodTrainer in real horovodrun jobs: a rank SIGKILLed mid-epoch, a host added.

The hosts are names of this machine (``localhost``, ``127.0.0.1``): horovod runs their
processes locally and, in elastic mode, blacklists the host of a failed process, so the
rank to kill runs alone on ``127.0.0.1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from towerkit.trainers import launch_horovod_job

HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None
pytestmark = [
    pytest.mark.timeout(900),  # a job may wait JOB_TIMEOUT (420 s) for a re-formed ring
    pytest.mark.horovod,
    pytest.mark.procs,
    pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: run nox -s horovod"),
]

SCRIPT = Path(__file__).parent / "scripts" / "hvd_elastic_job.py"
STEPS = 4
"""Steps per epoch in the job script."""
JOB_TIMEOUT = 420.0
"""Seconds a job may take at most: three TensorFlow imports, one gloo timeout, a re-form."""
GLOO_TIMEOUT = 30.0
"""Seconds a rank waits in a collective for a peer that is gone (the roll back's trigger)."""
JOIN_GLOO_TIMEOUT = 240.0
"""The same when a host joins: it also bounds how long the others wait in the new ring's
rendezvous for the newcomer, which must import TensorFlow and build its graph first."""


def discovery(path: Path, *hosts: str) -> None:
    """Write the host discovery script listing `hosts` (replaced atomically)."""
    tmp = path.with_suffix(".new")
    tmp.write_text("#!/bin/sh\n" + "".join(f"echo {h}\n" for h in hosts))
    tmp.chmod(0o755)
    os.replace(tmp, path)


def run_elastic(
    tmp_path: Path, processes: int, lo: int, hi: int, *args: str, gloo_timeout=GLOO_TIMEOUT
):
    job = launch_horovod_job(
        [sys.executable, str(SCRIPT), str(tmp_path / "log"), *args],
        processes,
        timeout=JOB_TIMEOUT,
        cwd=tmp_path,
        gloo_timeout=gloo_timeout,
        # with one host at the start, horovod needs the interface named
        network_interface="lo",
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"},
        min_processes=lo,
        max_processes=hi,
        host_discovery_script=tmp_path / "discover.sh",
    )
    if job.timed_out:
        pytest.fail(f"elastic job still running after {JOB_TIMEOUT:g} s:\n{job.output}")
    return job


def reports(out: str) -> list[dict]:
    """The report of each process that finished, in the order printed."""
    found = []
    for line in out.splitlines():
        _, tag, rest = line.partition("ELASTIC-REPORT ")
        if tag:
            found.append(json.loads(rest))
    return found


def epochs_in_stats(logdir: Path) -> list[int]:
    with open(logdir / "stats.json") as f:
        return [r["epoch_num"] for r in json.load(f) if "epoch_num" in r]


def check_checkpoint(logdir: Path, global_step: int, model: dict) -> None:
    """The latest checkpoint loads and holds the final step and rank 0's final variables."""
    path = tf.train.latest_checkpoint(str(logdir))
    assert path is not None
    assert path.endswith(f"-{global_step}")
    reader = tf.train.load_checkpoint(path)
    assert int(reader.get_tensor("global_step")) == global_step
    for name in ("fc0/W", "fc1/b"):
        np.testing.assert_allclose(reader.get_tensor(name), np.asarray(model[name]))


def test_rank_killed_mid_epoch(tmp_path):
    """3 ranks, min 2: rank 2 SIGKILLs itself at global step 6 (epoch 2, its second step).

    The two others roll back to their last commit (the end of epoch 1: commits come every
    3 steps, the next at step 7), re-form as 2 ranks and end at global step 16 like an
    uninterrupted run; stats.json has each epoch once, the checkpoint loads, the learning
    rate schedule went on.
    """
    discovery(tmp_path / "discover.sh", "localhost:2", "127.0.0.1:1")
    epochs = 4
    job = run_elastic(
        tmp_path, 3, 2, 3, str(epochs), "--commit-every", "3", "--kill-rank", "2", "--kill-at", "6"
    )
    assert job.ok, job.output
    assert job.seconds < JOB_TIMEOUT
    killed = (tmp_path / "killed").read_text().split()
    assert killed[1:] == ["6", "2", "1"], killed  # global step 6, epoch 2, local step 1
    found = reports(job.output)
    assert sorted(r["first_rank"] for r in found) == [0, 1], job.output
    assert all(int(killed[0]) != r["pid"] for r in found)
    final = epochs * STEPS
    for r in found:
        assert r["global_step"] == final
        assert r["end"]["global_step"] == final
        assert (r["first_size"], r["size"]) == (3, 2)
        seen = [s[0] for s in r["steps"]]
        # steps 5 and 6 ran with 3 ranks, again with 2 after the roll back to step 4
        assert seen == [1, 2, 3, 4, 5, 6, 5, 6, *range(7, final + 1)], r["steps"]
        assert [s[3] for s in r["steps"]] == [3] * 6 + [2] * (final - 4)
        assert r["epochs_begun"] == list(range(1, epochs + 1))
        assert r["end"]["learning_rate"] == pytest.approx(0.02)
        # averaging divides by the current ring's size: 1.0 averaged is 1.0 with 2 ranks too
        assert len(r["average_probes"]) == len(r["steps"])
        assert set(r["average_probes"]) == {1.0}
    chief, other = sorted(found, key=lambda r: r["rank"])
    assert chief["is_chief"]
    assert not other["is_chief"]
    assert chief["end"] == other["end"]  # one model: the survivors stayed in step
    logdir = tmp_path / "log"
    assert epochs_in_stats(logdir) == list(range(1, epochs + 1))
    check_checkpoint(logdir, final, chief["end"])
    assert "rolled back to the last commit (epoch 2, 0 steps done, global step 4)" in job.output


def test_host_added_joins(tmp_path):
    """2 ranks, max 3: a host added to the discovery script mid-run joins at a commit.

    The newcomer starts from rank 0's committed state (its first step follows that
    commit), all three end at the same global step as an uninterrupted run, and
    stats.json has each epoch once. The job trains in mixed_bfloat16 with a loss scale
    that doubles after every step: the newcomer takes it with the committed state.
    """
    script = tmp_path / "discover.sh"
    discovery(script, "localhost:2")
    progress = tmp_path / "progress"
    added = threading.Event()

    def add_host() -> None:
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:
            text = progress.read_text() if progress.exists() else ""
            if text and int(text) >= 3:
                discovery(script, "localhost:2", "127.0.0.1:1")
                added.set()
                return
            time.sleep(0.2)

    adder = threading.Thread(target=add_host, daemon=True)
    adder.start()
    epochs = 6
    job = run_elastic(
        tmp_path,
        2,
        2,
        3,
        str(epochs),
        "--commit-every",
        "2",
        "--step-sleep",
        "0.5",
        "--progress",
        str(progress),
        # in bfloat16 with a loss scale that doubles after every applied step: the
        # newcomer takes it with the committed state (one scale on every rank)
        *("--precision", "mixed_bfloat16", "--grow-scale"),
        gloo_timeout=JOIN_GLOO_TIMEOUT,
    )
    adder.join(5)
    assert added.is_set()
    assert job.ok, job.output
    found = reports(job.output)
    assert len(found) == 3, job.output
    final = epochs * STEPS
    newcomer = [r for r in found if r["first_size"] == 3]
    assert len(newcomer) == 1, found
    (new,) = newcomer
    first = new["steps"][0][0]
    assert 3 < first <= final
    # the newcomer's first step follows a commit: an epoch's end or every 2 steps
    assert (first - 1) % 2 == 0
    assert [s[0] for s in new["steps"]] == list(range(first, final + 1))
    for r in found:
        assert r["global_step"] == r["end"]["global_step"] == final
        assert r["size"] == 3
    assert sum(r["is_chief"] for r in found) == 1
    ends = [r["end"] for r in found]
    assert ends[0] == ends[1] == ends[2]
    assert ends[0]["loss_scale"] == 2.0**final
    logdir = tmp_path / "log"
    assert epochs_in_stats(logdir) == list(range(1, epochs + 1))
    chief = next(r for r in found if r["is_chief"])
    check_checkpoint(logdir, final, chief["end"])


REFUSALS = """
import os
from towerkit.trainers import HorovodTrainer
cases = [
    ("0", dict(elastic=True)),
    ("0", dict(commit_every_k_steps=2)),
    ("0", dict(elastic=1)),
    ("1", dict(elastic=True, commit_every_k_steps=0)),
]
for flag, kw in cases:
    os.environ["HOROVOD_ELASTIC"] = flag
    try:
        HorovodTrainer(**kw)
    except (ValueError, TypeError) as err:
        print("REFUSED", type(err).__name__, err)
    else:
        print("ACCEPTED", kw)
"""


def test_refusals(tmp_path):
    """Outside an elastic launch, with a bad commit interval or a commit interval alone."""
    out = subprocess.run(
        [sys.executable, "-c", REFUSALS],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(("REFUSED", "ACCEPTED"))]
    assert len(lines) == 4, out.stdout + out.stderr
    assert "runs only in an elastic horovod job" in lines[0]
    assert "--host-discovery-script" in lines[0]
    assert "'commit_every_k_steps' is for elastic training" in lines[1]
    assert lines[2].startswith("REFUSED TypeError 'elastic' must be a bool")
    assert "'commit_every_k_steps' must be an int >= 1; got 0" in lines[3]


def third_local_name() -> str | None:
    """This machine's host name when it resolves to one of its own addresses (horovod then
    starts its ranks without ssh), else None."""
    import socket

    import psutil

    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        return None
    ours = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    return name if name not in ("localhost", "127.0.0.1") and address in ours else None


def test_chief_lost_rank_0_takes_over(tmp_path):
    """The first rank 0 (one rank per host name) SIGKILLed at the end of epoch 2: the job goes on.

    It dies once its monitors wrote epoch 2 (checkpoint 8 and the stats.json record
    saved), while the two others commit the epoch's end: they keep that commit, re-form
    in the collective the lost rank left, and the new rank 0 takes the logdir over at
    epoch 3: its lock, the savers and writers, which start there as a run resumed at
    epoch 3 would (keeping the lost owner's records and checkpoints). The job ends at
    the global step of an uninterrupted run, with no step run twice; stats.json has each
    epoch once, checkpoints load, and the lock is given back at the end.
    """
    third = third_local_name()
    if third is None:
        pytest.skip("this machine's host name does not resolve to one of its addresses")
    # one rank per host: the lost rank's host is blacklisted, two ranks are left
    discovery(tmp_path / "discover.sh", "localhost:1", "127.0.0.1:1", f"{third}:1")
    epochs = 4
    job = run_elastic(
        tmp_path,
        3,
        2,
        3,
        str(epochs),
        "--commit-every",
        "3",
        "--kill-rank",
        "0",
        "--kill-at-epoch-end",
        "2",
    )
    assert job.ok, job.output
    assert job.seconds < JOB_TIMEOUT
    killed = (tmp_path / "killed").read_text().split()
    assert killed[1:] == ["8", "2", "3"], killed  # global step 8, epoch 2, its last step
    found = reports(job.output)
    assert sorted(r["first_rank"] for r in found) == [1, 2], job.output
    final = epochs * STEPS
    for r in found:
        assert r["global_step"] == r["end"]["global_step"] == final
        assert (r["first_size"], r["size"]) == (3, 2)
        assert [s[0] for s in r["steps"]] == list(range(1, final + 1))
        assert [s[3] for s in r["steps"]] == [3] * 8 + [2] * 8
        assert r["end"]["learning_rate"] == pytest.approx(0.02)
    owner, other = sorted(found, key=lambda r: r["rank"])
    assert owner["is_chief"]
    assert not other["is_chief"]
    assert owner["end"] == other["end"]
    assert "rolled back to the last commit (epoch 3, 0 steps done, global step 8)" in job.output
    assert job.output.count("takes it over at epoch 3, global step 8") == 1, job.output
    assert f"pid {killed[0]} on " in job.output
    logdir = tmp_path / "log"
    with open(logdir / "stats.json") as f:
        records = json.load(f)
    assert [(r["epoch_num"], r["global_step"]) for r in records] == [
        (1, 4),
        (2, 8),
        (3, 12),
        (4, 16),
    ]
    assert not (logdir / "stats.json.bak").exists()  # nothing of the lost owner's dropped
    check_checkpoint(logdir, final, owner["end"])
    state = tf.train.get_checkpoint_state(str(logdir))
    steps = [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]
    assert steps == [4, 8, 12, 16], steps  # 4 and 8 from the lost owner
    assert not (logdir / ".towerkit.lock").exists()
    events = sorted(logdir.glob("events.out.tfevents.*"))
    assert len(events) == 2, events  # one per process that owned the logdir
