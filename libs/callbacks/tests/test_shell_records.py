"""The builders of the trigger shells' records: the shells and the timeline tool use them."""

import pytest
from callbacks_strategies import every_k, schedule_points
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import EventKind, EveryK, OnSchedule, PiecewiseSchedule
from towerkit.callbacks.plumbing import (
    GATE_KINDS,
    SHELL_RECORDS,
    TRIGGER_KINDS,
    ShellRecord,
    callback_record,
    gate_kinds,
    gated_record,
    periodic_callback_record,
    periodic_record,
    periodic_trigger_record,
    scheduled_setter_record,
)

NAMES = [k.value for k in EventKind]


@given(st.lists(st.sampled_from(NAMES), max_size=8))
def test_gate_kinds(methods):
    """Gated names give their kinds once each in the order of GATE_KINDS; any other name, or none, fails
    naming every wrong one."""
    gated = {k.value for k in GATE_KINDS}
    bad = [m for m in methods if m not in gated]
    if bad or not methods:
        with pytest.raises(ValueError, match="'methods' must be a non-empty list") as err:
            gate_kinds(methods)
        assert f"wrong entries: {bad}" in str(err.value)
        return
    got = gate_kinds(methods)
    assert set(got) == {EventKind(m) for m in methods}
    assert list(got) == sorted(got, key=GATE_KINDS.index)
    assert gate_kinds([EventKind(m) for m in methods]) == got


@given(every_k())
def test_periodic_trigger_record(kw):
    """An EveryK at the trigger kinds."""
    built = periodic_trigger_record(kw["steps"], kw["epochs"], kw["before_train"])
    assert built == ShellRecord(trigger=EveryK(**kw), kinds=TRIGGER_KINDS)


@given(
    st.none() | st.integers(1, 5),
    st.integers(1, 5),
    st.lists(st.sampled_from([k.value for k in GATE_KINDS]), min_size=1),
)
def test_periodic_callback_record(steps, epochs, methods):
    """`periodic_record` gated at the given methods."""
    built = periodic_callback_record(steps, epochs, methods)
    assert built.trigger == periodic_record(steps, epochs)
    assert built == gated_record(periodic_record(steps, epochs), methods)
    assert built.kinds == gate_kinds(methods)


@given(
    schedule_points(),
    st.sampled_from([None, "linear"]),
    st.booleans(),
    st.booleans(),
)
def test_scheduled_setter_record(points, interp, step_based, set_at_beginning):
    """The OnSchedule of the points, at before_train and where its points are reached; the
    same from a PiecewiseSchedule record or from TOML-style lists."""
    unit = "step" if step_based else "epoch"
    built = scheduled_setter_record(points, interp, step_based, set_at_beginning)
    schedule = PiecewiseSchedule(points=points, interp=interp, unit=unit)
    assert built.trigger == OnSchedule(schedule=schedule, set_at_beginning=set_at_beginning)
    point_kind = EventKind.TRIGGER_STEP if step_based else EventKind.TRIGGER_EPOCH
    assert built.kinds == (EventKind.BEFORE_TRAIN, point_kind)
    assert scheduled_setter_record(schedule, set_at_beginning=set_at_beginning) == built
    assert (
        scheduled_setter_record([list(p) for p in points], interp, step_based, set_at_beginning)
        == built
    )


def test_fail():
    """Contradicting a schedule record, a non-record gate and a bad schedule are refused."""
    with pytest.raises(ValueError, match="the schedule record says interp=None"):
        scheduled_setter_record(PiecewiseSchedule(points=[(1, 1.0)]), interp="linear")
    with pytest.raises(TypeError, match="'pred' must be a trigger record; got function"):
        gated_record(lambda _self: True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strictly increasing"):
        scheduled_setter_record([(3, 1.0), (1, 2.0)])


def test_registry():
    """One builder per shell name; a plain callback fires after every epoch."""
    assert set(SHELL_RECORDS) == {
        "Callback",
        "PeriodicTrigger",
        "PeriodicCallback",
        "EnableCallbackIf",
        "ScheduledHyperParamSetter",
    }
    assert callback_record() == ShellRecord(
        trigger=EveryK(epochs=1), kinds=(EventKind.TRIGGER_EPOCH,)
    )
