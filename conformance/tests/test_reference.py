"""The reference model against the callbacks lib's own pure functions and the spec's examples."""

from __future__ import annotations

import itertools

import pytest
from conformance_strategies import loop_scenarios, loop_specs, trigger_scenarios
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.callbacks import (
    Callback,
    EventKind,
    EveryK,
    OnSchedule,
    PeriodicTrigger,
    count_steps,
    piecewise_schedule,
    timeline,
)
from towerkit.conformance import (
    BestSaverSpec,
    LoopSpec,
    PeriodicCallbackSpec,
    PeriodicTriggerSpec,
    ProbeSpec,
    SaverSpec,
    Scenario,
    ScheduleSpec,
    StatSpec,
)
from towerkit.conformance._reference import (
    best_epoch_step,
    expected_run,
    full_stream,
    gated_trace,
    kept_checkpoints,
    periodic_callback_record,
    periodic_trigger_calls,
    saver_steps,
    scheduled_values,
    seen_by,
    stop_index,
)


class TestExpectedRun:
    """`expected_run`: what each recorder must see."""

    @settings(max_examples=40, deadline=None)
    @given(loop_scenarios())
    def test_clock_sees_the_stream_or_its_prefix(self, scenario):
        """The first recorder sees the loop's events up to the stop, then after_train there."""
        run = expected_run(scenario)
        events = full_stream(scenario.loop, 1)
        clock = run.trace("loop")
        assert clock[-1].kind is EventKind.AFTER_TRAIN
        stop = stop_index(events, scenario.stop_at)
        if stop is not None and events[stop].kind is EventKind.AFTER_EPOCH:
            stop += 1  # the epoch stays whole: its trigger_epoch runs too
        assert len(clock) == (len(events) if stop is None else stop + 2)

    @settings(max_examples=40, deadline=None)
    @given(loop_specs(repeats=True))
    def test_counts(self, loop):
        """Steps per epoch and runs per step give the counts of trigger_step and after_run."""
        run = expected_run(Scenario(name="s", loop=loop), runs_per_step=1)
        kinds = [e.kind for e in run.trace("loop")]
        steps = count_steps(loop.starting_epoch, loop.max_epoch, loop.steps_per_epoch)
        assert kinds.count(EventKind.TRIGGER_STEP) == steps
        assert kinds.count(EventKind.AFTER_RUN) == steps * loop.run_step_repeats

    def test_chief_only_on_non_chief(self):
        """A chief-only probe sees nothing off the chief; the others see everything."""
        s = Scenario(
            name="s",
            loop=LoopSpec(max_epoch=1, steps_per_epoch=1),
            callbacks=[ProbeSpec(name="c", chief_only=True), ProbeSpec(name="e")],
        )
        run = expected_run(s, is_chief=False)
        assert run.trace("c") == ()
        assert len(run.trace("e")) == 8

    def test_later_callbacks_miss_the_stopping_event(self):
        """Callbacks after the one that raises do not see the raising event."""
        events = full_stream(LoopSpec(max_epoch=1, steps_per_epoch=1), 1)
        i = stop_index(events, (EventKind.TRIGGER_STEP, 0))
        assert [e.kind for e in seen_by(events, i, first=False)][-2:] == [
            EventKind.AFTER_RUN,
            EventKind.AFTER_TRAIN,
        ]

    @pytest.mark.parametrize("kind", [EventKind.AFTER_EPOCH, EventKind.TRIGGER_EPOCH])
    def test_stop_at_epoch_end_keeps_it_whole(self, kind):
        """A stop in after_epoch or trigger_epoch: every callback sees the epoch's trigger_epoch."""
        events = full_stream(LoopSpec(max_epoch=3, steps_per_epoch=2), 1)
        i = stop_index(events, (kind, 1))
        for first in (True, False):
            seen = seen_by(events, i, first=first)
            assert [e.kind for e in seen][-2:] == [EventKind.TRIGGER_EPOCH, EventKind.AFTER_TRAIN]
            assert seen[-2].epoch_num == 2

    def test_spec_example_epoch_num(self):
        """Spec 000: in the trigger_epoch of epoch 3, epoch_num is 3."""
        run = expected_run(Scenario(name="s", loop=LoopSpec(max_epoch=3, steps_per_epoch=2)))
        epochs = [e.epoch_num for e in run.trace("loop") if e.kind is EventKind.TRIGGER_EPOCH]
        assert epochs == [1, 2, 3]

    def test_saved_steps(self):
        """ModelSaver saves at every trigger_epoch, on the chief only."""
        from towerkit.conformance import SaverSpec

        s = Scenario(
            name="s",
            loop=LoopSpec(max_epoch=3, steps_per_epoch=2),
            logdir="d",
            callbacks=[SaverSpec()],
        )
        assert expected_run(s).saved_steps == (2, 4, 6)
        assert expected_run(s, is_chief=False).saved_steps == ()


