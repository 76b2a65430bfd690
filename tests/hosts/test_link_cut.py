"""A host's network cable pulled mid-step: the job ends within the gloo timeout plus a bound."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hvd_hosts import GLOO_TIMEOUT, STEPS, checkpoint_step, epoch_steps, run_hvd

pytestmark = [
    pytest.mark.procs,
    pytest.mark.timeout(900),
]  # timeout: waits START_LIMIT (300 s), then the gloo timeout

START_LIMIT = 300.0
"""Seconds the job may take to start and reach the step at which the link is cut."""

CUT_BOUND = GLOO_TIMEOUT + 60.0
"""Seconds within which the job ends once host 1 is cut off: gloo notices the silent peer
after GLOO_TIMEOUT; the launcher then stops the other ranks."""


def test_link_cut_mid_step(hosts, tmp_path):
    """Rank 1's host goes off the network while rank 0 waits for it in an all-reduce.

    The job fails (not at the launcher's timeout) within CUT_BOUND of the cut, with one
    line naming the rank that failed first and its host (a rank that noticed the silent
    peer: gloo does not say which one went silent); the log directory keeps whole
    checkpoints and a stats.json with every finished epoch once.
    """
    markers = tmp_path / "markers"
    markers.mkdir()
    logdir = tmp_path / "log"
    args = [str(logdir), "1000", "--step-sleep", "0.3", "--marker", str(markers)]
    result = {}
    runner = threading.Thread(target=lambda: result.update(job=run_hvd(hosts, tmp_path, 2, args)))
    runner.start()
    start = time.monotonic()
    while not (markers / "step-6").exists():
        assert runner.is_alive(), result["job"].output
        assert time.monotonic() - start < START_LIMIT, "the job did not reach step 6"
        time.sleep(0.2)
    hosts.cut(1)
    cut_at = time.monotonic()
    runner.join(CUT_BOUND + 60)
    ended = time.monotonic()
    assert not runner.is_alive(), "the job did not end after the cut"
    job = result["job"]
    assert ended - cut_at < CUT_BOUND, job.output
    assert not job.ok
    assert not job.timed_out, job.output
    assert job.failure is not None, job.output
    assert job.failure.host == hosts.addresses[job.failure.rank]
    assert job.output.count(job.failure.line()) == 1
    assert job.output.rstrip().endswith(job.failure.line())
    assert "Timed out waiting" in job.output
    steps = epoch_steps(logdir)
    assert steps, os.listdir(logdir)
    assert steps == [(e, e * STEPS) for e in range(1, len(steps) + 1)]
    assert checkpoint_step(logdir) == steps[-1][1]
