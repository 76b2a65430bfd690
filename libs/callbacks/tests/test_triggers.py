"""Trigger records and `fires`, against a plain reference loop."""

import attrs
import pytest
from callbacks_strategies import (
    every_k,
    loop_params,
    reference_every_k,
    reference_periodic,
    triggers,
)
from hypothesis import given

from towerkit.callbacks import (
    AllOf,
    AnyOf,
    AtLastStep,
    EpochMultiple,
    EventKind,
    EveryK,
    GlobalStepMultiple,
    LoopBounds,
    LoopEvent,
    Not,
    OnKinds,
    all_of,
    any_of,
    fires,
    loop_events,
    negate,
)


def firings(trigger, params, kinds=("before_train", "trigger_step", "trigger_epoch")):
    starting, max_epoch, steps, start_gs = params
    return [
        (e.kind.value, e.epoch_num, e.global_step)
        for e in loop_events(starting, max_epoch, steps, start_global_step=start_gs)
        if e.kind.value in kinds and fires(trigger, e)
    ]


class TestEveryK:
    """`EveryK` fires like PeriodicTrigger's documentation says."""

    @given(loop_params(), every_k())
    def test_matches_reference_loop(self, params, kw):
        """The events where it fires are the reference loop's."""
        got = firings(EveryK(**kw), params)
        assert got == reference_every_k(*params, kw["steps"], kw["epochs"], kw["before_train"])

    @given(loop_params(), every_k())
    def test_silent_elsewhere(self, params, kw):
        """It never fires at events other than before_train, trigger_step and trigger_epoch."""
        other = ("before_epoch", "before_run", "after_run", "after_epoch", "after_train")
        assert firings(EveryK(**kw), params, kinds=other) == []

    def test_repr(self):
        """The repr names every field."""
        assert repr(EveryK(steps=3)) == "EveryK(steps=3, epochs=None, before_train=False)"

    def test_fail(self):
        """No period and no before_train, bad periods and bad kinds are rejected."""
        with pytest.raises(
            ValueError, match="EveryK: set at least one of 'steps', 'epochs' or 'before_train'"
        ):
            EveryK()
        with pytest.raises(ValueError, match="EveryK: 'steps' must be > 0; got 0"):
            EveryK(steps=0)
        with pytest.raises(
            TypeError, match=r"EveryK: 'epochs' must be an int > 0 or None; got float 1.5"
        ):
            EveryK(epochs=1.5)
        with pytest.raises(
            TypeError, match="EveryK: 'epochs' must be an int > 0 or None; got bool True"
        ):
            EveryK(epochs=True)
        with pytest.raises(TypeError, match="EveryK: 'before_train' must be a bool; got int 1"):
            EveryK(before_train=1)
        with pytest.raises(ValueError, match="EveryK: 'steps' must be > 0"):
            attrs.evolve(EveryK(steps=2), steps=-1)


class TestPositionTriggers:
    """`GlobalStepMultiple`, `EpochMultiple` and `AtLastStep` read the event's position only."""

    @given(loop_params(), every_k())
    def test_periodic_callback_rule(self, params, kw):
        """The PeriodicCallback combination matches the reference loop."""
        steps, epochs = kw["steps"], kw["epochs"]
        parts = []
        if steps is not None:
            parts.append(GlobalStepMultiple(steps))
        if epochs is not None:
            parts += [EpochMultiple(epochs), AtLastStep()]
        got = firings(any_of(*parts), params, kinds=("trigger_step", "trigger_epoch"))
        assert got == reference_periodic(*params, steps, epochs)

    @given(loop_params())
    def test_last_step(self, params):
        """AtLastStep holds from the last step's before_run to after_train, and never before."""
        starting, max_epoch, steps, start_gs = params
        events = list(loop_events(starting, max_epoch, steps, start_global_step=start_gs))
        flags = [fires(AtLastStep(), e) for e in events]
        if max_epoch < starting:
            assert not any(flags)
            return
        first = flags.index(True)
        assert all(flags[first:])
        assert events[first].kind is EventKind.BEFORE_RUN
        assert events[first].local_step == steps - 1
        assert events[first].epoch_num == max_epoch

    def test_repr(self):
        """Reprs are the records'."""
        assert repr(GlobalStepMultiple(4)) == "GlobalStepMultiple(k=4)"
        assert repr(EpochMultiple(2)) == "EpochMultiple(k=2)"
        assert repr(AtLastStep()) == "AtLastStep()"

    def test_fail(self):
        """Periods must be positive ints."""
        with pytest.raises(ValueError, match="GlobalStepMultiple: 'k' must be > 0; got -3"):
            GlobalStepMultiple(-3)
        with pytest.raises(TypeError, match="EpochMultiple: 'k' must be an int > 0; got None"):
            EpochMultiple(None)


