"""The pure timeline: when each callback fires, without TensorFlow, checked against real loops."""

import itertools
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf
from callbacks_strategies import loop_params, triggers
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    EnableCallbackIf,
    EventKind,
    EveryK,
    Firing,
    ModelSaver,
    PeriodicCallback,
    PeriodicTrigger,
    ScheduledHyperParamSetter,
    TimelineEntry,
    fires,
    format_timeline,
    iter_timeline,
    loop_events,
    timeline,
    timeline_firings,
)
from towerkit.callbacks.plumbing import timeline_entry
from towerkit.towers.compat import tf1

kinds = st.sets(st.sampled_from(list(EventKind)), min_size=1)


class TestTimeline:
    """`timeline` lists the events where `fires` holds, in loop order."""

    @given(
        st.lists(st.tuples(triggers(max_leaves=3), kinds), min_size=1, max_size=3), loop_params()
    )
    def test_matches_event_stream(self, entries, params):
        """The timeline equals filtering the full event stream with `fires`."""
        starting, max_epoch, steps, start_gs = params
        items = [
            TimelineEntry(name=f"t{i}", trigger=t, kinds=sorted(k))
            for i, (t, k) in enumerate(entries)
        ]
        got = timeline(items, starting, max_epoch, steps, start_global_step=start_gs)
        want = [
            (e.kind, e.epoch_num, e.local_step, e.global_step, it.name)
            for e in loop_events(starting, max_epoch, steps, start_global_step=start_gs)
            for it in items
            if e.kind in it.kinds and fires(it.trigger, e)
        ]
        assert [(f.kind, f.epoch_num, f.local_step, f.global_step, f.name) for f in got] == want

    @given(
        st.lists(st.tuples(triggers(max_leaves=3), kinds), min_size=1, max_size=3),
        loop_params(),
        st.integers(0, 40),
    )
    def test_lazy_equals_eager(self, entries, params, n):
        """`iter_timeline` yields the firings `timeline` lists; its first n are the list's first n."""
        starting, max_epoch, steps, start_gs = params
        items = [
            TimelineEntry(name=f"t{i}", trigger=t, kinds=sorted(k))
            for i, (t, k) in enumerate(entries)
        ]
        eager = timeline(items, starting, max_epoch, steps, start_global_step=start_gs)
        lazy = iter_timeline(items, starting, max_epoch, steps, start_global_step=start_gs)
        assert list(itertools.islice(lazy, n)) == eager[:n]
        assert list(lazy) == eager[n:]

    @given(st.integers(1, 5), st.integers(1, 4))
    def test_reads_no_event_past_the_last_firing_taken(self, n, k):
        """Taking n firings of a huge run reads the events up to the n-th firing and no further."""
        read = []

        def counted(events):
            for event in events:
                read.append(event)
                yield event

        entry = TimelineEntry(name="every_k", trigger=EveryK(steps=k))
        events = loop_events(1, 99_999, 1000, kinds=entry.kinds)
        taken = list(itertools.islice(timeline_firings([entry], counted(events)), n))
        assert [f.global_step for f in taken] == [k * (i + 1) for i in range(n)]
        assert read[-1].global_step == k * n
        assert len(read) == 1 + k * n  # before_train, then one trigger_step per step

    def test_arguments_checked_at_the_call(self):
        """Bad bounds or entries raise when `iter_timeline` is called, not on the first firing."""
        with pytest.raises(ValueError, match=r"'steps_per_epoch' must be an int >= 0 .*; got -1"):
            iter_timeline([EveryK(epochs=1)], 1, 2, -1)
        with pytest.raises(ValueError, match="'on_unknown' must be 'raise' or 'skip'"):
            iter_timeline([EveryK(epochs=1)], 1, 2, 1, on_unknown="ignore")

    def test_callback_list(self):
        """Shells, schedules and plain callbacks are read from their records."""

        class Plain(Callback):
            def _trigger(self):
                pass

        cbs = [
            ScheduledHyperParamSetter("learning_rate", [(0, 0.1), (2, 0.01)]),
            PeriodicTrigger(ModelSaver(), every_k_epochs=2),
            Plain(),
            Callback(),
        ]
        got = [
            (f.kind.value, f.epoch_num, f.global_step, f.name, f.value)
            for f in timeline(cbs, 1, 3, 10)
        ]
        assert got == [
            ("before_train", 0, 0, "ScheduledHyperParamSetter(learning_rate)", 0.1),
            ("trigger_epoch", 1, 10, "Plain", None),
            ("trigger_epoch", 2, 20, "ScheduledHyperParamSetter(learning_rate)", 0.01),
            (
                "trigger_epoch",
                2,
                20,
                "PeriodicTrigger(ModelSaver, steps=None, epochs=2, before_train=False)",
                None,
            ),
            ("trigger_epoch", 2, 20, "Plain", None),
            ("trigger_epoch", 3, 30, "Plain", None),
        ]

    def test_resumed_run(self):
        """A resumed step schedule starts from the value in effect at the restored step."""
        cb = ScheduledHyperParamSetter("lr", [(5, 1.0), (15, 2.0)], step_based=True)
        got = [
            (f.kind.value, f.global_step, f.value)
            for f in timeline([cb], 3, 4, 5, start_global_step=10)
        ]
        assert got == [("before_train", 10, 1.0), ("trigger_step", 15, 2.0)]

    def test_function_predicates(self):
        """A function predicate cannot be read: an error naming it, or skipped on request."""
        cbs = [EnableCallbackIf(Callback(), lambda self: True), ("x", EveryK(epochs=1))]
        with pytest.raises(
            ValueError,
            match=r"cannot tell when EnableCallbackIf\(Callback\) fires: .* on_unknown='skip'",
        ):
            timeline(cbs, 1, 1, 1)
        assert [f.name for f in timeline(cbs, 1, 1, 1, on_unknown="skip")] == ["x"]

    def test_format(self):
        """The table has a header and one line per firing."""
        text = format_timeline(timeline([("lr", EveryK(steps=2))], 1, 1, 4))
        assert text.splitlines() == [
            "epoch  local_step  global_step  event         name  value",
            "1      1           2            trigger_step  lr",
            "1      3           4            trigger_step  lr",
        ]

    def test_repr(self):
        """Records print their fields."""
        f = Firing(name="a", kind=EventKind.TRIGGER_EPOCH, epoch_num=1, local_step=0, global_step=1)
        assert (
            repr(f)
            == "Firing(name='a', kind=EventKind.TRIGGER_EPOCH, epoch_num=1, local_step=0, global_step=1, value=None)"
        )
        assert (
            timeline_entry(EveryK(steps=1)).name
            == "EveryK(steps=1, epochs=None, before_train=False)"
        )

    def test_fail(self):
        """Other kinds of input are rejected with their type."""
        with pytest.raises(
            TypeError, match=r"a timeline takes callbacks, trigger records or .* got int 3"
        ):
            timeline([3], 1, 1, 1)
        with pytest.raises(ValueError, match="'on_unknown' must be 'raise' or 'skip'"):
            timeline([], 1, 1, 1, on_unknown="warn")
        with pytest.raises(ValueError, match="'trigger_end' is not a valid EventKind"):
            TimelineEntry(name="a", trigger=EveryK(steps=1), kinds=["trigger_end"])


