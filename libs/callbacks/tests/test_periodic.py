"""PeriodicTrigger, PeriodicCallback and EnableCallbackIf in a real training loop."""

import pytest
import tensorflow as tf
from callbacks_strategies import every_k, reference_every_k, reference_periodic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    AtLastStep,
    Callback,
    EnableCallbackIf,
    EpochMultiple,
    EventKind,
    EveryK,
    GlobalStepMultiple,
    HookedSession,
    PeriodicCallback,
    PeriodicTrigger,
    any_of,
)
from towerkit.towers.compat import tf1

SMALL = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class SetGlobalStep:
    """A session init that sets the global step, as a restored checkpoint would."""

    def __init__(self, step):
        self.step = step

    def init(self, sess):
        gs = tf1.train.get_global_step(sess.graph)
        gs.load(self.step, sess)


class Probe(Callback):
    """Records where each of its methods runs, as (method, epoch_num, global_step)."""

    def __init__(self, fetch=None):
        self.calls = []
        self.fetch = fetch
        self.results = []

    def _log(self, what):
        self.calls.append((what, self.trainer.epoch_num, self.trainer.global_step))

    def _before_epoch(self):
        self._log("before_epoch")

    def _before_run(self, ctx):
        self._log("before_run")
        return None if self.fetch is None else tf1.train.SessionRunArgs(self.fetch)

    def _after_run(self, ctx, values):
        self._log("after_run")
        self.results.append((self.trainer.global_step, values.results))

    def _trigger_step(self):
        self._log("trigger_step")

    def _trigger(self):
        self._log("trigger")

    def of(self, what):
        return [(e, g) for w, e, g in self.calls if w == what]


class TriggerOnly(Callback):
    """Acts only in trigger()."""

    def __init__(self):
        self.at = []

    def _trigger(self):
        self.at.append((self.trainer.epoch_num, self.trainer.global_step))


def run(callbacks, *, steps, max_epoch, starting=1, start_gs=0):
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        train_op = tf1.assign_add(w, 1.0)
        trainer = LoopTrainer(
            g,
            train_op,
            callbacks,
            steps_per_epoch=steps,
            max_epoch=max_epoch,
            starting_epoch=starting,
            session_init=SetGlobalStep(start_gs) if start_gs else None,
        )
        trainer.w = w
        return trainer.train()


@st.composite
def small_runs(draw):
    starting = draw(st.integers(1, 3))
    return (
        starting,
        draw(st.integers(starting, starting + 3)),
        draw(st.integers(1, 4)),
        draw(st.sampled_from([0, 5])),
    )