class TestCombinators:
    """`any_of`, `all_of`, `negate` and `OnKinds` combine records into records."""

    @given(triggers(), loop_params())
    def test_laws(self, trigger, params):
        """Combinations follow boolean logic at every event, and `fires` is total."""
        starting, max_epoch, steps, start_gs = params
        for e in loop_events(
            starting, max_epoch, steps, start_global_step=start_gs, runs_per_step=1
        ):
            v = fires(trigger, e)
            assert isinstance(v, bool)
            assert fires(negate(trigger), e) is (not v)
            assert fires(any_of(trigger, negate(trigger)), e)
            assert not fires(all_of(trigger, negate(trigger)), e)
            assert fires(any_of(trigger), e) is v

    @given(triggers())
    def test_records(self, trigger):
        """Combinations are hashable values that compare by content."""
        assert any_of(trigger, AtLastStep()) == any_of(trigger, AtLastStep())
        assert hash(negate(trigger)) == hash(negate(trigger))
        assert isinstance(all_of(trigger).triggers, tuple)

    def test_empty(self):
        """any_of() never fires; all_of() always does."""
        e = next(iter(loop_events(1, 1, 1)))
        assert not fires(any_of(), e)
        assert fires(all_of(), e)

    def test_on_kinds(self):
        """OnKinds restricts another trigger to some event kinds."""
        t = all_of(OnKinds(["trigger_step"]), GlobalStepMultiple(2))
        got = [(e.kind.value, e.global_step) for e in loop_events(1, 1, 4) if fires(t, e)]
        assert got == [("trigger_step", 2), ("trigger_step", 4)]
        assert OnKinds("trigger_epoch") == OnKinds([EventKind.TRIGGER_EPOCH])

    def test_repr(self):
        """Combinations print their parts."""
        assert repr(any_of(AtLastStep())) == "AnyOf(triggers=(AtLastStep(),))"
        assert repr(all_of()) == "AllOf(triggers=())"
        assert repr(negate(EpochMultiple(2))) == "Not(trigger=EpochMultiple(k=2))"
        assert isinstance(any_of(), AnyOf)
        assert isinstance(all_of(), AllOf)
        assert isinstance(negate(AtLastStep()), Not)

    def test_fail(self):
        """Non-records and unknown kinds are rejected, each one named."""
        with pytest.raises(TypeError, match=r"take trigger records; got #1: int, #2: str"):
            any_of(AtLastStep(), 3, "x")
        with pytest.raises(TypeError, match="take trigger records; got #0: function"):
            negate(lambda e: True)
        with pytest.raises(
            ValueError, match=r"OnKinds: unknown event kinds \['trigger', 'epoch'\]"
        ):
            OnKinds(["trigger", "trigger_epoch", "epoch"])
        e = next(iter(loop_events(1, 1, 1)))
        with pytest.raises(TypeError, match="'trigger' must be a trigger record; got function"):
            fires(lambda e: True, e)
        with pytest.raises(TypeError, match="'event' must be a LoopEvent; got tuple"):
            fires(AtLastStep(), ("before_train", 1))
        assert isinstance(e, LoopEvent)


class TestTrainerEvent:
    """`trainer_event` reads a trainer's counters into a LoopEvent."""

    @given(loop_params())
    def test_round_trip(self, params):
        """An object holding an event's position gives back the same event."""
        from types import SimpleNamespace

        from towerkit.callbacks.plumbing import trainer_event

        for e in loop_events(*params[:3], start_global_step=params[3]):
            p = e.position
            t = SimpleNamespace(
                starting_epoch=p.starting_epoch,
                max_epoch=p.max_epoch,
                steps_per_epoch=p.steps_per_epoch,
                epoch_num=p.epoch_num,
                local_step=p.local_step,
                global_step=p.global_step,
            )
            assert trainer_event(t, e.kind) == e


