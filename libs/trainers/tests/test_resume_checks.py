"""What a resume checks before it trusts a saved position: the pure rule, then real processes.

`preempt_script` is stopped by SIGTERM inside epoch 2, then run again with something
that contradicts the position saved there: an entry claiming another epoch than
``stats.json`` records, another batch size, another epoch length. Each rerun says in one
warning line what it does about it, and never continues from a position it cannot trust.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import prefork
import pytest
from hypothesis import given
from hypothesis import strategies as st
from preempt_script import BATCH, STEPS_PER_EPOCH

from towerkit.callbacks.plumbing import POSITIONS_FILENAME, SavedPosition, read_positions
from towerkit.sessinit import load_checkpoint_vars, resolve_checkpoint
from towerkit.trainers import PREEMPTED_EXIT_STATUS
from towerkit.trainers._resume_checks import data_skip, position_fault

SCRIPT = os.path.join(os.path.dirname(__file__), "preempt_script.py")
TERM_AT = STEPS_PER_EPOCH + 3


def lineage(step, spe, batch=None):
    """The position an uninterrupted run from epoch 1 saves after `step` steps, and its epoch ends."""
    pos = SavedPosition(
        step=step,
        epoch=(step - 1) // spe + 1,
        done=(step - 1) % spe + 1,
        data_steps=step,
        steps_per_epoch=spe,
        batch_size=batch,
    )
    ends = {e * spe: e for e in range(1, pos.epoch)}
    return pos, ends


class TestPositionFault:
    """`position_fault`: a position of the run's own lineage passes; a contradicted one is named."""

    @given(st.integers(1, 60), st.integers(1, 7))
    def test_own_lineage_is_trusted(self, step, spe):
        """Every position an uninterrupted run saves agrees with its statistics."""
        pos, ends = lineage(step, spe)
        assert position_fault(pos, ends, steps_per_epoch=spe) is None

    @given(st.integers(1, 60), st.integers(2, 7), st.integers(1, 5))
    def test_another_epoch_is_named(self, step, spe, shift):
        """An entry claiming another epoch than the statistics put before it."""
        pos, ends = lineage(step, spe)
        for epoch in (pos.epoch + shift, max(1, pos.epoch - shift)):
            if epoch == pos.epoch or ends.get(pos.step - pos.done) is None:
                continue
            wrong = SavedPosition(step=pos.step, epoch=epoch, done=pos.done, data_steps=pos.done)
            fault = position_fault(wrong, ends, steps_per_epoch=spe)
            assert fault is not None
            assert f"it says epoch {epoch}" in fault

    @given(st.integers(1, 60), st.integers(2, 7), st.integers(1, 7))
    def test_another_epoch_length_is_named(self, step, spe, other):
        """Inside an epoch of another length: not trusted; at its end: no matter."""
        pos, ends = lineage(step, spe)
        fault = position_fault(pos, ends, steps_per_epoch=other)
        assert (fault is not None) == (other != spe and pos.done < spe)

    @given(st.integers(2, 60), st.integers(2, 7), st.integers(0, 5))
    def test_less_data_than_steps_is_named(self, step, spe, fewer):
        """Fewer steps of data than steps of the epoch done cannot be."""
        pos, ends = lineage(step, spe)
        short = min(pos.done - 1, fewer)
        wrong = SavedPosition(step=pos.step, epoch=pos.epoch, done=pos.done, data_steps=short)
        fault = position_fault(wrong, ends, steps_per_epoch=spe)
        assert (fault is not None) == (pos.done > short)
        if fault is not None:
            assert f"the input gave {short} steps of data, fewer than" in fault