class TestPeriodicTrigger:
    """`PeriodicTrigger` calls trigger() where the reference loop says, and nowhere else."""

    @SMALL
    @given(small_runs(), every_k())
    def test_matches_reference_loop(self, run_params, kw):
        """In a real loop, trigger() runs exactly at the reference loop's firings."""
        starting, max_epoch, steps, start_gs = run_params
        probe = Probe()
        run(
            [PeriodicTrigger(probe, kw["steps"], kw["epochs"], kw["before_train"])],
            steps=steps,
            max_epoch=max_epoch,
            starting=starting,
            start_gs=start_gs,
        )
        expected = reference_every_k(
            starting, max_epoch, steps, start_gs, kw["steps"], kw["epochs"], kw["before_train"]
        )
        assert probe.of("trigger") == [(e, g) for _, e, g in expected]
        n_steps = (max_epoch - starting + 1) * steps
        assert len(probe.of("trigger_step")) == n_steps
        assert len(probe.of("before_run")) == n_steps

    def test_replaces_trigger_epoch(self, graph):
        """The wrapped callback's own trigger_epoch is not called: the schedule replaces it."""

        class OwnEpoch(Callback):
            def __init__(self):
                self.epochs, self.triggers = [], []

            def _trigger_epoch(self):
                self.epochs.append(self.trainer.epoch_num)

            def _trigger(self):
                self.triggers.append(self.trainer.global_step)

        cb = OwnEpoch()
        run([PeriodicTrigger(cb, every_k_steps=2)], steps=3, max_epoch=2)
        assert cb.epochs == []
        assert cb.triggers == [2, 4, 6]

    def test_has_hook(self):
        """It hooks only the phases where it or the wrapped callback does something."""
        pt = PeriodicTrigger(TriggerOnly(), every_k_epochs=2)
        assert not pt.has_hook("_trigger_step")
        assert not pt.has_hook("_before_run")
        assert not pt.has_hook("_before_train")
        assert pt.has_hook("_trigger_epoch")
        pt = PeriodicTrigger(Probe(), every_k_steps=2)
        assert pt.has_hook("_trigger_step")
        assert pt.has_hook("_before_run")
        assert not pt.has_hook("_trigger_epoch")
        assert PeriodicTrigger(TriggerOnly(), before_train=True).has_hook("_before_train")

    def test_properties(self):
        """The record is exposed read-only."""
        pt = PeriodicTrigger(TriggerOnly(), every_k_steps=5, before_train=True)
        assert pt.trigger_record == EveryK(steps=5, before_train=True)
        with pytest.raises(AttributeError):
            pt.trigger_record = EveryK(steps=1)
        assert str(pt) == "PeriodicTrigger(TriggerOnly, steps=5, epochs=None, before_train=True)"

    def test_fail(self):
        """Bad schedules fail at construction, naming the field."""
        with pytest.raises(
            ValueError, match="set at least one of 'steps', 'epochs' or 'before_train'"
        ):
            PeriodicTrigger(TriggerOnly())
        with pytest.raises(ValueError, match="'epochs' must be > 0; got 0"):
            PeriodicTrigger(TriggerOnly(), every_k_epochs=0)
        with pytest.raises(TypeError, match="'cb' must be a Callback; got function"):
            PeriodicTrigger(lambda: None, every_k_steps=1)


class TestPeriodicCallback:
    """`PeriodicCallback` enables the gated methods where the reference loop says."""

    @SMALL
    @given(small_runs(), every_k())
    def test_matches_reference_loop(self, run_params, kw):
        """trigger_step and trigger_epoch run at the reference loop's points, before_run by its rule."""
        starting, max_epoch, steps, start_gs = run_params
        k_steps, k_epochs = kw["steps"], kw["epochs"]
        if k_steps is None and k_epochs is None:
            k_epochs = 1
        probe = Probe()
        run(
            [PeriodicCallback(probe, k_steps, k_epochs)],
            steps=steps,
            max_epoch=max_epoch,
            starting=starting,
            start_gs=start_gs,
        )
        expected = reference_periodic(starting, max_epoch, steps, start_gs, k_steps, k_epochs)
        got = [("trigger_step", e, g) for e, g in probe.of("trigger_step")]
        got += [("trigger_epoch", e, g) for e, g in probe.of("trigger")]
        assert sorted(got, key=lambda t: (t[2], t[0] == "trigger_epoch")) == expected
        for e, g in probe.of("before_run"):
            last = e == max_epoch and g == start_gs + (max_epoch - starting + 1) * steps - 1
            assert (k_steps and g % k_steps == 0) or (k_epochs and (e % k_epochs == 0 or last))
        assert len(probe.of("after_run")) == len(probe.of("before_run"))

    def test_after_run_follows_before_run(self):
        """after_run gets the fetches of the runs whose before_run was enabled, and only those."""
        g = tf.Graph()
        with g.as_default():
            w = tf1.get_variable("w", initializer=0.0)
            train_op = tf1.assign_add(w, 1.0)
            probe = Probe(fetch=w.read_value())
            LoopTrainer(
                g,
                train_op,
                [PeriodicCallback(probe, every_k_steps=3)],
                steps_per_epoch=4,
                max_epoch=2,
            ).train()
        # before_run at global steps 0, 3, 6 (the count before the run)
        assert probe.of("before_run") == [(1, 0), (1, 3), (2, 6)]
        assert [gs for gs, _ in probe.results] == [1, 4, 7]
        assert all(v is not None for _, v in probe.results)

    def test_no_fetches_when_disabled(self):
        """Steps where the wrapped callback is off run the bare call: no extra fetches."""
        g = tf.Graph()
        with g.as_default():
            w = tf1.get_variable("w", initializer=0.0)
            train_op = tf1.assign_add(w, 1.0)
            probe = Probe(fetch=w.read_value())
            trainer = LoopTrainer(
                g,
                train_op,
                [PeriodicCallback(probe, every_k_steps=3)],
                steps_per_epoch=3,
                max_epoch=3,
            )
            trainer.train()
        # two compiled calls: the train op alone, and the train op with the probe's fetch
        fetched = sorted(len(key[0]) for key in trainer.hooked_sess._by_structure)
        assert fetched == [1, 2]

    def test_record(self):
        """The record is the documented combination, last step included with epochs."""
        pc = PeriodicCallback(TriggerOnly(), every_k_steps=10, every_k_epochs=2)
        assert pc.trigger_record == any_of(GlobalStepMultiple(10), EpochMultiple(2), AtLastStep())

    def test_last_step_fires(self):
        """With every_k_epochs, the final epoch triggers even when it is not a multiple."""
        cb = TriggerOnly()
        run([PeriodicCallback(cb, every_k_epochs=2)], steps=2, max_epoch=3)
        assert cb.at == [(2, 4), (3, 6)]

    def test_fail(self):
        """Neither period set is rejected."""
        with pytest.raises(
            ValueError, match="PeriodicCallback: set 'every_k_steps' or 'every_k_epochs'"
        ):
            PeriodicCallback(TriggerOnly())


