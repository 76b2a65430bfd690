"""A stop decided with a preemption pending: the stop wins (real processes, real SIGTERM).

`preempt_script --early-stop` stops at the end of epoch `EARLY_STOP_EPOCH` by
`EarlyStopping`. A SIGTERM in that epoch's last step (all K steps of the session call
that ends it) must end the run as stopped: status 0, the same checkpoint, weights and
``stats.json`` as the uninterrupted run, and a rerun of the command does what it does after
an ordinary stop.
"""

from __future__ import annotations

import os
import sys

import hypothesis.strategies as st
import numpy as np
import prefork
import pytest
from hypothesis import given
from preempt_script import EARLY_STOP_EPOCH, STEPS_PER_EPOCH

from towerkit.sessinit import load_checkpoint_vars, resolve_checkpoint
from towerkit.trainers import PREEMPTED_EXIT_STATUS
from towerkit.trainers._loop_end import SignalStop, loop_outcome, stop_requested

SCRIPT = os.path.join(os.path.dirname(__file__), "preempt_script.py")
STOP_STEP = EARLY_STOP_EPOCH * STEPS_PER_EPOCH


def run(logdir, *extra):
    """Run the script with `EarlyStopping` to its end or its preemption; the completed process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, SCRIPT, str(logdir), "--early-stop", *extra]
    return prefork.run(cmd, timeout=300, env=env)


def steps_ran(logdir):
    with open(f"{logdir}.steps", encoding="utf-8") as f:
        return [int(line) for line in f.read().split()]


def end_state(logdir):
    return load_checkpoint_vars(resolve_checkpoint(str(logdir))), (
        logdir / "stats.json"
    ).read_text()


class TestLoopOutcome:
    """`loop_outcome`: the rule that a callback's stop wins over a pending preemption."""

    @given(preempted=st.booleans(), ctrl_c=st.booleans())
    def test_a_callback_stop_is_never_a_preemption(self, preempted, ctrl_c):
        """With a callback's stop the run ends stopped (or interrupted by Ctrl-C), never preempted."""
        got = loop_outcome(callback_stop=True, preempted=preempted, ctrl_c=ctrl_c)
        assert got == ("interrupted" if ctrl_c else "stopped")

    @given(callback_stop=st.booleans(), preempted=st.booleans(), ctrl_c=st.booleans())
    def test_preempted_only_when_only_the_signal_asked(self, callback_stop, preempted, ctrl_c):
        """``"preempted"`` exactly when a preemption alone stopped the loop."""
        got = loop_outcome(callback_stop=callback_stop, preempted=preempted, ctrl_c=ctrl_c)
        assert (got == "preempted") == (preempted and not callback_stop and not ctrl_c)
        assert (got == "interrupted") == ctrl_c

    def test_stop_requested(self):
        """A hook's request is a callback's decision; a signal's alone is a `SignalStop`."""
        assert not isinstance(stop_requested(True), SignalStop)
        assert isinstance(stop_requested(False), SignalStop)


def assert_same(logdir, want, text):
    want_vars, want_stats = want
    got_vars, got_stats = end_state(logdir)
    assert got_stats == want_stats, text
    assert sorted(got_vars) == sorted(want_vars)
    for name, value in want_vars.items():
        assert np.array_equal(got_vars[name], value), f"{name} differs\n{text}"


@pytest.mark.procs
@pytest.mark.timeout(900)
@pytest.mark.parametrize("k", [1, 5])
def test_sigterm_in_the_stop_epochs_last_step_ends_as_stopped(tmp_path, k):
    """SIGTERM in the last step of epoch 1 (preempted, resumed), then in the last step of
    the epoch EarlyStopping stops at: that run ends as stopped (status 0) with the
    uninterrupted run's step, weights and stats.json; the same command again then does
    what it does after the uninterrupted run's stop, to the same end."""
    plain = tmp_path / "plain" / "log"
    proc = run(plain, "--k", str(k))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert steps_ran(plain) == list(range(1, STOP_STEP + 1)), proc.stdout
    stopped = end_state(plain)

    logdir = tmp_path / "preempted" / "log"
    log = []
    first = run(logdir, "--k", str(k), "--term-at", str(STEPS_PER_EPOCH))
    log.append(f"--- SIGTERM at {STEPS_PER_EPOCH}\n{first.stdout}{first.stderr}")
    assert first.returncode == PREEMPTED_EXIT_STATUS, log[-1]
    stop = run(logdir, "--k", str(k), "--term-at", str(STOP_STEP))
    log.append(f"--- SIGTERM at {STOP_STEP}\n{stop.stdout}{stop.stderr}")
    assert stop.returncode == 0, log[-1]
    assert f"training stopped at epoch {EARLY_STOP_EPOCH}" in stop.stdout, log[-1]
    assert "the run ends as stopped" in stop.stdout, log[-1]
    assert "preempted: saved" not in stop.stdout, log[-1]
    assert f"finished at global step {STOP_STEP}" in stop.stdout, log[-1]
    text = "\n".join(log)
    assert steps_ran(logdir) == list(range(1, STOP_STEP + 1)), text
    assert_same(logdir, stopped, text)

    # the same command after either stop: the same steps, to the same end
    plain_again = run(plain, "--k", str(k))
    assert plain_again.returncode == 0, plain_again.stdout + plain_again.stderr
    again = run(logdir, "--k", str(k))
    log.append(f"--- the same command again\n{again.stdout}{again.stderr}")
    text = "\n".join(log)
    assert again.returncode == 0, text
    assert steps_ran(logdir) == steps_ran(plain), text
    assert_same(logdir, end_state(plain), text)
