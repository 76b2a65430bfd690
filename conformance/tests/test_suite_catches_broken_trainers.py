"""The suite itself: it fails broken trainers naming the semantic, passes correct ones, reports."""

from __future__ import annotations

import re

import pytest
from broken import EXPECTED
from suite_runs import run_suite

pytestmark = [
    pytest.mark.procs,
    pytest.mark.xdist_group("test_suite_catches_broken_trainers"),
    pytest.mark.timeout(660),  # a fixture runs the whole suite in a process (run_suite: 600 s)
]


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory):
    """One run of the loop checks on the hand-written trainers, correct and broken (and of
    the mixed-precision numerics on the trainer that ignores the policy, and the numerics
    of the trainer whose update is not plain SGD, declared and not)."""
    tmp = tmp_path_factory.mktemp("broken")
    only = (
        "test_loop or (test_mixed_bfloat16_steps and IgnoresPrecision)"
        " or (test_steps_equal_the_single_tower_reference and HalfSteps)"
    )
    return run_suite(tmp, "--trainer", "broken:ENTRIES", "-k", only)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    """One run of every check on the README's trainers composed from primitives."""
    tmp = tmp_path_factory.mktemp("examples")
    return run_suite(
        tmp,
        "--trainer",
        "example_trainers:make_trainer",
        "--trainer",
        "example_trainers:make_plain_trainer",
    )


class TestBrokenTrainers:
    """Each deliberately broken trainer fails with a message naming the semantic it broke."""

    @pytest.mark.parametrize("name", sorted(EXPECTED))
    def test_fails_naming_the_semantic(self, broken_run, name):
        """The targeted check fails and its message names the broken semantic."""
        case, pattern = EXPECTED[name]
        assert broken_run.outcome(case) == "failed", broken_run.output[-3000:]
        assert re.search(pattern, broken_run.failures[case]), broken_run.failures[case]

    @pytest.mark.parametrize("name", sorted(EXPECTED))
    def test_some_checks_still_pass(self, broken_run, name):
        """A defect fails the checks of its semantic, not every check (the epochs still run)."""
        case = f"test_epochs_run_from_starting_epoch_to_max_epoch[{name}]"
        assert broken_run.outcome(case) == "passed", broken_run.failures.get(case)

    def test_correct_hand_written_loop_passes(self, broken_run):
        """The same hand-written loop without a defect passes every loop check; only the
        several-steps-per-call checks skip, as it declares one step per session call."""
        mine = {k: v for k, v in broken_run.cases.items() if "[HandLoopTrainer" in k}
        assert mine, broken_run.output[-3000:]
        bad = {
            k: broken_run.failures.get(k) for k, v in mine.items() if v not in ("passed", "skipped")
        }
        assert not bad, bad
        skipped = sorted(k for k, v in mine.items() if v == "skipped")
        assert all("several_steps" in k for k in skipped), skipped
        assert sum(v == "passed" for v in mine.values()) > len(skipped)

    def test_declared_own_update_skips_the_numerics(self, broken_run):
        """A trainer declaring ``plain_sgd=False`` skips the SGD-reference numerics (the
        same trainer undeclared fails them, above) and passes the loop checks."""
        for steps in ("1-step", "3-steps"):
            case = f"test_steps_equal_the_single_tower_reference[HalfStepsDeclared-{steps}]"
            assert broken_run.outcome(case) == "skipped", broken_run.output[-3000:]
        mine = {k: v for k, v in broken_run.cases.items() if "[HalfStepsDeclared" in k}
        assert sum(v == "passed" for v in mine.values()) >= 10, mine
        assert all(v in ("passed", "skipped") for v in mine.values()), mine

    def test_exit_status_and_summary(self, broken_run):
        """The run fails, and the summary table shows the failing trainers and groups."""
        assert broken_run.code == 1
        table = broken_run.output[broken_run.output.index("trainer x check group") :]
        assert re.search(r"HandLoopTrainer\s+pass\s", table)
        assert re.search(r"SkipsTriggerStep\s+FAIL \d+/\d+", table)

    def test_report_properties(self, broken_run):
        """The JUnit report names the trainer, the group and the spec sentence of each case."""
        props = broken_run.properties["test_local_step_in_every_method[LocalStepOffByOne]"]
        assert props["trainer"] == "LocalStepOffByOne"
        assert props["group"] == "loop"
        assert props["spec"].startswith("Spec 000 (Trainer.local_step)")


class TestExampleTrainers:
    """The README's trainers composed from primitives pass the whole suite."""

    def test_every_check_passes(self, example_run):
        """No check fails; only the tower and layers checks of the trainer without towers skip,
        its K-steps-per-call loop checks, and its mixed-precision and K-steps-per-call numerics
        and checkpoint checks (a factory that builds the graph cannot be given K or a
        precision policy)."""
        assert example_run.code == 0, example_run.output[-4000:]
        skipped = sorted(k for k, v in example_run.cases.items() if v == "skipped")
        assert skipped
        assert all("make_plain_trainer" in k and k.startswith("test_") for k in skipped)
        groups = {example_run.properties[k]["group"] for k in skipped}
        assert groups == {"towers", "layers", "loop", "numerics", "checkpoints"}
        loop = [k for k in skipped if example_run.properties[k]["group"] == "loop"]
        assert all("several_steps" in k for k in loop), loop
        for group in ("numerics", "checkpoints"):
            mixed = [k for k in skipped if example_run.properties[k]["group"] == group]
            assert all("mixed_bfloat16" in k or "steps-per-call" in k for k in mixed), mixed

    def test_every_group_ran(self, example_run):
        """Each trainer ran checks of every group."""
        groups = {
            (p["trainer"], p["group"]) for p in example_run.properties.values() if "trainer" in p
        }
        for trainer in ("make_trainer", "make_plain_trainer"):
            for group in ("loop", "triggers", "checkpoints", "towers", "numerics", "layers"):
                assert (trainer, group) in groups


class TestOptions:
    """The plugin's options, as a user meets them."""

    def test_unknown_trainer_is_a_usage_error(self, tmp_path):
        """``--trainer`` naming nothing stops the run with the accepted forms."""
        run = run_suite(tmp_path, "--trainer", "no_such_row")
        assert run.code == 4
        assert "'--trainer no_such_row' names no built-in row" in run.output
        assert "MODULE:ATTR" in run.output

    def test_missing_module_is_a_usage_error(self, tmp_path):
        """A module that cannot be imported is named in the error."""
        run = run_suite(tmp_path, "--trainer", "no_such_module:make")
        assert run.code == 4
        assert "cannot import module 'no_such_module'" in run.output
