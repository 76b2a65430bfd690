"""The pure event stream of the training loop."""

import attrs
import pytest
from callbacks_strategies import loop_params
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    EventKind,
    LoopBounds,
    LoopEvent,
    LoopPosition,
    count_steps,
    loop_events,
)
from towerkit.towers.compat import tf1


def reference_trace(starting, max_epoch, steps, start_gs, runs):
    """The loop written as plain nested for-loops: what the stream must equal."""
    out = [("before_train", starting - 1, -1, start_gs)]
    gs = start_gs
    local = -1
    epoch = starting - 1
    for epoch in range(starting, max_epoch + 1):
        out.append(("before_epoch", epoch, -1, gs))
        for local in range(steps):
            for _ in range(runs):
                out.append(("before_run", epoch, local, gs))
                gs += 1
                out.append(("after_run", epoch, local, gs))
            out.append(("trigger_step", epoch, local, gs))
        out.append(("after_epoch", epoch, local, gs))
        out.append(("trigger_epoch", epoch, local, gs))
    out.append(("after_train", epoch, local, gs))
    return out


class TestLoopEvents:
    """`loop_events` yields the documented order and positions."""

    @given(loop_params(), st.integers(0, 3))
    def test_matches_reference_loop(self, params, runs):
        """The stream equals a plain nested loop for any parameters."""
        starting, max_epoch, steps, start_gs = params
        got = [
            (e.kind.value, e.epoch_num, e.local_step, e.global_step)
            for e in loop_events(
                starting, max_epoch, steps, start_global_step=start_gs, runs_per_step=runs
            )
        ]
        assert got == reference_trace(starting, max_epoch, steps, start_gs, runs)

    @given(loop_params())
    def test_step_count(self, params):
        """There is one trigger_step per step, as `count_steps` says."""
        starting, max_epoch, steps, _ = params
        n = sum(e.kind is EventKind.TRIGGER_STEP for e in loop_events(starting, max_epoch, steps))
        assert n == count_steps(starting, max_epoch, steps)

    @given(loop_params(), st.integers(0, 3), st.sets(st.sampled_from(list(EventKind))))
    def test_kinds_filter_the_stream(self, params, runs, kinds):
        """``kinds=`` yields exactly the full stream's events of those kinds (steps skipped or not)."""
        starting, max_epoch, steps, start_gs = params
        kw = {"start_global_step": start_gs, "runs_per_step": runs}
        full = [e for e in loop_events(starting, max_epoch, steps, **kw) if e.kind in kinds]
        assert list(loop_events(starting, max_epoch, steps, kinds=kinds, **kw)) == full

    def test_epoch_kinds_skip_the_steps(self):
        """Epoch events of a run of a million steps per epoch come at once."""
        evs = list(loop_events(1, 3, 10**6, kinds=[EventKind.TRIGGER_EPOCH]))
        assert [(e.epoch_num, e.local_step, e.global_step) for e in evs] == [
            (1, 10**6 - 1, 10**6),
            (2, 10**6 - 1, 2 * 10**6),
            (3, 10**6 - 1, 3 * 10**6),
        ]

    def test_trigger_epoch_of_epoch_3(self):
        """In the trigger_epoch of epoch 3, epoch_num is 3 (the documented example)."""
        evs = [e for e in loop_events(1, 5, 2) if e.kind is EventKind.TRIGGER_EPOCH]
        assert [e.epoch_num for e in evs] == [1, 2, 3, 4, 5]
        assert all(e.local_step == 1 for e in evs)

    def test_fail(self):
        """Bad loop parameters are rejected with the field named."""
        with pytest.raises(ValueError, match=r"'steps_per_epoch' must be an int >= 0 .*; got -1"):
            list(loop_events(1, 2, -1))
        with pytest.raises(ValueError, match="'max_epoch' must be >= 'starting_epoch' - 1"):
            list(loop_events(5, 2, 1))
        with pytest.raises(ValueError, match="'runs_per_step' must be >= 0"):
            list(loop_events(1, 2, 1, runs_per_step=-1))