class TestTriggersAgreeWithTimeline:
    """The reference agrees with the callbacks lib's timeline (an independent path)."""

    @settings(max_examples=40, deadline=None)
    @given(trigger_scenarios())
    def test_periodic_trigger(self, scenario):
        """PeriodicTrigger firings equal the timeline of the same trigger record."""
        for spec in scenario.callbacks:
            if not isinstance(spec, PeriodicTriggerSpec):
                continue
            loop = scenario.loop
            calls = periodic_trigger_calls(full_stream(loop, 1), spec)
            record = EveryK(
                steps=spec.every_k_steps, epochs=spec.every_k_epochs, before_train=spec.before_train
            )
            fired = timeline(
                [("t", record)],
                loop.starting_epoch,
                loop.max_epoch,
                loop.steps_per_epoch,
                start_global_step=loop.start_global_step,
            )
            assert [(e.kind, e.epoch_num, e.global_step) for e in calls] == [
                (f.kind, f.epoch_num, f.global_step) for f in fired
            ]

    @settings(max_examples=40, deadline=None)
    @given(trigger_scenarios())
    def test_schedule_values(self, scenario):
        """The values a reader sees change exactly where the timeline's schedule sets new ones."""
        for spec in scenario.callbacks:
            if not isinstance(spec, ScheduleSpec):
                continue
            loop = scenario.loop
            rule = OnSchedule(
                schedule=piecewise_schedule(
                    spec.points, interp=spec.interp, unit="step" if spec.step_based else "epoch"
                ),
                set_at_beginning=spec.set_at_beginning,
            )
            kinds = (
                EventKind.BEFORE_TRAIN,
                EventKind.TRIGGER_STEP if spec.step_based else EventKind.TRIGGER_EPOCH,
            )
            from towerkit.callbacks import TimelineEntry

            fired = timeline(
                [TimelineEntry(name="s", trigger=rule, kinds=kinds)],
                loop.starting_epoch,
                loop.max_epoch,
                loop.steps_per_epoch,
                start_global_step=loop.start_global_step,
            )
            sets = {(f.kind, f.epoch_num, f.global_step): f.value for f in fired}
            value = spec.initial
            for event, seen in scheduled_values(full_stream(loop, 1), spec):
                value = sets.get((event.kind, event.epoch_num, event.global_step), value)
                assert seen == pytest.approx(value)


class TestGated:
    """PeriodicCallback and EnableCallbackIf as gated traces."""

    def test_periodic_callback_last_step(self):
        """Spec 003: with every_k_epochs, the last step of training is also enabled."""
        spec = PeriodicCallbackSpec(name="p", every_k_epochs=2)
        events = full_stream(LoopSpec(max_epoch=3, steps_per_epoch=2), 1)
        seen = gated_trace(events, periodic_callback_record(spec))
        last_epoch = [(e.kind.value, e.local_step) for e in seen if e.epoch_num == 3]
        assert last_epoch == [
            ("before_run", 1),
            ("after_run", 1),
            ("trigger_step", 1),
            ("after_epoch", 1),
            ("trigger_epoch", 1),
            ("after_train", 1),
        ]

    @settings(max_examples=40, deadline=None)
    @given(loop_specs(repeats=True))
    def test_after_run_follows_before_run(self, loop):
        """Every after_run kept follows a before_run kept, and the other way round."""
        spec = PeriodicCallbackSpec(name="p", every_k_steps=2)
        kinds = [e.kind for e in gated_trace(full_stream(loop, 1), periodic_callback_record(spec))]
        for a, b in itertools.pairwise(kinds):
            assert (a is EventKind.BEFORE_RUN) == (b is EventKind.AFTER_RUN)


class TestCheckpoints:
    """Savers' expectations."""

    def test_kept(self):
        """max_to_keep keeps the newest; 0 keeps all."""
        assert kept_checkpoints([1, 2, 3, 4], 3) == (2, 3, 4)
        assert kept_checkpoints([1, 2], 0) == (1, 2)

    def test_best_epoch_first_wins_ties(self):
        """A later equal value does not replace the best (strictly better only)."""
        events = full_stream(LoopSpec(max_epoch=4, steps_per_epoch=1), 1)
        stat = StatSpec(name="e", values=[3, 1, 2, 1])
        assert best_epoch_step(events, stat, BestSaverSpec(name="m", stat="e")) == 2
        assert best_epoch_step(events, stat, BestSaverSpec(name="m", stat="e", reverse=True)) == 1

    def test_real_periodic_trigger_schedule(self):
        """The shell `PeriodicTrigger` carries the same record the reference builds."""
        spec = PeriodicTriggerSpec(name="t", every_k_steps=3, every_k_epochs=2)
        shell = PeriodicTrigger(Callback(), every_k_steps=3, every_k_epochs=2)
        assert shell.trigger_record == EveryK(steps=spec.every_k_steps, epochs=spec.every_k_epochs)


class TestSaverSteps:
    """`saver_steps`: the epoch ends, and with a time trigger every N calls since the last save."""

    @settings(max_examples=60, deadline=None)
    @given(
        st.integers(1, 4),
        st.integers(1, 7),
        st.one_of(st.none(), st.integers(1, 9)),
    )
    def test_properties(self, max_epoch, steps_per_epoch, minutes):
        """Increasing; every epoch end saved; one step per call, so a minute per step: no two
        saves more than N steps apart, and a save that is no epoch end comes N after the last."""
        loop = LoopSpec(max_epoch=max_epoch, steps_per_epoch=steps_per_epoch)
        saved = saver_steps(full_stream(loop, 1), SaverSpec(every_n_minutes=minutes))
        ends = [e * steps_per_epoch for e in range(1, max_epoch + 1)]
        assert saved == sorted(set(saved))
        assert set(ends) <= set(saved)
        if minutes is None:
            assert saved == ends
            return
        for before, after in itertools.pairwise([0, *saved]):
            assert after - before <= minutes
            if after not in ends:
                assert after - before == minutes
