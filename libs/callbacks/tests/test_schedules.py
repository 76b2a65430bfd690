"""Schedules: records, `value_at`, `value_in_effect` and the `OnSchedule` trigger."""

import itertools

import attrs
import pytest
from callbacks_strategies import (
    loop_params,
    reference_in_effect,
    reference_value_at,
    schedule_points,
)
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    EventKind,
    LoopBounds,
    LoopPosition,
    OnSchedule,
    PiecewiseSchedule,
    fires,
    loop_events,
    piecewise_schedule,
    schedule_point,
    scheduled_value,
    value_at,
    value_in_effect,
)
from towerkit.callbacks._schedules import non_integral_entries

interps = st.sampled_from([None, "linear"])


class TestPiecewiseSchedule:
    """The schedule record validates its points and is callable."""

    @given(schedule_points(), interps, st.integers(-2, 25))
    def test_value_at_matches_reference(self, points, interp, point):
        """`value_at` equals a linear scan of the documented rule."""
        s = PiecewiseSchedule(points=points, interp=interp)
        got = value_at(s, point)
        want = reference_value_at(points, interp, point)
        assert got == pytest.approx(want) if want is not None else got is None
        assert s(point) == got

    @given(schedule_points(), interps, st.integers(-2, 25))
    def test_in_effect_matches_reference(self, points, interp, point):
        """`value_in_effect` is the last scheduled (or interpolated) value at or before the point."""
        s = PiecewiseSchedule(points=points, interp=interp)
        got = value_in_effect(s, point)
        want = reference_in_effect(points, interp, point)
        assert got == pytest.approx(want) if want is not None else got is None

    @given(schedule_points())
    def test_linear_stays_within_neighbours(self, points):
        """Interpolated values lie between the two scheduled values around them."""
        s = PiecewiseSchedule(points=points, interp="linear")
        for (p0, v0), (p1, v1) in itertools.pairwise(points):
            for p in range(p0, p1 + 1):
                assert min(v0, v1) - 1e-9 <= s(p) <= max(v0, v1) + 1e-9

    def test_repr(self):
        """The repr shows the normalized points."""
        s = piecewise_schedule([[0, 1], (5, 2.5)], interp="linear", unit="step")
        assert (
            repr(s)
            == "PiecewiseSchedule(points=((0, 1.0), (5, 2.5)), interp='linear', unit='step')"
        )
        assert s.step_based

    def test_fail(self):
        """Out-of-order, negative, malformed points and unknown options are rejected, all listed."""
        with pytest.raises(
            ValueError,
            match=r"strictly increasing; entries out of order: #2 \(3, 0.2\) after #1 \(5, 0.1\), #3 \(3, 0.3\) after #2 \(3, 0.2\)",
        ):
            piecewise_schedule([(1, 1.0), (5, 0.1), (3, 0.2), (3, 0.3)])
        with pytest.raises(ValueError, match=r"must be >= 0; negative entries: #0 \(-1, 1.0\)"):
            piecewise_schedule([(-1, 1.0)])
        with pytest.raises(ValueError, match="at least one"):
            piecewise_schedule([])
        with pytest.raises(
            TypeError,
            match=r"wrong entries: #0 \(1.5, 1\): point 1.5 is not an int; #1 \(2,\): not a \(point, value\) pair; #2 \(3, 'a'\): value 'a' is not a real number",
        ):
            piecewise_schedule([(1.5, 1), (2,), (3, "a")])
        with pytest.raises(TypeError, match="must be a list of"):
            piecewise_schedule("30:0.1")
        with pytest.raises(
            ValueError, match=r"'interp' must be one of \(None, 'linear'\); got 'cubic'"
        ):
            piecewise_schedule([(1, 1.0)], interp="cubic")
        with pytest.raises(
            ValueError, match=r"'unit' must be one of \('epoch', 'step'\); got 'iter'"
        ):
            piecewise_schedule([(1, 1.0)], unit="iter")
        with pytest.raises(ValueError, match="strictly increasing"):
            attrs.evolve(piecewise_schedule([(1, 1.0), (2, 2.0)]), points=[(2, 1.0), (1, 2.0)])


def reference_setter(
    points, interp, step_based, set_at_beginning, starting, max_epoch, steps, start_gs
):
    """Where a scheduled setter sets which value, from a plain loop over the documented rules."""
    out = []
    first = start_gs if step_based else starting - 1
    v = (reference_in_effect if set_at_beginning else reference_value_at)(points, interp, first)
    if v is not None:
        out.append(("before_train", starting - 1, start_gs, v))
    gs = start_gs
    for epoch in range(starting, max_epoch + 1):
        for _ in range(steps):
            gs += 1
            if step_based and (v := reference_value_at(points, interp, gs)) is not None:
                out.append(("trigger_step", epoch, gs, v))
        if not step_based and (v := reference_value_at(points, interp, epoch)) is not None:
            out.append(("trigger_epoch", epoch, gs, v))
    return out