class Probe(Callback):
    """Records (kind, epoch, global step) of its trigger() and gated methods."""

    def __init__(self):
        self.seen = []

    def _before_run(self, ctx):
        self.seen.append(("before_run", self.trainer.epoch_num, self.trainer.global_step))

    def _trigger(self):
        self.seen.append(("trigger", self.trainer.epoch_num, self.trainer.global_step))


@pytest.mark.procs
class TestAgainstRealLoop:
    """What the timeline says is what a real loop does."""

    @pytest.mark.parametrize(
        ("make", "kw", "watched"),
        [
            (lambda p: PeriodicTrigger(p, every_k_steps=3, before_train=True), {}, {"trigger"}),
            (lambda p: PeriodicTrigger(p, every_k_epochs=2), {}, {"trigger"}),
            (lambda p: PeriodicCallback(p, every_k_steps=4), {}, {"trigger", "before_run"}),
            (
                lambda p: PeriodicCallback(p, every_k_epochs=2),
                {"max_epoch": 3},
                {"trigger", "before_run"},
            ),
        ],
    )
    def test_same_firings(self, make, kw, watched):
        """The probe's calls happen exactly at the timeline's firings (PeriodicTrigger
        schedules trigger() only; PeriodicCallback gates before_run too)."""
        probe = Probe()
        cb = make(probe)
        params = {"steps_per_epoch": 3, "max_epoch": 4, **kw}
        planned = [
            (
                "before_run" if f.kind is EventKind.BEFORE_RUN else "trigger",
                f.epoch_num,
                f.global_step,
            )
            for f in timeline([cb], 1, params["max_epoch"], params["steps_per_epoch"])
        ]
        g = tf.Graph()
        with g.as_default():
            w = tf1.get_variable("w", initializer=0.0)
            LoopTrainer(g, tf1.assign_add(w, 1.0), [cb], **params).train()
        assert [s for s in probe.seen if s[0] in watched] == planned
        assert planned


CORE_NAMES = (
    "loop_events",
    "LoopPosition",
    "EveryK",
    "fires",
    "piecewise_schedule",
    "value_at",
    "timeline",
    "should_change",
    "MeanState",
    "precision_recall",
    "StopTraining",
)
"""Names of the functional core, importable from the package without TensorFlow."""

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoTensorFlow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError(f"{name} is blocked: this name must not need TensorFlow")
            return None

    sys.meta_path.insert(0, NoTensorFlow())
    import towerkit.callbacks as cb
    values = [getattr(cb, name) for name in sys.argv[1:]]
    assert "tensorflow" not in sys.modules
    print("ok", len(values))
    """
)


@pytest.mark.procs
class TestNoTensorFlow:
    """The core imports from the package in a process where TensorFlow cannot be imported."""

    def run_blocked(self, *names):
        """Look `names` up on ``towerkit.callbacks`` with TensorFlow blocked."""
        return subprocess.run(
            [sys.executable, "-c", BLOCKER, *names], capture_output=True, text=True, check=False
        )

    def test_core_imports_without_tensorflow(self):
        """Looking the core names up succeeds and leaves TensorFlow out of ``sys.modules``."""
        run = self.run_blocked(*CORE_NAMES)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == f"ok {len(CORE_NAMES)}"

    def test_shells_need_tensorflow(self):
        """The check has teeth: looking up a shell imports its module, which needs TensorFlow."""
        run = self.run_blocked("loop_events", "ModelSaver")
        assert run.returncode != 0
        assert "tensorflow is blocked" in run.stderr


class TestTimelineEntry:
    """The entry record checks its trigger."""

    def test_fail(self):
        """A trigger that is not a record is rejected."""
        with pytest.raises(TypeError, match="'trigger' must be a trigger record; got function"):
            TimelineEntry(name="a", trigger=lambda e: True)
