"""Crash safety: training killed with SIGKILL at seeded random points, then resumed, is exact."""

from __future__ import annotations

import fcntl
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import prefork
import pytest
from crash_script import MAX_EPOCH, SCHEDULES, STEPS_PER_EPOCH

from towerkit.sessinit import (
    CheckpointNotFoundError,
    CheckpointVanishedError,
    get_all_checkpoints,
    load_checkpoint_vars,
    resolve_checkpoint,
)

SCRIPT = os.path.join(os.path.dirname(__file__), "crash_script.py")
TOTAL = MAX_EPOCH * STEPS_PER_EPOCH
KILLS = 2
"""SIGKILLs per save schedule, one after the other in the same logdir."""

pytestmark = [
    pytest.mark.procs,
    pytest.mark.timeout(600),
]  # timeout: each test trains, is killed and resumes several times


def run(logdir, schedule, *extra):
    """Run the script to its end or its kill; the completed process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return prefork.run(
        [sys.executable, SCRIPT, str(logdir), schedule, *extra], timeout=300, env=env
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
def uninterrupted(tmp_path_factory, worker_id):
    """The final variables and stats.json of a run that nothing interrupts.

    Made once per pytest run: the workers of a parallel run share the run's base
    temporary folder, and the first to get there trains while the others wait.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    logdir = shared / "crash-uninterrupted" / "log"
    with open(shared / "crash-uninterrupted.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "crash-uninterrupted.done"
        if not done.exists():
            shutil.rmtree(logdir.parent, ignore_errors=True)
            logdir.parent.mkdir()
            proc = run(logdir, "epoch")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            done.touch()
    return (
        variables(str(logdir / f"model-{TOTAL}")),
        (logdir / "stats.json").read_text(),
        logdir,
    )


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_killed_and_resumed(tmp_path, schedule, uninterrupted):
    """Killed twice at seeded random points, then resumed: the uninterrupted run's end state."""
    expected_vars, expected_stats, _ = uninterrupted
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


def assert_resumed_end(logdir, final, outputs, expected_vars, expected_stats):
    """The last run ended at the total step with the uninterrupted run's statistics and variables."""
    log = "\n".join([*outputs, final.stdout, final.stderr])
    assert final.returncode == 0, log
    assert f"finished at global step {TOTAL}" in final.stdout, log
    assert (logdir / "stats.json").read_text() == expected_stats, log
    got = variables(resolve_checkpoint(str(logdir)))
    for name, value in expected_vars.items():
        assert np.array_equal(got[name], value), f"{name} differs from the uninterrupted run"


def test_killed_in_a_background_write_and_resumed(tmp_path, uninterrupted):
    """ModelSaver(background=True) killed while its thread has a checkpoint under a temporary
    name: nothing of it is published (the state file names complete checkpoints only), and
    the resumed run sweeps the temporary and ends as the uninterrupted run does."""
    expected_vars, expected_stats, _ = uninterrupted
    logdir = tmp_path / "log"
    outputs = []
    for after in (4, 3):  # global steps 4, then 4 + 3 (or fewer: the resume point)
        for _ in range(3):  # a write that ends before it is seen is retried
            proc = run(logdir, "background", "--kill-after", str(after), "--phase", "write")
            outputs.append(f"--- kill in write after {after}\n{proc.stdout}{proc.stderr}")
            assert proc.returncode == -signal.SIGKILL, outputs[-1]
            if "KILLED IN WRITE" in proc.stdout:
                break
        assert "KILLED IN WRITE" in proc.stdout, "\n".join(outputs)
        temps = [n for n in os.listdir(logdir) if n.startswith(".model-")]
        assert temps, outputs[-1]
        for prefix, step in get_all_checkpoints(str(logdir)):
            assert variables(prefix)["global_step"] == step, f"{prefix} is complete"
    final = run(logdir, "background")
    assert_resumed_end(logdir, final, outputs, expected_vars, expected_stats)
    assert not [n for n in os.listdir(logdir) if n.startswith(".")], "no temporary left"


K = STEPS_PER_EPOCH
"""Steps per session call in the K-step crash test: one call per epoch."""


def test_killed_and_resumed_with_k_steps_per_call(tmp_path, uninterrupted):
    """K steps per call, killed twice at seeded points, resumed: the uninterrupted K-run's end."""
    reference = tmp_path / "reference"
    proc = run(reference, "epoch", "--k", str(K))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected_stats = (reference / "stats.json").read_text()
    expected_vars = variables(str(reference / f"model-{TOTAL}"))
    # the same epochs and global steps as one step per call
    _, stats_one, _ = uninterrupted
    steps = [(r["epoch_num"], r["global_step"]) for r in json.loads(stats_one)]
    assert [(r["epoch_num"], r["global_step"]) for r in json.loads(expected_stats)] == steps

    logdir = tmp_path / "log"
    rng = random.Random(27)
    outputs = []
    for _ in range(KILLS):
        after = K * rng.randint(1, TOTAL // K // 2)
        phase, delay = rng.choice(["run", "save", "timer"]), rng.uniform(0, 30)
        args = ["--k", str(K), "--kill-after", str(after), "--phase", phase]
        proc = run(logdir, "epoch", *args, "--delay-ms", f"{delay:.1f}")
        outputs.append(
            f"--- kill after {after} ({phase}, {delay:.1f} ms)\n{proc.stdout}{proc.stderr}"
        )
        assert proc.returncode in (-signal.SIGKILL, 0), outputs[-1]
    final = run(logdir, "epoch", "--k", str(K))
    assert_resumed_end(logdir, final, outputs, expected_vars, expected_stats)


# -- a logdir holding checkpoints this run did not write -------------------------------------


def assert_state_complete(logdir, newest):
    """Every checkpoint the state file names is complete and loads; this run's newest is there."""
    state = (logdir / "checkpoint").read_text()
    named = re.findall(r'all_model_checkpoint_paths: "([^"]*)"', state)
    assert f'model_checkpoint_path: "model-{newest}"' in state, state
    assert f"model-{newest}" in named, state
    for name in named:
        assert os.path.isfile(logdir / f"{name}.index"), (name, state)
        assert variables(str(logdir / name))["global_step"] == int(name.split("-")[-1])
    assert resolve_checkpoint(str(logdir)) == str(logdir / f"model-{newest}")


def aside(logdir):
    """The checkpoints moved aside, ``{folder: [step, ...]}``."""
    out = {}
    for name in sorted(os.listdir(logdir)):
        if re.fullmatch(r"superseded-\d{8}-\d{6}(-\d+)?", name):
            out[name] = sorted(s for _, s in get_all_checkpoints(str(logdir / name)))
    return out


def test_keep_after_longer_run(tmp_path):
    """A shorter second run with logdir_action="keep": its checkpoints survive, none is lost."""
    logdir = tmp_path / "log"
    first = run(logdir, "epoch")
    assert first.returncode == 0, first.stdout + first.stderr
    first_stats = json.loads((logdir / "stats.json").read_text())
    second = run(logdir, "k3", "--keep", "--max-epoch", "2")
    log = second.stdout + second.stderr
    assert second.returncode == 0, log
    assert "finished at global step 10" in second.stdout, log
    assert_state_complete(logdir, 10)
    assert sorted(s for _, s in get_all_checkpoints(str(logdir))) == [6, 9, 10]
    ((_, steps),) = aside(logdir).items()
    assert steps == [15, TOTAL], "the first run's checkpoints are moved aside, not deleted"
    assert "moved aside" in log
    assert json.loads((logdir / "stats.json.bak").read_text()) == first_stats
    assert [r["epoch_num"] for r in json.loads((logdir / "stats.json").read_text())] == [1, 2]
    assert not (logdir / ".towerkit.lock").exists()


def test_copied_checkpoints_start_afresh(tmp_path, uninterrupted):
    """Checkpoints copied in without stats.json: the fresh run moves them aside, ends exact."""
    expected_vars, expected_stats, source = uninterrupted
    logdir = tmp_path / "log"
    logdir.mkdir()
    for name in os.listdir(source):
        if name.startswith(f"model-{TOTAL}.") or name == "checkpoint":
            shutil.copy2(source / name, logdir / name)
    proc = run(logdir, "step")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "training starts afresh" in log, log
    assert_state_complete(logdir, TOTAL)
    assert list(aside(logdir).values()) == [[TOTAL]]
    assert (logdir / "stats.json").read_text() == expected_stats
    got = variables(str(logdir / f"model-{TOTAL}"))
    for name, value in expected_vars.items():
        assert np.array_equal(got[name], value), name


def test_resume_after_abandoned_epoch_saved_ahead(tmp_path, uninterrupted):
    """Killed in epoch 3 after saving steps 12-13 (positions lost), resumed from model-10, killed again."""
    expected_vars, expected_stats, _ = uninterrupted
    logdir = tmp_path / "log"
    first = run(logdir, "step", "--kill-after", "14", "--phase", "run")
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    assert {12, 13} <= {s for _, s in get_all_checkpoints(str(logdir))}
    # without their positions (an older run's checkpoints), 12 and 13 cannot be resumed
    # from inside epoch 3: the run restarts from model-10 and finds them ahead of it
    (logdir / "positions.json").unlink()
    second = run(logdir, "step", "--kill-after", "1", "--phase", "save")
    log = first.stdout + first.stderr + second.stdout + second.stderr
    assert second.returncode == -signal.SIGKILL, log
    assert_state_complete(logdir, 11)
    assert [12, 13] in aside(logdir).values(), log
    final = run(logdir, "step")
    log += final.stdout + final.stderr
    assert final.returncode == 0, log
    assert_state_complete(logdir, TOTAL)
    assert (logdir / "stats.json").read_text() == expected_stats
    got = variables(str(logdir / f"model-{TOTAL}"))
    for name, value in expected_vars.items():
        assert np.array_equal(got[name], value), name
    assert not [n for n in os.listdir(logdir) if n.startswith(".")], "no lock or temporary left"


def test_reader_racing_pruning_saver(tmp_path):
    """Reading a directory while a saver prunes it every step: never a false "corrupt"."""
    logdir = tmp_path / "log"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    proc = prefork.popen(
        [sys.executable, SCRIPT, str(logdir), "step", "--keep", "--max-epoch", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    reads, vanished = 0, []
    try:
        while proc.poll() is None and not (logdir / "checkpoint").exists():
            time.sleep(0.05)  # the directory and its first checkpoint appear
        while proc.poll() is None:
            try:
                load_checkpoint_vars(str(logdir))
                reads += 1
            except CheckpointVanishedError as err:
                vanished.append(str(err))
            except CheckpointNotFoundError:
                pass  # nothing saved yet
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out
    assert reads > 0, out
    for message in vanished:
        assert "was deleted or moved while it was being read" in message
        assert "restore" not in message.lower()
    assert_state_complete(logdir, 30 * STEPS_PER_EPOCH)