class TestDataSkip:
    """`data_skip`: another batch size skips the same datapoints, and says so."""

    @given(st.integers(0, 500), st.integers(1, 64), st.integers(1, 64))
    def test_same_datapoints(self, data_steps, old, new):
        pos = SavedPosition(step=data_steps, epoch=1, done=0, data_steps=data_steps, batch_size=old)
        steps, note = data_skip(pos, new)
        rest = data_steps * old - steps * new
        assert 0 <= rest < new
        assert (note is None) == (old == new)
        if note is not None:
            assert f"skips the {data_steps * old} datapoints consumed as {steps} steps" in note

    def test_unknown_sizes_skip_the_steps(self):
        pos = SavedPosition(step=5, epoch=1, done=5, data_steps=5)
        assert data_skip(pos, 16) == (5, None)
        assert data_skip(None, 16) == (None, None)


# -- real processes ---------------------------------------------------------------------


def run(logdir, *extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return prefork.run([sys.executable, SCRIPT, str(logdir), *extra], timeout=300, env=env)


def preempted(tmp_path, name):
    """A logdir whose run SIGTERM stopped 3 steps into epoch 2 (its position recorded)."""
    logdir = tmp_path / name / "log"
    proc = run(logdir, "--term-at", str(TERM_AT))
    assert proc.returncode == PREEMPTED_EXIT_STATUS, proc.stdout + proc.stderr
    (pos,) = [p for p in read_positions(str(logdir)) if p.step == TERM_AT]
    assert (pos.epoch, pos.done, pos.steps_per_epoch, pos.batch_size) == (2, 3, 10, BATCH)
    return logdir


def warnings_of(proc):
    return [line for line in proc.stdout.splitlines() if "AutoResumeTrainConfig:" in line]


@pytest.mark.procs
@pytest.mark.timeout(900)
def test_a_resume_checks_the_position_against_stats_and_the_new_run(tmp_path):
    """Another epoch claimed: not trusted, the run resumes at the epoch end before and ends as
    an uninterrupted run; another epoch length: the same; another batch size: the same
    datapoints skipped, said in one line."""
    plain = tmp_path / "plain" / "log"
    assert run(plain).returncode == 0
    want = load_checkpoint_vars(resolve_checkpoint(str(plain)))

    # an entry claiming epoch 1 (as the input's first epoch) where stats.json ended epoch 1
    logdir = preempted(tmp_path, "epoch")
    path = logdir / POSITIONS_FILENAME
    data = json.loads(path.read_text())
    for entry in data["positions"]:
        if entry["step"] == TERM_AT:
            entry.update(epoch=1, data_steps=3)
    path.write_text(json.dumps(data))
    proc = run(logdir)
    lines = warnings_of(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fault = (
        f"positions.json's entry for '{logdir}/model-{TERM_AT}' is not trusted: it says "
        "epoch 1, but stats.json records the end of epoch 1 at global step 10, just before "
        f"it; resuming from '{logdir}/model-10' instead"
    )
    assert any(fault in line for line in lines), proc.stdout
    got = load_checkpoint_vars(resolve_checkpoint(str(logdir)))
    for name, value in want.items():
        assert np.array_equal(got[name], value), f"{name}\n{proc.stdout}"
    assert (logdir / "stats.json").read_text() == (plain / "stats.json").read_text()

    # another epoch length (the dataset shrank, or another steps_per_epoch)
    logdir = preempted(tmp_path, "length")
    proc = run(logdir, "--steps-per-epoch", "8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(
        "it was saved after 3 of the 10 steps of epoch 2, and this run has steps_per_epoch=8"
        in line
        and line.endswith(f"resuming from '{logdir}/model-10' instead")
        for line in warnings_of(proc)
    ), proc.stdout
    assert "starting at epoch 2" in proc.stdout, proc.stdout

    # another batch size: the same 104 datapoints are skipped, in steps of 4
    logdir = preempted(tmp_path, "batch")
    proc = run(logdir, "--batch", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    note = (
        f"the checkpoint's run read batches of {BATCH} and this run reads batches of 4: the "
        f"input skips the {TERM_AT * BATCH} datapoints consumed as {TERM_AT * BATCH // 4} "
        "steps of 4"
    )
    assert any(note in line for line in warnings_of(proc)), proc.stdout
    assert f"skipping {TERM_AT * BATCH // 4} batches" in proc.stdout, proc.stdout
