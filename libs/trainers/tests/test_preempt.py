"""Preemption: SIGTERM saves where the run is, and the same command resumes there exactly.

Real processes (`preempt_script`): each is stopped with SIGTERM at seeded random steps,
then the same command runs to the end; the final variables and ``stats.json`` must equal
an uninterrupted run's bit for bit, and every global step must have run exactly once
across the processes.
"""

from __future__ import annotations

import json
import os
import random
import sys

import numpy as np
import prefork
import pytest
from preempt_script import MAX_EPOCH, STEPS_PER_EPOCH

from towerkit.callbacks.plumbing import POSITIONS_FILENAME, read_positions
from towerkit.sessinit import load_checkpoint_vars, resolve_checkpoint
from towerkit.trainers import PREEMPTED_EXIT_STATUS

SCRIPT = os.path.join(os.path.dirname(__file__), "preempt_script.py")
TOTAL = MAX_EPOCH * STEPS_PER_EPOCH

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]


def run(logdir, *extra):
    """Run the script to its end or its preemption; the completed process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return prefork.run([sys.executable, SCRIPT, str(logdir), *extra], timeout=300, env=env)


def steps_ran(logdir):
    """The global steps the processes ran, in order (from the script's step log)."""
    path = f"{logdir}.steps"
    with open(path, encoding="utf-8") as f:
        return [int(line) for line in f.read().split()]


def end_state(logdir):
    """The final checkpoint's variables and the statistics file's text."""
    return load_checkpoint_vars(resolve_checkpoint(str(logdir))), (
        logdir / "stats.json"
    ).read_text()


def uninterrupted(tmp_path_factory, k):
    logdir = tmp_path_factory.mktemp(f"preempt-plain-k{k}") / "log"
    proc = run(logdir, "--k", str(k))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert steps_ran(logdir) == list(range(1, TOTAL + 1))
    return end_state(logdir)


@pytest.fixture(scope="module")
def plain_k1(tmp_path_factory):
    return uninterrupted(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def plain_k5(tmp_path_factory):
    return uninterrupted(tmp_path_factory, 5)


def assert_same_end(logdir, expected, log, *, once=True):
    """The end state equals the uninterrupted run's, and every global step ran (once)."""
    want_vars, want_stats = expected
    got_vars, got_stats = end_state(logdir)
    ran = steps_ran(logdir)
    if once:
        assert ran == list(range(1, TOTAL + 1)), log
    else:
        assert sorted(set(ran)) == list(range(1, TOTAL + 1)), log
    assert got_stats == want_stats, log
    assert sorted(got_vars) == sorted(want_vars)
    for name, value in want_vars.items():
        assert np.array_equal(got_vars[name], value), (
            f"{name} differs from the uninterrupted run\n{log}"
        )
    records = json.loads(got_stats)
    assert [r["epoch_num"] for r in records] == list(range(1, MAX_EPOCH + 1)), "each epoch once"
    assert not [n for n in os.listdir(logdir) if n.startswith(".")], "no temporary left"


def term_points(seed, k, count):
    """Seeded global steps to preempt at, increasing, multiples of `k`, inside the run."""
    rng = random.Random(seed)
    return sorted(rng.sample(range(k, TOTAL, k), count))


@pytest.mark.parametrize(("k", "seed"), [(1, 0), (5, 1)])
def test_sigterm_at_random_steps_resumes_exactly(tmp_path, request, k, seed):
    """SIGTERM at 3 seeded steps (mid-epoch and epoch ends), resumed each time: the uninterrupted end."""
    expected = request.getfixturevalue(f"plain_k{k}")
    logdir = tmp_path / "log"
    log = []
    for at in term_points(seed, k, 3):
        proc = run(logdir, "--term-at", str(at), "--k", str(k))
        log.append(f"--- SIGTERM at {at}\n{proc.stdout}{proc.stderr}")
        assert proc.returncode == PREEMPTED_EXIT_STATUS, log[-1]
        assert steps_ran(logdir)[-1] == at, "the process stops right after the call in flight"
        saved = {p.step: p for p in read_positions(str(logdir))}
        assert at in saved, f"a checkpoint at step {at} with its position\n{log[-1]}"
        assert saved[at].done == (at - 1) % STEPS_PER_EPOCH + 1
        assert os.path.isfile(logdir / f"model-{at}.index")
        assert "resumes there" in proc.stdout, log[-1]
    final = run(logdir, "--k", str(k))
    log.append(f"--- to the end\n{final.stdout}{final.stderr}")
    text = "\n".join(log)
    assert final.returncode == 0, text
    assert f"finished at global step {TOTAL}" in final.stdout, text
    assert "saved after" in text, "a resume from a mid-epoch checkpoint was logged"
    assert_same_end(logdir, expected, text)
    assert (logdir / POSITIONS_FILENAME).is_file()


def test_sigterm_during_a_save_and_twice(tmp_path, plain_k1):
    """SIGTERM a few ms after an epoch's last step (in its save, statistics or validation),
    then two SIGTERMs at once: every run still resumes to the uninterrupted end."""
    logdir = tmp_path / "log"
    log = []
    for extra in (
        ["--term-at", str(STEPS_PER_EPOCH), "--delay-ms", "5"],
        ["--term-at", str(2 * STEPS_PER_EPOCH + 3), "--twice"],
        ["--term-at", str(3 * STEPS_PER_EPOCH), "--delay-ms", "40"],
    ):
        proc = run(logdir, *extra)
        log.append(f"--- {' '.join(extra)}\n{proc.stdout}{proc.stderr}")
        assert proc.returncode in (PREEMPTED_EXIT_STATUS, 0), log[-1]
        if "--twice" in extra:
            assert proc.returncode == PREEMPTED_EXIT_STATUS, log[-1]
            assert "again: the process exits now" in proc.stdout, log[-1]
    final = run(logdir)
    log.append(f"--- to the end\n{final.stdout}{final.stderr}")
    text = "\n".join(log)
    assert final.returncode == 0, text
    # the second SIGTERM exits before the save: the steps after the last checkpoint run again
    assert_same_end(logdir, plain_k1, text, once=False)


def test_sigterm_with_background_saves(tmp_path, plain_k1):
    """ModelSaver(background=True): SIGTERM inside an epoch and a few ms after an epoch's end
    (a write in flight): the preemption's save is on disk when the process exits, and the
    resumed runs end as the uninterrupted (blocking) one does."""
    logdir = tmp_path / "log"
    log = []
    for extra in (
        ["--term-at", "7"],
        ["--term-at", str(2 * STEPS_PER_EPOCH), "--delay-ms", "3"],
        ["--term-at", str(2 * STEPS_PER_EPOCH + 6)],
    ):
        proc = run(logdir, "--background", *extra)
        log.append(f"--- {' '.join(extra)}\n{proc.stdout}{proc.stderr}")
        assert proc.returncode == PREEMPTED_EXIT_STATUS, log[-1]
        last = steps_ran(logdir)[-1]
        assert os.path.isfile(logdir / f"model-{last}.index"), log[-1]
        assert last in {p.step for p in read_positions(str(logdir))}, log[-1]
    final = run(logdir, "--background")
    log.append(f"--- to the end\n{final.stdout}{final.stderr}")
    text = "\n".join(log)
    assert final.returncode == 0, text
    assert_same_end(logdir, plain_k1, text)


def test_grace_running_out_exits_and_resumes(tmp_path, plain_k1):
    """An after_train slower than the grace: the process exits at the grace's end, the
    checkpoint saved before it stays, and the next run resumes exactly."""
    logdir = tmp_path / "log"
    proc = run(logdir, "--term-at", "13", "--grace", "1", "--slow-end", "60")
    out = proc.stdout + proc.stderr
    assert proc.returncode == PREEMPTED_EXIT_STATUS, out
    assert "grace ran out" in proc.stdout, out
    assert os.path.isfile(logdir / "model-13.index"), out
    final = run(logdir)
    text = f"{out}\n--- to the end\n{final.stdout}{final.stderr}"
    assert final.returncode == 0, text
    assert_same_end(logdir, plain_k1, text)
