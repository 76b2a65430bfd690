"""The loop: epochs, steps, the order of callback methods, the counters, hooks, stopping, chiefs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from towerkit.callbacks import EventKind
from towerkit.conformance._catalog import (
    CHIEF,
    LOOP,
    PLAIN_RUNS,
    RESTORED,
    RUNS_PER_STEP,
    STEPS_PER_CALL,
    STEPS_PER_CALL_RESTORED,
    STOPS,
)
from towerkit.conformance._checks import check_no_error, check_run, require
from towerkit.conformance._scenario import CLOCK

if TYPE_CHECKING:
    from towerkit.conformance._entries import TrainerEntry
    from towerkit.conformance._result import RunResult
    from towerkit.conformance._scenario import Scenario
    from towerkit.conformance._suite import ConformanceSession
    from towerkit.conformance._trace import TraceEvent
    from towerkit.conformance.plugin import _Runner

pytestmark = pytest.mark.conformance_group("loop")


def _epochs(events: Sequence[TraceEvent]) -> list[int]:
    return [e.epoch_num for e in events if e.kind is EventKind.BEFORE_EPOCH]


def test_epochs_run_from_starting_epoch_to_max_epoch(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 002 (the loop) and 000 (main_loop): epochs run from starting_epoch to max_epoch, inclusive."""
    results = conformance_runner.run(LOOP)
    check_no_error(trainer_entry, results)
    for result in results:
        want = list(range(LOOP.loop.starting_epoch, LOOP.loop.max_epoch + 1))
        got = _epochs(result.trace(CLOCK))
        require(
            got == want,
            f"{trainer_entry.name} (rank {result.rank}): epochs run: expected epochs {want} "
            f"(starting_epoch={LOOP.loop.starting_epoch} to max_epoch={LOOP.loop.max_epoch}, "
            f"inclusive), got before_epoch of epochs {got}",
        )


def test_steps_per_epoch_steps_in_each_epoch(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 000 (TrainConfig.steps_per_epoch) and 003 (_trigger_step): steps_per_epoch run_step calls per epoch."""
    steps = LOOP.loop.steps_per_epoch
    results = conformance_runner.run(LOOP)
    check_no_error(trainer_entry, results)
    for result in results:
        per_epoch: dict[int, int] = {}
        for e in result.trace(CLOCK):
            if e.kind is EventKind.TRIGGER_STEP:
                per_epoch[e.epoch_num] = per_epoch.get(e.epoch_num, 0) + 1
        want = dict.fromkeys(range(LOOP.loop.starting_epoch, LOOP.loop.max_epoch + 1), steps)
        require(
            per_epoch == want,
            f"{trainer_entry.name} (rank {result.rank}): steps per epoch: expected {steps} "
            f"trigger_step calls in each epoch {want}, got {per_epoch}",
        )


def test_order_of_callback_methods(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (Callback) and 002 (the loop): before_train, then per epoch before_epoch, per step before_run/after_run and trigger_step, after_epoch, trigger_epoch; after_train last."""
    check_run(
        trainer_entry, LOOP, conformance_runner.run(LOOP), fields=(), recorders=[CLOCK, "later"]
    )


def test_epoch_num_in_every_method(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 000 (Trainer.epoch_num): an epoch covers before_epoch until trigger_epoch; in the trigger_epoch of epoch 3, epoch_num is 3."""
    check_run(
        trainer_entry,
        LOOP,
        conformance_runner.run(LOOP),
        fields=("epoch_num",),
        recorders=[CLOCK, "later"],
    )


def test_local_step_in_every_method(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 000 (Trainer.local_step): the number of steps finished in the current epoch, i.e. the 0-based index of the running step."""
    check_run(
        trainer_entry,
        LOOP,
        conformance_runner.run(LOOP),
        fields=("local_step",),
        recorders=[CLOCK, "later"],
    )


def test_global_step_counts_hooked_runs(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 000 (Trainer.global_step): how many times hooked_sess.run has been called, incremented after each call returns."""
    check_run(
        trainer_entry,
        LOOP,
        conformance_runner.run(LOOP),
        fields=("global_step",),
        recorders=[CLOCK, "later", f"{CLOCK}.global_step"],
    )


@pytest.mark.parametrize("repeats", sorted(RUNS_PER_STEP), ids=lambda n: f"{n}-runs")
def test_global_step_with_zero_or_several_runs_per_step(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, repeats: int
) -> None:
    """Spec 000 (Trainer.global_step): with zero or several hooked_sess.run calls in one run_step, local_step and global_step move at different paces."""
    scenario = RUNS_PER_STEP[repeats]
    check_run(trainer_entry, scenario, conformance_runner.run(scenario))


def test_global_step_restored_at_start(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Design (loop semantics) and spec 000 (Trainer.global_step): the global step counts restored calls too and continues from a restored value."""
    check_run(trainer_entry, RESTORED, conformance_runner.run(RESTORED))


@pytest.mark.parametrize("k", sorted(STEPS_PER_CALL), ids=lambda k: f"K={k}")
def test_several_steps_per_session_call(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, k: int
) -> None:
    """Design (steps_per_execution): with K steps per call the step hooks run once per call, at its last local step, and the global step advances by K; epoch hooks are those of K=1."""
    scenario = STEPS_PER_CALL[k]
    check_run(trainer_entry, scenario, conformance_runner.run(scenario))


def test_several_steps_per_call_from_a_restored_step(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Design (steps_per_execution): a run of K steps per call continues from a restored global step."""
    scenario = STEPS_PER_CALL_RESTORED
    check_run(trainer_entry, scenario, conformance_runner.run(scenario))


def test_hooks_run_only_around_hooked_session_runs(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 002 (Write a Trainer) and 000 (Trainer.hooked_sess): only hooked_sess.run triggers before_run/after_run; trainer.sess.run does not, nor moves the global step."""
    check_run(trainer_entry, PLAIN_RUNS, conformance_runner.run(PLAIN_RUNS))


@pytest.mark.parametrize("kind", list(STOPS), ids=lambda k: k.value)
def test_stop_training_from_each_method(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, kind: EventKind
) -> None:
    """Spec 000 (StopTraining) and 003 (_after_train): StopTraining raised in any callback method ends training; after_train still runs."""
    scenario = STOPS[kind]
    check_run(trainer_entry, scenario, conformance_runner.run(scenario))


@pytest.mark.parametrize("chief", [True, False], ids=["chief", "non-chief"])
def test_chief_only_callbacks(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, chief: bool
) -> None:
    """Spec 000 (Trainer.is_chief) and 003 (Callback.chief_only): chief_only callbacks run only on the chief; the others run everywhere."""
    scenario = CHIEF[chief]
    check_run(trainer_entry, scenario, conformance_runner.run(scenario))


def test_loop_matches_reference(
    trainer_entry: TrainerEntry,
    conformance_session: ConformanceSession,
    conformance_runner: _Runner,
) -> None:
    """Spec 002 (the loop), 000 (Trainer counters, StopTraining): any loop parameters, stop point and probes give the reference trace (property)."""
    del conformance_runner

    def check(scenario: Scenario, results: list[RunResult]) -> None:
        check_run(trainer_entry, scenario, results)

    conformance_session.check_property(trainer_entry, "loop", check)
