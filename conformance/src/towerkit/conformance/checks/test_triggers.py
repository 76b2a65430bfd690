"""Triggers and schedules: exact firing points and values."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from towerkit.conformance._catalog import (
    AFTER_SCHEDULE,
    CALLBACK_EPOCHS,
    CALLBACK_STEPS,
    ENABLE_IF,
    MIDDLE_OF_SCHEDULE,
    SCHEDULE_EPOCHS,
    SCHEDULE_LINEAR,
    SCHEDULE_STEPS,
    STAT_MONITOR,
    TRIGGER_BEFORE_TRAIN,
    TRIGGER_EPOCHS,
    TRIGGER_STEPS,
    WITH_FUNC,
)
from towerkit.conformance._checks import check_run

if TYPE_CHECKING:
    from towerkit.conformance._entries import TrainerEntry
    from towerkit.conformance._result import RunResult
    from towerkit.conformance._scenario import Scenario
    from towerkit.conformance._suite import ConformanceSession
    from towerkit.conformance.plugin import _Runner

pytestmark = pytest.mark.conformance_group("triggers")


def _check(entry: TrainerEntry, runner: _Runner, scenario: Scenario) -> None:
    __tracebackhide__ = True
    check_run(entry, scenario, runner.run(scenario))


def test_periodic_trigger_every_k_steps(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (PeriodicTrigger): trigger() is called when global_step % every_k_steps == 0."""
    _check(trainer_entry, conformance_runner, TRIGGER_STEPS)


def test_periodic_trigger_every_k_epochs(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (PeriodicTrigger): trigger() is called when epoch_num % every_k_epochs == 0, replacing the every-epoch default."""
    _check(trainer_entry, conformance_runner, TRIGGER_EPOCHS)


def test_periodic_trigger_before_train(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (PeriodicTrigger): with before_train=True, trigger() is also called in before_train."""
    _check(trainer_entry, conformance_runner, TRIGGER_BEFORE_TRAIN)


def test_periodic_callback_every_k_steps(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (PeriodicCallback): the gated methods run only when global_step % every_k_steps == 0."""
    _check(trainer_entry, conformance_runner, CALLBACK_STEPS)


def test_periodic_callback_every_k_epochs_and_the_last_step(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (PeriodicCallback): enabled when epoch_num % every_k_epochs == 0, and also when the last step finishes (epoch_num == max_epoch, local_step == steps_per_epoch - 1)."""
    _check(trainer_entry, conformance_runner, CALLBACK_EPOCHS)


def test_enable_callback_if_evaluates_in_before_run_only(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (EnableCallbackIf): the gated methods run only when pred holds; for before_run/after_run, pred is evaluated in before_run only."""
    _check(trainer_entry, conformance_runner, ENABLE_IF)


def test_scheduled_setter_on_epochs(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (ScheduledHyperParamSetter): each (epoch, value) pair sets the value after the completion of that epoch; epoch 0 is before the first epoch."""
    _check(trainer_entry, conformance_runner, SCHEDULE_EPOCHS)


def test_scheduled_setter_with_linear_interpolation(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (ScheduledHyperParamSetter): interp='linear' sets the interpolation at every trigger between points, without extrapolation."""
    _check(trainer_entry, conformance_runner, SCHEDULE_LINEAR)


def test_scheduled_setter_step_based(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (ScheduledHyperParamSetter): step_based=True reads the schedule as (global step, value) pairs."""
    _check(trainer_entry, conformance_runner, SCHEDULE_STEPS)


@pytest.mark.parametrize("at_beginning", [True, False], ids=["set_at_beginning", "not_set"])
def test_set_at_beginning_when_starting_after_the_schedule(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, at_beginning: bool
) -> None:
    """Spec 003 (ScheduledHyperParamSetter.set_at_beginning): at the start the value the schedule implies is set even off a scheduled epoch; without it, only at scheduled points."""
    _check(trainer_entry, conformance_runner, AFTER_SCHEDULE[at_beginning])


@pytest.mark.parametrize("interp", [None, "linear"], ids=["exact", "linear"])
def test_starting_in_the_middle_of_a_schedule(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, interp: str | None
) -> None:
    """Spec 003 (ScheduledHyperParamSetter): a run starting between two scheduled epochs starts with the value the schedule implies there (interpolated with 'linear')."""
    _check(trainer_entry, conformance_runner, MIDDLE_OF_SCHEDULE[interp])


def test_stat_monitor_param_setter(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (StatMonitorParamSetter): the value becomes value_func(old) once the statistic stops improving by threshold over the last last_k observations (max for reverse)."""
    _check(trainer_entry, conformance_runner, STAT_MONITOR)


def test_hyper_param_setter_with_func(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (HyperParamSetterWithFunc): the value becomes func(epoch_num, old_value), epoch_num being the number of finished epochs."""
    _check(trainer_entry, conformance_runner, WITH_FUNC)


def test_triggers_match_reference(
    trainer_entry: TrainerEntry,
    conformance_session: ConformanceSession,
    conformance_runner: _Runner,
) -> None:
    """Spec 003 (PeriodicTrigger, PeriodicCallback, EnableCallbackIf, the hyper-parameter setters): drawn periods, predicates and schedules fire exactly where the reference says (property)."""
    del conformance_runner

    def check(scenario: Scenario, results: list[RunResult]) -> None:
        check_run(trainer_entry, scenario, results)

    conformance_session.check_property(trainer_entry, "triggers", check)
