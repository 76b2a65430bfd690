"""The functional core and the timeline tool run without TensorFlow.

``nox -s core`` runs this file in a virtual environment that holds the libs and their
dependencies but no TensorFlow (the libs list TensorFlow only as an extra); the
cross-lib session runs it again beside TensorFlow, where it checks that nothing
loads TensorFlow on the way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.procs

CORE_IMPORT = textwrap.dedent(
    """
    import sys
    from towerkit.callbacks import (
        EveryK, LoopPosition, fires, loop_events, piecewise_schedule, timeline, value_at,
        MeanState, mean_add, mean_values, should_change, StatMonitorState, StopTraining,
        BestKState, plan_best_k, TimerState, WallClockInterval, advance_timer,
    )
    assert "tensorflow" not in sys.modules, "importing the core loaded TensorFlow"
    events = list(loop_events(1, 2, 3))
    saves = [e.global_step for e in events if fires(EveryK(epochs=1), e)]
    lr = piecewise_schedule([(1, 0.1), (2, 0.01)])
    state = mean_add(mean_add(MeanState(sums=(0.0,), count=0), [1.0]), [3.0])
    best = plan_best_k(BestKState(k=1, mode="min"), name="m-1", step=1, epoch=1, value=0.5)
    due, _ = advance_timer(WallClockInterval(60.0), TimerState(0.0), 61.0)
    assert best.admitted and due
    print(saves, [value_at(lr, epoch) for epoch in (1, 2)], mean_values(state))
    assert "tensorflow" not in sys.modules, "using the core loaded TensorFlow"
    """
)

TIMELINE_RUN = textwrap.dedent(
    """
    import sys
    from towerkit.tools import timeline
    code = timeline.main(sys.argv[1:])
    assert "tensorflow" not in sys.modules, "the timeline tool loaded TensorFlow"
    sys.exit(code)
    """
)

DESCRIPTION = """\
[loop]
steps_per_epoch = 2
max_epoch = 3

[[callbacks]]
name = "saver"
type = "PeriodicTrigger"
every_k_epochs = 2

[[callbacks]]
name = "learning_rate"
type = "ScheduledHyperParamSetter"
schedule = [[1, 0.1], [3, 0.01]]
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter of this environment."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )


class TestCore:
    """``towerkit.callbacks``' functional core imports and computes without TensorFlow."""

    def test_import_and_use(self):
        """Loop events, triggers, schedules and statistics work; TensorFlow stays unloaded."""
        done = run_python(CORE_IMPORT)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[0] == "[3, 6] [0.1, 0.01] (2.0,)"

    def test_shells_are_named(self):
        """The package still lists its shells (``ModelSaver``) without importing them."""
        done = run_python(
            "import sys, towerkit.callbacks as cb\n"
            "print('ModelSaver' in cb.__all__, 'ModelSaver' in dir(cb), 'tensorflow' in sys.modules)"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "True True False"


class TestTimelineTool:
    """The ``timeline`` tool prints a run's firings without TensorFlow."""

    def test_text(self, tmp_path):
        """Each firing of a TOML description is printed, with the schedule's values."""
        path = tmp_path / "run.toml"
        path.write_text(DESCRIPTION, encoding="utf-8")
        done = run_python(TIMELINE_RUN, str(path))
        assert done.returncode == 0, done.stderr
        rows = [line.split() for line in done.stdout.splitlines()[2:5]]
        assert rows == [
            ["1", "2", "1", "trigger_epoch", "learning_rate", "0.1"],
            ["2", "4", "1", "trigger_epoch", "saver"],
            ["3", "6", "1", "trigger_epoch", "learning_rate", "0.01"],
        ]

    def test_json(self, tmp_path):
        """``--json`` gives the same firings as data."""
        path = tmp_path / "run.toml"
        path.write_text(DESCRIPTION, encoding="utf-8")
        done = run_python(TIMELINE_RUN, str(path), "--json")
        assert done.returncode == 0, done.stderr
        firings = json.loads(done.stdout)["firings"]
        assert [(f["name"], f["global_step"], f["value"]) for f in firings] == [
            ("learning_rate", 2, 0.1),
            ("saver", 4, None),
            ("learning_rate", 6, 0.01),
        ]

    def test_limit_on_a_huge_run(self, tmp_path):
        """``--limit 3`` on 1,000 steps x 99,999 epochs with a per-step trigger prints 3 firings."""
        path = tmp_path / "huge.toml"
        path.write_text(
            "[loop]\nsteps_per_epoch = 1000\nmax_epoch = 99999\n\n"
            '[[callbacks]]\nname = "every_step"\nevery_k_steps = 1\n',
            encoding="utf-8",
        )
        done = run_python(TIMELINE_RUN, str(path), "--limit", "3")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert [line.split()[:4] for line in lines[2:5]] == [
            ["1", str(step), str(step - 1), "trigger_step"] for step in (1, 2, 3)
        ]
        assert lines[5] == "... stopped after 3 firings (--limit 3): later ones are not computed"
        assert lines[-1].startswith("every_step (PeriodicTrigger): 3 times")

    def test_bad_description(self, tmp_path):
        """A bad description fails with an error line, still without TensorFlow."""
        path = tmp_path / "run.toml"
        path.write_text(DESCRIPTION.replace("max_epoch = 3", "max_epoch = -3"), encoding="utf-8")
        done = run_python(TIMELINE_RUN, str(path))
        assert done.returncode != 0
        assert "max_epoch" in done.stderr
