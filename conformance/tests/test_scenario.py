"""Scenario records: validation, names, JSON round trips."""

from __future__ import annotations

import json

import pytest
from conformance_strategies import scenarios
from hypothesis import given, settings

from towerkit.callbacks import EventKind
from towerkit.conformance import (
    AutoResumeSpec,
    BestSaverSpec,
    EnableIfSpec,
    LoopSpec,
    PeriodicCallbackSpec,
    PeriodicTriggerSpec,
    ProbeSpec,
    SaverSpec,
    Scenario,
    ScheduleSpec,
    StatSpec,
    scenario_from_data,
    scenario_to_data,
)
from towerkit.conformance._catalog import named_scenarios
from towerkit.towers import FLOAT32, precision_policy


class TestLoopSpec:
    """`LoopSpec` holds the loop parameters of a run."""

    def test_repr(self):
        """Every field shows."""
        assert repr(LoopSpec()) == (
            "LoopSpec(starting_epoch=1, max_epoch=2, steps_per_epoch=3, start_global_step=0, "
            "run_step_repeats=1, steps_per_execution=1)"
        )

    def test_fail_k(self):
        """K must divide steps_per_epoch."""
        with pytest.raises(
            ValueError, match="'steps_per_execution' 2 must divide 'steps_per_epoch' 3"
        ):
            LoopSpec(steps_per_execution=2)

    def test_fail_epochs(self):
        """max_epoch below starting_epoch - 1 is rejected with both values."""
        with pytest.raises(
            ValueError,
            match=r"'max_epoch' must be >= 'starting_epoch' - 1 \(an empty run\); got max_epoch=1, starting_epoch=4",
        ):
            LoopSpec(starting_epoch=4, max_epoch=1)

    def test_fail_steps(self):
        """steps_per_epoch must be >= 0 (0: an evaluation-only run)."""
        with pytest.raises(ValueError, match=r"'steps_per_epoch' must be an int >= 0 .*; got -1"):
            LoopSpec(steps_per_epoch=-1)

    def test_empty_run_allowed(self):
        """max_epoch = starting_epoch - 1 is an empty run."""
        assert LoopSpec(starting_epoch=3, max_epoch=2).max_epoch == 2


class TestCallbackSpecs:
    """The callback records validate their arguments as the callbacks do."""

    def test_periodic_trigger_needs_a_period(self):
        """PeriodicTrigger needs a period or before_train."""
        with pytest.raises(ValueError, match="set every_k_steps, every_k_epochs or before_train"):
            PeriodicTriggerSpec(name="t")

    def test_periodic_callback_needs_a_period(self):
        """PeriodicCallback needs a period."""
        with pytest.raises(ValueError, match="set every_k_steps or every_k_epochs"):
            PeriodicCallbackSpec(name="p")

    def test_period_positive(self):
        """Periods are > 0."""
        with pytest.raises(ValueError, match=r"'every_k_steps' must be > 0 or None; got 0"):
            PeriodicTriggerSpec(name="t", every_k_steps=0)

    def test_enable_if_remainder(self):
        """The remainder is below the modulus."""
        with pytest.raises(ValueError, match="'remainder' must be < modulus 2; got 2"):
            EnableIfSpec(name="e", modulus=2, remainder=2)

    def test_schedule_points_checked(self):
        """Schedules are validated by the callbacks lib, naming the entries at fault."""
        with pytest.raises(
            ValueError, match=r"entries out of order: #1 \(1, 2.0\) after #0 \(3, 1.0\)"
        ):
            ScheduleSpec(name="lr", points=[(3, 1.0), (1, 2.0)])

    def test_names(self):
        """Names are identifiers."""
        with pytest.raises(ValueError, match="'name' must be a name of letters"):
            ProbeSpec(name="a b")

    def test_stat_value_in(self):
        """Statistics cycle over their values by epoch."""
        stat = StatSpec(name="s", values=[1, 2, 3])
        assert [stat.value_in(e) for e in range(1, 6)] == [1.0, 2.0, 3.0, 1.0, 2.0]

    def test_best_saver_filename(self):
        """The file names follow MinSaver's and MaxSaver's defaults."""
        assert BestSaverSpec(name="b", stat="err", reverse=True).filename == "max-err.tfmodel"


class TestScenario:
    """`Scenario` is one run of the suite."""

    def test_repr(self):
        """The repr shows the loop and options."""
        s = Scenario(name="s", loop=LoopSpec(), stop_at=("trigger_step", 2))
        assert "stop_at=(EventKind.TRIGGER_STEP, 2)" in repr(s)

    def test_fail_names(self):
        """Duplicate names and the reserved name are rejected, every one listed."""
        with pytest.raises(ValueError, match=r"at fault: 'a', 'loop'"):
            Scenario(
                name="s",
                loop=LoopSpec(),
                callbacks=[ProbeSpec(name="a"), ProbeSpec(name="a"), ProbeSpec(name="loop")],
            )

    def test_fail_logdir(self):
        """Callbacks that write files need a log directory."""
        with pytest.raises(ValueError, match="json_writer, auto_resume, ModelSaver write files"):
            Scenario(
                name="s",
                loop=LoopSpec(),
                json_writer=True,
                auto_resume=AutoResumeSpec(),
                callbacks=[SaverSpec()],
            )

    def test_fail_callbacks(self):
        """Entries must be callback records."""
        with pytest.raises(TypeError, match="entries at fault: #0: str"):
            Scenario(name="s", loop=LoopSpec(), callbacks=["probe"])

    def test_find(self):
        """A missing record is reported with the names there are."""
        s = Scenario(name="s", loop=LoopSpec(), callbacks=[ProbeSpec(name="p")])
        assert s.find("p") == ProbeSpec(name="p")
        with pytest.raises(KeyError, match=r"has no callback 'q'; it has \['p'\]"):
            s.find("q")

    def test_stop_at_converted(self):
        """stop_at takes a method name."""
        s = Scenario(name="s", loop=LoopSpec(), stop_at=["after_epoch", 0])
        assert s.stop_at == (EventKind.AFTER_EPOCH, 0)

    def test_precision_is_the_towers_record(self):
        """A policy's name becomes the towers' `Precision` record; its data is the name again."""
        s = Scenario(name="s", loop=LoopSpec(), precision="mixed_bfloat16")
        assert s.precision == precision_policy("mixed_bfloat16")
        assert Scenario(name="s", loop=LoopSpec()).precision is FLOAT32
        assert scenario_to_data(s)["precision"] == "mixed_bfloat16"
        assert scenario_from_data(json.loads(json.dumps(scenario_to_data(s)))) == s
        with pytest.raises(ValueError, match="unknown precision policy 'fp8'; valid: "):
            Scenario(name="s", loop=LoopSpec(), precision="fp8")

    @settings(max_examples=30, deadline=None)
    @given(scenarios())
    def test_json_round_trip(self, scenario):
        """A drawn scenario survives JSON."""
        data = json.loads(json.dumps(scenario_to_data(scenario)))
        assert scenario_from_data(data) == scenario

    def test_named_round_trip(self):
        """Every named scenario survives JSON and names are unique."""
        named = named_scenarios()
        assert len({s.name for s in named}) == len(named)
        for s in named:
            assert scenario_from_data(json.loads(json.dumps(scenario_to_data(s)))) == s

    def test_from_data_fail(self):
        """Unknown record types are named."""
        with pytest.raises(ValueError, match="unknown record type 'Nope'"):
            scenario_from_data({"type": "Nope"})
