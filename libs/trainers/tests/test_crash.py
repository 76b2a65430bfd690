"""Crash safety: training killed with SIGKILL at seeded random points, then resumed, is exact."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest
from crash_script import MAX_EPOCH, SCHEDULES, STEPS_PER_EPOCH

from towerkit.sessinit import get_all_checkpoints, load_checkpoint_vars, resolve_checkpoint

SCRIPT = os.path.join(os.path.dirname(__file__), "crash_script.py")
TOTAL = MAX_EPOCH * STEPS_PER_EPOCH
KILLS = 2
"""SIGKILLs per save schedule, one after the other in the same logdir."""

pytestmark = pytest.mark.slow


def run(logdir, schedule, *extra):
    """Run the script to its end or its kill; the completed process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, SCRIPT, str(logdir), schedule, *extra],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def kill_points(seed: int):
    """The seeded kill points of one schedule: (steps into the run, phase, delay in ms)."""
    rng = random.Random(seed)
    return [
        (rng.randint(1, TOTAL // 2), rng.choice(["run", "save", "timer"]), rng.uniform(0, 30))
        for _ in range(KILLS)
    ]


def variables(prefix):
    return load_checkpoint_vars(prefix)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The final variables and stats.json of a run that nothing interrupts."""
    logdir = tmp_path_factory.mktemp("uninterrupted") / "log"
    proc = run(logdir, "epoch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return variables(str(logdir / f"model-{TOTAL}")), (logdir / "stats.json").read_text()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_killed_and_resumed(tmp_path, schedule, uninterrupted):
    """Killed twice at seeded random points, then resumed: the uninterrupted run's end state."""
    expected_vars, expected_stats = uninterrupted
    logdir = tmp_path / "log"
    seed = SCHEDULES.index(schedule)
    outputs = []
    for after, phase, delay in kill_points(seed):
        proc = run(
            logdir,
            schedule,
            "--kill-after",
            str(after),
            "--phase",
            phase,
            "--delay-ms",
            f"{delay:.1f}",
        )
        outputs.append(
            f"--- kill after {after} ({phase}, {delay:.1f} ms)\n{proc.stdout}{proc.stderr}"
        )
        assert proc.returncode in (-signal.SIGKILL, 0), outputs[-1]
    final = run(logdir, schedule)
    log = "\n".join([*outputs, final.stdout, final.stderr])
    assert final.returncode == 0, log
    assert f"finished at global step {TOTAL}" in final.stdout, log

    assert (logdir / "stats.json").read_text() == expected_stats, log
    got = variables(resolve_checkpoint(str(logdir)))
    assert sorted(got) == sorted(expected_vars)
    for name, value in expected_vars.items():
        assert np.array_equal(got[name], value), f"{name} differs from the uninterrupted run"

    listed = json.dumps((logdir / "checkpoint").read_text())
    for prefix, step in get_all_checkpoints(str(logdir)):
        assert variables(prefix)["global_step"] == step, f"{prefix} loads and holds its step"
    state = (logdir / "checkpoint").read_text().splitlines()
    named = [line.split('"')[1] for line in state if line.startswith("all_model_checkpoint_paths")]
    assert named, listed
    for name in named:
        assert os.sep not in name, "the state file names checkpoints of this directory only"
        assert variables(str(logdir / name))["global_step"] <= TOTAL
    assert not [n for n in os.listdir(logdir) if n.startswith(".")], "no temporary left"