class TestFiringKinds:
    """`firing_kinds` names every event kind at which a record can fire."""

    @given(triggers(), loop_params())
    def test_covers_every_firing(self, trigger, params):
        """A record fires at no event whose kind is outside its firing kinds."""
        from towerkit.callbacks import firing_kinds

        kinds = firing_kinds(trigger)
        for e in loop_events(*params[:3], start_global_step=params[3], runs_per_step=2):
            assert e.kind in kinds or not fires(trigger, e), (e, kinds)

    @given(every_k())
    def test_every_k_exact(self, kw):
        """For `EveryK` the kinds are exactly those its fields turn on."""
        from towerkit.callbacks import firing_kinds

        on = {
            EventKind.TRIGGER_STEP: kw["steps"] is not None,
            EventKind.TRIGGER_EPOCH: kw["epochs"] is not None,
            EventKind.BEFORE_TRAIN: kw["before_train"],
        }
        assert firing_kinds(EveryK(**kw)) == {k for k, v in on.items() if v}

    def test_combinations(self):
        """Any-of unites, all-of intersects, not is every kind; a function predicate's record is asked."""
        from towerkit.callbacks import firing_kinds

        step, epoch = EveryK(steps=2), EveryK(epochs=1)
        assert firing_kinds(any_of(step, epoch)) == {
            EventKind.TRIGGER_STEP,
            EventKind.TRIGGER_EPOCH,
        }
        assert firing_kinds(all_of(step, epoch)) == frozenset()
        assert firing_kinds(all_of()) == frozenset(EventKind)
        assert firing_kinds(negate(step)) == frozenset(EventKind)
        assert firing_kinds(GlobalStepMultiple(3)) == frozenset(EventKind)
        assert firing_kinds(OnKinds(["after_train"])) == {EventKind.AFTER_TRAIN}

    def test_fail(self):
        """Only trigger records have firing kinds."""
        from towerkit.callbacks import firing_kinds

        with pytest.raises(TypeError, match="'trigger' must be a trigger record; got str 'steps'"):
            firing_kinds("steps")


class TestTrainerPosition:
    """`trainer_position` reads the counters without validating them again."""

    def test_cheap_and_equal(self):
        """The position equals the validated record built from the same counters."""
        from types import SimpleNamespace

        from towerkit.callbacks import LoopPosition
        from towerkit.callbacks._triggers import trainer_position

        counters = {
            "starting_epoch": 2,
            "max_epoch": 4,
            "steps_per_epoch": 5,
            "epoch_num": 3,
            "local_step": 1,
            "global_step": 12,
        }
        got = trainer_position(SimpleNamespace(**counters))
        bounds = LoopBounds(starting_epoch=2, max_epoch=4, steps_per_epoch=5)
        validated = LoopPosition(bounds=bounds, epoch_num=3, local_step=1, global_step=12)
        assert got == validated
        assert hash(got) == hash(validated)
        assert repr(got) == repr(validated)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            got.global_step = 13
        again = trainer_position(SimpleNamespace(**{**counters, "global_step": 13}))
        assert again.bounds is got.bounds, "the bounds record is built once while they stay"

    def test_the_trainers_own_bounds(self):
        """A trainer that keeps its `LoopBounds` (``loop_bounds``) lends that very record."""
        from types import SimpleNamespace

        from towerkit.callbacks._triggers import trainer_position

        bounds = LoopBounds(max_epoch=2, steps_per_epoch=3)
        trainer = SimpleNamespace(
            loop_bounds=bounds,
            starting_epoch=1,
            max_epoch=2,
            steps_per_epoch=3,
            epoch_num=1,
            local_step=0,
            global_step=1,
        )
        assert trainer_position(trainer).bounds is bounds

    def test_bad_bounds_named(self):
        """Counters that are no run's bounds fail with the record's message."""
        from types import SimpleNamespace

        from towerkit.callbacks._triggers import trainer_position

        broken = SimpleNamespace(
            starting_epoch=1,
            max_epoch=2,
            steps_per_epoch=-1,
            epoch_num=1,
            local_step=0,
            global_step=0,
        )
        with pytest.raises(ValueError, match=r"'steps_per_epoch' must be an int >= 0 .*; got -1"):
            trainer_position(broken)