class TestEnableCallbackIf:
    """`EnableCallbackIf` gates six methods by a predicate, evaluated once per run."""

    def test_callable_pred(self):
        """A function predicate gates before_epoch and trigger; before_run decides after_run."""
        evaluated = []

        def pred(self):
            evaluated.append(self.trainer.global_step)
            return self.trainer.epoch_num == 2

        probe = Probe()
        wrapper = EnableCallbackIf(probe, pred)
        run([wrapper], steps=2, max_epoch=3)
        assert probe.of("before_epoch") == [(2, 2)]
        assert probe.of("trigger") == [(2, 4)]
        assert probe.of("before_run") == [(2, 2), (2, 3)]
        assert probe.of("after_run") == [(2, 3), (2, 4)]
        # before_epoch (3) + before_run (6) + trigger_step (6) + trigger_epoch (3); never after_run
        assert len(evaluated) == 18
        assert wrapper.trigger_record is None

    def test_unaffected_methods(self):
        """before_train, after_train and trigger() itself are not gated."""

        class Phases(Callback):
            def __init__(self):
                self.seen = []

            def _before_train(self):
                self.seen.append("before_train")

            def _after_train(self):
                self.seen.append("after_train")

        cb = Phases()
        run([EnableCallbackIf(cb, lambda self: False)], steps=1, max_epoch=1)
        assert cb.seen == ["before_train", "after_train"]

    def test_has_hook_and_cost(self):
        """A gated callback without run hooks adds nothing to session runs."""
        wrapper = EnableCallbackIf(TriggerOnly(), lambda self: True)
        assert not wrapper.has_hook("_before_run")
        assert not wrapper.has_hook("_after_run")
        assert not wrapper.has_hook("_trigger_step")
        assert wrapper.has_hook("_trigger_epoch")
        assert wrapper.trigger_kinds == (EventKind.TRIGGER_EPOCH,)
        g = tf.Graph()
        with g.as_default(), tf1.Session(graph=g) as s:
            hs = HookedSession(s, [wrapper, PeriodicCallback(TriggerOnly(), every_k_steps=2)])
            assert hs._hooked is False

    def test_record_pred(self):
        """A trigger record as predicate is evaluated at the event of the method being called."""
        probe = Probe()
        run([EnableCallbackIf(probe, EveryK(epochs=2))], steps=2, max_epoch=4)
        assert probe.of("trigger") == [(2, 4), (4, 8)]
        assert probe.of("trigger_step") == []
        assert probe.of("before_run") == []

    def test_fail(self):
        """A predicate that is neither a function nor a record is rejected."""
        with pytest.raises(TypeError, match="'pred' must be a callable pred"):
            EnableCallbackIf(TriggerOnly(), 3)