class TestLoopBounds:
    """The bounds record: the one place a run's epochs and steps are checked."""

    def test_repr(self):
        """The repr names every field."""
        assert repr(LoopBounds(max_epoch=3, steps_per_epoch=2)) == (
            "LoopBounds(starting_epoch=1, max_epoch=3, steps_per_epoch=2)"
        )

    def test_fail(self):
        """Every fault is listed at once; a bound of the wrong kind makes it a TypeError."""
        with pytest.raises(
            ValueError,
            match=r"^'starting_epoch' must be an int >= 1 \(1-based\); got 0; "
            r"'steps_per_epoch' must be an int >= 0 \(0: epochs of no step, an evaluation\); "
            r"got -2$",
        ):
            LoopBounds(starting_epoch=0, max_epoch=3, steps_per_epoch=-2)
        with pytest.raises(
            ValueError,
            match=r"^'max_epoch' must be >= 'starting_epoch' - 1 \(an empty run\); "
            r"got max_epoch=1, starting_epoch=3$",
        ):
            LoopBounds(starting_epoch=3, max_epoch=1, steps_per_epoch=1)
        with pytest.raises(TypeError, match=r"^'max_epoch' must be an int; got 2.0$"):
            LoopBounds(max_epoch=2.0, steps_per_epoch=1)
        with pytest.raises(TypeError, match=r"'steps_per_epoch' must be an int >= 0 .*; got True"):
            LoopBounds(max_epoch=2, steps_per_epoch=True)

    def test_position_checks_the_same_way(self):
        """`LoopPosition` and `loop_events` refuse bad bounds with the record's message."""
        msg = r"^'steps_per_epoch' must be an int >= 0 \(0: epochs of no step, an evaluation\); got -1$"
        with pytest.raises(ValueError, match=msg):
            LoopPosition(bounds=LoopBounds(max_epoch=1, steps_per_epoch=-1), epoch_num=0)
        with pytest.raises(TypeError, match="'bounds' must be <class"):
            LoopPosition(bounds=(1, 1, 1), epoch_num=0)
        with pytest.raises(ValueError, match=msg):
            next(loop_events(1, 1, -1))

    @given(loop_params())
    def test_events_and_counts(self, params):
        """The record's events are `loop_events` of its bounds; total_steps counts their steps."""
        starting, max_epoch, steps, start_gs = params
        bounds = LoopBounds(starting_epoch=starting, max_epoch=max_epoch, steps_per_epoch=steps)
        events = list(bounds.events(start_global_step=start_gs))
        assert events == list(loop_events(starting, max_epoch, steps, start_global_step=start_gs))
        assert sum(e.kind is EventKind.TRIGGER_STEP for e in events) == bounds.total_steps
        assert bounds.total_steps == count_steps(starting, max_epoch, steps)
        assert list(bounds.epochs) == sorted({e.epoch_num for e in events[1:-1]})
        assert events[-1].position.bounds == bounds


class TestLoopPosition:
    """The position record."""

    def test_repr(self):
        """The repr names every field."""
        pos = LoopPosition(bounds=LoopBounds(max_epoch=3, steps_per_epoch=2), epoch_num=1)
        assert repr(pos) == (
            "LoopPosition(bounds=LoopBounds(starting_epoch=1, max_epoch=3, steps_per_epoch=2), "
            "epoch_num=1, local_step=-1, global_step=0)"
        )
        assert (pos.starting_epoch, pos.max_epoch, pos.steps_per_epoch) == (1, 3, 2)
        assert repr(LoopEvent(EventKind.BEFORE_TRAIN, pos)).startswith(
            "LoopEvent(kind=EventKind.BEFORE_TRAIN"
        )

    def test_frozen(self):
        """Positions change only through `attrs.evolve`, which validates."""
        pos = LoopPosition(bounds=LoopBounds(max_epoch=3, steps_per_epoch=2), epoch_num=1)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            pos.epoch_num = 2
        with pytest.raises(ValueError, match="'global_step' must be >= 0"):
            attrs.evolve(pos, global_step=-1)

    @given(loop_params())
    def test_is_last_step(self, params):
        """Exactly one trigger_step is the last step of a non-empty run."""
        starting, max_epoch, steps, _ = params
        lasts = [
            e
            for e in loop_events(starting, max_epoch, steps)
            if e.kind is EventKind.TRIGGER_STEP and e.position.is_last_step
        ]
        assert len(lasts) == (1 if max_epoch >= starting else 0)


class _Recorder(Callback):
    """Records every callback method the driving loop calls, with the trainer's position."""

    def __init__(self):
        self.seen = []

    def _record(self, kind):
        t = self.trainer
        self.seen.append((kind.value, t.epoch_num, t.local_step, t.global_step))

    def _before_train(self):
        self._record(EventKind.BEFORE_TRAIN)

    def _before_epoch(self):
        self._record(EventKind.BEFORE_EPOCH)

    def _before_run(self, ctx):
        self._record(EventKind.BEFORE_RUN)

    def _after_run(self, ctx, values):
        self._record(EventKind.AFTER_RUN)

    def _trigger_step(self):
        self._record(EventKind.TRIGGER_STEP)

    def _after_epoch(self):
        self._record(EventKind.AFTER_EPOCH)

    def _trigger_epoch(self):
        self._record(EventKind.TRIGGER_EPOCH)

    def _after_train(self):
        self._record(EventKind.AFTER_TRAIN)


class TestTestLoop:
    """The loop that drives this lib's tests calls callbacks as `loop_events` says."""

    @pytest.mark.parametrize(("starting", "max_epoch", "steps"), [(1, 2, 3), (2, 3, 1), (3, 2, 2)])
    def test_follows_loop_events(self, graph, starting, max_epoch, steps):
        """Every method call, in order, at the position of the matching event."""
        recorder = _Recorder()
        w = tf1.get_variable("w", initializer=0.0)
        LoopTrainer(
            graph,
            tf1.assign_add(w, 1.0),
            [recorder],
            steps_per_epoch=steps,
            max_epoch=max_epoch,
            starting_epoch=starting,
        ).train()
        expected = [
            (e.kind.value, e.epoch_num, e.local_step, e.global_step)
            for e in loop_events(starting, max_epoch, steps)
        ]
        assert recorder.seen == expected