class TestOnSchedule:
    """`OnSchedule` fires where a scheduled setter sets a value, with that value."""

    @given(schedule_points(max_point=30), interps, st.booleans(), st.booleans(), loop_params())
    def test_matches_reference_loop(self, points, interp, step_based, at_beginning, params):
        """Firings and values equal the reference loop's."""
        rule = OnSchedule(
            schedule=piecewise_schedule(points, interp, "step" if step_based else "epoch"),
            set_at_beginning=at_beginning,
        )
        got = [
            (e.kind.value, e.epoch_num, e.global_step, scheduled_value(rule, e))
            for e in loop_events(*params[:3], start_global_step=params[3])
            if fires(rule, e)
        ]
        want = reference_setter(points, interp, step_based, at_beginning, *params)
        assert [g[:3] for g in got] == [w[:3] for w in want]
        assert [g[3] for g in got] == pytest.approx([w[3] for w in want])

    def test_repr(self):
        """The repr holds the schedule."""
        rule = OnSchedule(schedule=piecewise_schedule([(1, 2.0)]))
        assert repr(rule) == (
            "OnSchedule(schedule=PiecewiseSchedule(points=((1, 2.0),), interp=None, unit='epoch'), "
            "set_at_beginning=True)"
        )

    @given(schedule_points(max_point=30), interps, st.booleans())
    def test_firing_kinds(self, points, interp, step_based):
        """Before training and after each step (step schedules) or each epoch (epoch schedules)."""
        from towerkit.callbacks import firing_kinds

        rule = OnSchedule(
            schedule=piecewise_schedule(points, interp, "step" if step_based else "epoch")
        )
        after = EventKind.TRIGGER_STEP if step_based else EventKind.TRIGGER_EPOCH
        assert firing_kinds(rule) == {EventKind.BEFORE_TRAIN, after}

    def test_fail(self):
        """A schedule that is not a record is rejected."""
        with pytest.raises(TypeError, match="'schedule' must be a PiecewiseSchedule; got list"):
            OnSchedule(schedule=[(1, 2.0)])


class TestSchedulePoint:
    """`schedule_point` reads the epoch or the global step, as the schedule's unit says."""

    @given(loop_params(), st.booleans())
    def test_unit(self, params, step_based):
        """The global step for step schedules, the running epoch for epoch schedules, at every event."""
        schedule = piecewise_schedule([(1, 1.0)], unit="step" if step_based else "epoch")
        for e in loop_events(*params[:3], start_global_step=params[3]):
            want = e.global_step if step_based else e.epoch_num
            assert schedule_point(schedule, e.position) == want

    def test_example(self):
        """A position in the middle of a run."""
        pos = LoopPosition(
            bounds=LoopBounds(max_epoch=3, steps_per_epoch=4),
            epoch_num=2,
            local_step=1,
            global_step=6,
        )
        assert schedule_point(piecewise_schedule([(0, 1.0)]), pos) == 2
        assert schedule_point(piecewise_schedule([(0, 1.0)], unit="step"), pos) == 6


integral_points = st.lists(
    st.tuples(st.integers(0, 40), st.integers(-20, 20)), min_size=1, max_size=5
).map(lambda pairs: sorted(dict(pairs).items()))


class TestNonIntegralEntries:
    """`non_integral_entries` finds what an integer variable cannot hold."""

    @given(integral_points, st.lists(st.booleans(), min_size=5, max_size=5), interps)
    def test_matches_every_value(self, points, halves, interp):
        """Empty exactly when every value `value_at` gives over the schedule's range is an integer."""
        points = [(p, v + (0.5 if h else 0.0)) for (p, v), h in zip(points, halves)]
        schedule = piecewise_schedule(points, interp)
        values = [value_at(schedule, p) for p in range(points[-1][0] + 2)]
        all_integral = all(v is None or float(v).is_integer() for v in values)
        assert (non_integral_entries(schedule) == []) == all_integral

    def test_lists_entries(self):
        """Every point at fault, by index; a linear segment by its first non-integer value."""
        assert non_integral_entries(piecewise_schedule([(0, 1.5), (2, 2.0), (3, 2.25)])) == [
            "#0 (0, 1.5)",
            "#2 (3, 2.25)",
        ]
        assert non_integral_entries(
            piecewise_schedule([(0, 0.0), (2, 4.0), (5, 5.0)], interp="linear")
        ) == ["between #1 (2, 4.0) and #2 (5, 5.0): 4.33333 at 3"]
